// Command bench-bpf measures the flowlens TC program in the kernel through
// BPF_PROG_TEST_RUN, in the style of the kernel's selftests/bpf bench:
// throughput (M pkts/s) and latency (ns/pkt), median and spread over many
// repetitions, with a no-op TC program measured in the same run as the floor.
//
// Run it with `make bench-bpf` (root). See docs/benchmarks.md.
//
// Paths measured, for IPv4 and IPv6 and each flow cardinality N (the number
// of flows already in the active map, prefilled with BatchUpdate):
//
//	exist-hot  one packet repeated: always the same existing flow, warm cache
//	           (the classic BPF_PROG_TEST_RUN method)
//	exist      each run hits another of the N existing flows (the driver
//	           program rewrites the source address before each run)
//	new        each run creates a flow that is in neither map
//	carry      each run creates a flow of the previous generation (the first
//	           packet of a continuing flow after an eviction flip)
//	new-egress new, through the egress program: a host socket's packet on a
//	           device with nothing above it (here lo), certainly the first
//	           hook (bpf/order.h), which skips the previous generation
//	           (opt-in: -paths)
//	new-ovf    new, while the previous generation overflowed: each run also
//	           looks the flow up in the overflow ring's memory (a miss), as
//	           every new flow does on a node whose map filled up (opt-in:
//	           -paths)
//	full       a new-flow flood's steady state: the active map is known full
//	           (bpf/full.h), the previous generation overflowed, and each run
//	           is a flow not seen for a million runs, so every packet goes
//	           to the overflow ring and into its memory (overflow_seen, an
//	           LRU that is full after the first 16384: each insert evicts).
//	           The ring is drained between repetitions, outside the timing
//	           (at most -full-runs runs a repetition: they must fit in it).
//	           Opt-in: -paths.
//
// "features on" loads the datapath with the enrichment maps sized and the
// enrichment hooks (drops, rtt, retransmits) attached. Those are separate
// programs on kernel hooks; the TC program's code does not change, which the
// "on" rows show.
//
// The flow filter rule cases (-rules, rules.go): IPv4 exist-hot with 0, 1,
// 16 and 64 rules, the packet accepted or rejected by the last rule, against
// the floor and the no-rule program in the same repetitions.
//
// The features inside the TC programs (-tc-features, features.go): tls,
// xlat and dns on vs off (load-time constants), IPv4, packets of the feature's kind
// and other packets, against the floor and the "off" program in the same
// repetitions.
//
// The packet capture program (-capture, capture.go): its cost on a packet
// a capture's filter matches (copied) and on one it does not.
package main

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
	frames "github.com/flowlens/flowlens/internal/testkit/packet"
)

type options struct {
	reps       int
	cards      []int
	families   []string
	features   []bool
	paths      []string
	existRuns  int
	newFlows   int
	cpu        int
	jsonOut    string
	mapChoice  bool
	onlyChoice bool
	statsRow   bool
	peerObj    string // NetObserv's BPF object: its TC program runs beside ours (exist-hot, exist)
	rules      []int  // flow filter rule counts (rules.go)
	onlyRules  bool
	shape      ruleShape
	tcFeatures []string // features inside the TC programs (features.go)
	onlyFeat   bool
	capture    []string // packet capture cases (capture.go)
	onlyCap    bool
	fullRuns   int   // runs per repetition on the full path (its records fit in the ring)
	hashKey    []int // entries of the flow key size cases (hashkey.go); none: skip
	onlyHash   bool
}

func main() {
	var o options
	var cards, fams, feats, paths, rules, ruleFields, ruleAddrs, tcFeats, capCases, hashKey string
	flag.IntVar(&o.reps, "reps", 21, "repetitions per case (median and spread are over these)")
	flag.StringVar(&cards, "flows", "1,1000,10000,100000,1000000", "flow cardinalities (prefilled active-map entries)")
	flag.StringVar(&fams, "family", "ipv4,ipv6", "address families")
	flag.StringVar(&feats, "features", "off,on", "enrichment hooks off and/or on")
	flag.StringVar(&paths, "paths", "exist-hot,exist,new,carry,listed,inherit", "paths to measure")
	flag.IntVar(&o.existRuns, "exist-runs", 200000, "program runs per repetition on existing flows (at least N)")
	flag.IntVar(&o.newFlows, "new-flows", 50000, "flows created per repetition on the new and carry paths")
	flag.IntVar(&o.fullRuns, "full-runs", 6000, "runs per repetition on the full path (each sends a record to the 1 MiB overflow ring, drained between repetitions)")
	flag.IntVar(&o.cpu, "cpu", 1, "CPU to pin the measuring thread to (-1: no pinning)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the results to this JSON file (for hack/bench/plot)")
	flag.BoolVar(&o.mapChoice, "mapchoice", true, "also measure the enrichment map choice (shared hash + atomics vs per-CPU hash)")
	flag.BoolVar(&o.onlyChoice, "only-mapchoice", false, "measure only the enrichment map choice")
	flag.StringVar(&o.peerObj, "peer", "", "NetObserv's BPF object (make bench-bpf sets it from hack/bench/peer): its TC program runs beside ours, features off, exist-hot and exist")
	flag.BoolVar(&o.statsRow, "stats-cost", true, "also measure exist-hot with BPF run-time statistics on (IPv4, features off), as the agent's metrics keep them")
	flag.StringVar(&rules, "rules", "0,1,16,64", "flow filter rule counts, each with an accept and a reject case (IPv4 exist-hot, one flow; \"none\": skip)")
	flag.BoolVar(&o.onlyRules, "only-rules", false, "measure only the flow filter rule cases")
	flag.StringVar(&ruleFields, "rule-fields", "addr,ports,flags", "fields the generated rules constrain besides protocol and direction (fewer: to attribute the cost)")
	flag.StringVar(&ruleAddrs, "rule-addrs", "near", "the other rules' prefixes: near (nested in the matching rule's, on the packet's trie walk) or far (disjoint)")
	flag.StringVar(&tcFeats, "tc-features", "tls,xlat,dns,tcp,netns,overlay,overlay-outer", "features inside the TC programs to measure on vs off (IPv4, features.go; netns: shared programs vs one set per namespace; overlay: a VXLAN packet vs its inner packet; overlay-outer: --overlay-outer-flows; dns-xlat, opt-in: dns with xlat on; \"none\": skip)")
	flag.BoolVar(&o.onlyFeat, "only-tc-features", false, "measure only the features inside the TC programs")
	flag.StringVar(&capCases, "capture", "match,other,pair,pair-other", "packet capture program cases (capture.go): a matching and a non-matching packet, without and with a --peer-ip pair; \"none\": skip")
	flag.BoolVar(&o.onlyCap, "only-capture", false, "measure only the packet capture program")
	flag.StringVar(&hashKey, "hashkey", "", "also measure the flow key's size (hashkey.go): 40- vs 16-byte keys in maps shaped like the flow map, at these entry counts (e.g. 1k,50k,100k)")
	flag.BoolVar(&o.onlyHash, "only-hashkey", false, "measure only the flow key size cases")
	flag.Parse()
	var err error
	if o.capture, err = parseCapture(capCases); err != nil {
		fatalf("%v", err)
	}
	if o.tcFeatures, err = parseFeatures(tcFeats); err != nil {
		fatalf("%v", err)
	}
	if o.rules, err = parseRules(rules); err != nil {
		fatalf("%v", err)
	}
	if o.shape, err = parseShape(ruleFields, ruleAddrs); err != nil {
		fatalf("%v", err)
	}
	for _, s := range strings.Split(cards, ",") {
		n, err := parseCount(s)
		if err != nil || n < 1 {
			fatalf("bad -flows entry %q", s)
		}
		o.cards = append(o.cards, n)
	}
	for _, s := range strings.Split(hashKey, ",") {
		if s == "" {
			continue
		}
		n, err := parseCount(s)
		if err != nil || n < 1 {
			fatalf("bad -hashkey entry %q", s)
		}
		o.hashKey = append(o.hashKey, n)
	}
	o.families = strings.Split(fams, ",")
	for _, f := range strings.Split(feats, ",") {
		o.features = append(o.features, f == "on")
	}
	o.paths = strings.Split(paths, ",")

	runtime.LockOSThread()
	if o.cpu >= 0 {
		var set unix.CPUSet
		set.Set(o.cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			fatalf("pin to CPU %d: %v", o.cpu, err)
		}
	}
	header(o)
	var res results
	res.Machine = machine()
	if probe, err = newStatsProbe(); err != nil {
		fatalf("load the no-op program: %v", err)
	}
	only := o.onlyChoice || o.onlyRules || o.onlyFeat || o.onlyCap || o.onlyHash
	if !only {
		for _, fam := range o.families {
			for _, feat := range o.features {
				for _, n := range o.cards {
					rows, err := runConfig(o, fam, n, feat)
					if err != nil {
						fatalf("%s, %d flows, features %v: %v", fam, n, onOff(feat), err)
					}
					res.Datapath = append(res.Datapath, rows...)
				}
			}
		}
		printDatapath(res.Datapath)
	}
	if len(o.rules) > 0 && (!only || o.onlyRules) {
		rows, err := runRules(o, o.rules)
		if err != nil {
			fatalf("flow filter rules: %v", err)
		}
		res.Filter = rows
		printRules(rows, o.shape)
	}
	if len(o.tcFeatures) > 0 && (!only || o.onlyFeat) {
		rows, err := runFeatures(o, o.tcFeatures)
		if err != nil {
			fatalf("features inside the TC programs: %v", err)
		}
		res.TCFeatures = rows
		printFeatures(rows)
	}
	if len(o.capture) > 0 && (!only || o.onlyCap) {
		rows, err := runCapture(o, o.capture)
		if err != nil {
			fatalf("packet capture: %v", err)
		}
		res.Capture = rows
		printCapture(rows)
	}
	if len(o.hashKey) > 0 && (!only || o.onlyHash) {
		rows, err := runHashKey(o, o.hashKey)
		if err != nil {
			fatalf("flow key size: %v", err)
		}
		res.HashKey = rows
	}
	if (o.mapChoice && !only) || o.onlyChoice {
		rows, err := runMapChoice(o)
		if err != nil {
			fatalf("map choice: %v", err)
		}
		res.MapChoice = rows
	}
	flagged := 0
	for _, r := range append(slices.Clone(res.Datapath), res.MapChoice...) {
		if r.StatsOn && r.Path != "exist-hot/stats" {
			flagged++
		}
	}
	for _, r := range res.Filter {
		if r.StatsOn {
			flagged++
		}
	}
	for _, r := range res.TCFeatures {
		if r.StatsOn {
			flagged++
		}
	}
	for _, r := range res.Capture {
		if r.StatsOn {
			flagged++
		}
	}
	if flagged > 0 {
		fmt.Printf("WARNING: %d case(s) ran while another process had BPF run-time statistics on (marked * and\n", flagged)
		fmt.Println("\"stats_on\" in the JSON); every program run, the floor's included, then pays two clock reads.")
		fmt.Println()
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			fatalf("%v", err)
		}
		fmt.Printf("\nresults written to %s\n", o.jsonOut)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-bpf: "+format+"\n", args...)
	os.Exit(1)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func parseCount(s string) (int, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	mult := 1
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1000, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "m"):
		mult, s = 1000000, strings.TrimSuffix(s, "m")
	}
	n, err := strconv.Atoi(s)
	return n * mult, err
}

func human(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// ---- results ----

type results struct {
	Machine   map[string]string `json:"machine"`
	Datapath  []row             `json:"datapath"`
	MapChoice []row             `json:"map_choice,omitempty"`
	// Filter holds the flow filter rule cases (rules.go).
	Filter []filterRow `json:"filter_rules,omitempty"`
	// TCFeatures holds the features inside the TC programs, on vs off (features.go).
	TCFeatures []featRow `json:"tc_features,omitempty"`
	// Capture holds the packet capture program's cases (capture.go).
	Capture []captureRow `json:"capture,omitempty"`
	// HashKey holds the flow key size cases (hashkey.go).
	HashKey []hashKeyRow `json:"hash_key,omitempty"`
}

// stat is a distribution of ns per packet over the repetitions.
type stat struct {
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// KernelMedian is the median of the kernel's own per-run figure
	// (BPF_PROG_TEST_RUN's duration, whole ns, timer paused on resched).
	KernelMedian float64 `json:"kernel_median"`
}

type row struct {
	Family   string `json:"family,omitempty"`
	Path     string `json:"path"`
	Flows    int    `json:"flows"`
	Features string `json:"features,omitempty"`
	CPUs     int    `json:"cpus,omitempty"`
	Prog     stat   `json:"prog"`
	Floor    stat   `json:"floor"`
	// Ratio is the median of the per-repetition ratios prog/floor (each
	// repetition measures both back to back).
	Ratio float64 `json:"ratio"`
	Net   float64 `json:"net_ns"` // median prog - median floor
	Runs  int     `json:"runs_per_rep"`
	Reps  int     `json:"reps"`
	Note  string  `json:"note,omitempty"`
	// Failed counts program runs whose map insert failed (map choice only).
	Failed uint64 `json:"failed,omitempty"`
	// StatsOn: BPF run-time statistics were on during the case (see statsProbe).
	StatsOn bool `json:"stats_on,omitempty"`
	// Peer is NetObserv's program in the same repetitions (-peer), with its
	// ratio to the floor and ours to it (medians of per-repetition ratios).
	Peer      *stat   `json:"peer,omitempty"`
	PeerRatio float64 `json:"peer_ratio,omitempty"`
	VsPeer    float64 `json:"vs_peer,omitempty"`
}

func summarize(user, kernel []float64) stat {
	s := slices.Clone(user)
	slices.Sort(s)
	k := slices.Clone(kernel)
	slices.Sort(k)
	return stat{Median: quantile(s, 0.5), P10: quantile(s, 0.1), P90: quantile(s, 0.9),
		Min: s[0], Max: s[len(s)-1], KernelMedian: quantile(k, 0.5)}
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return quantile(s, 0.5)
}

// ---- measuring ----

// measure runs prog `runs` times on pkt in one BPF_PROG_TEST_RUN and returns
// ns per run timed around the syscall (sub-ns resolution; includes one
// syscall, negligible at these run counts) and the kernel's figure.
func measure(prog *ebpf.Program, pkt []byte, runs int, wantRet uint32) (user, kernel float64, err error) {
	start := time.Now()
	ret, d, err := prog.Benchmark(pkt, runs, nil)
	el := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	if ret != wantRet {
		return 0, 0, fmt.Errorf("program returned %d, want %d", int32(ret), int32(wantRet))
	}
	return float64(el.Nanoseconds()) / float64(runs), float64(d.Nanoseconds()), nil
}

const tcActUnspec = ^uint32(0) // -1

// ---- packets and keys ----

const (
	ipv4Base  = 0x0a000000 // 10.0.0.0: flow i has source 10.0.0.0 + i
	v4AddrOff = 14 + 12    // source address in an untagged IPv4 frame
	v6AddrOff = 14 + 8 + 12
)

// packet builds a TCP ACK frame, 32 bytes of payload, whose source address
// encodes flow index 0: 10.0.0.0 → 10.100.0.1 or fd00:: → fd00::1.
func packet(fam string) []byte {
	tcp := frames.TCP(40000, 80, frames.ACK)
	payload := frames.Payload(32)
	n := len(tcp) + len(payload)
	if fam == "ipv6" {
		return frames.Cat(frames.Eth(frames.EtherTypeIPv6), frames.IPv6(frames.ProtoTCP, "fd00::", "fd00::1", n), tcp, payload)
	}
	return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoTCP, "10.0.0.0", "10.100.0.1", n), tcp, payload)
}

func addrOff(fam string) (off, base uint32) {
	if fam == "ipv6" {
		return v6AddrOff, 0
	}
	return v4AddrOff, ipv4Base
}

// keys returns the flow keys of indexes [from, to): the template key with
// the last four source address bytes set as the driver sets them.
func keys(tmpl datapath.FlowKey, base uint32, from, to int) []datapath.FlowKey {
	out := make([]datapath.FlowKey, to-from)
	for i := range out {
		k := tmpl
		binary.BigEndian.PutUint32(k.SrcIp[12:], base+uint32(from+i))
		out[i] = k
	}
	return out
}

// stride returns a step close to 0.618·n and coprime with n, so that
// i → i+stride mod n visits every index once per n runs, in scattered order.
func stride(n int) uint32 {
	if n <= 1 {
		return 0
	}
	s := int(float64(n) * 0.618)
	if s < 1 {
		s = 1
	}
	for gcd(s, n) != 1 {
		s--
	}
	return uint32(s)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// driver loads the driver program cycling through flow indexes
// [first, first+n) and tail-calling target.
func driver(target *ebpf.Program, fam string, first, n int) (*ebpf.Program, func(), error) {
	spec, err := LoadDriver()
	if err != nil {
		return nil, nil, err
	}
	off, base := addrOff(fam)
	for name, v := range map[string]uint32{"addr_off": off, "base": base, "first": uint32(first), "n": uint32(n), "stride": stride(n)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	var objs DriverObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, nil, fmt.Errorf("load driver: %w", err)
	}
	if err := objs.Target.Put(uint32(0), target); err != nil {
		objs.Close()
		return nil, nil, fmt.Errorf("driver target: %w", err)
	}
	return objs.Driver, func() { objs.Close() }, nil
}

// ---- one configuration: family × flows × features ----

func runConfig(o options, fam string, n int, features bool) ([]row, error) {
	extra := o.newFlows
	dp, err := datapath.Load(datapath.Config{MaxFlows: uint32(n + extra), Sampling: 1, Enrichment: features})
	if err != nil {
		return nil, err
	}
	defer dp.Close()
	if err := watchLoopback(dp); err != nil {
		return nil, err
	}
	note := ""
	if features {
		hooks, err := registry.Plans()
		if err != nil {
			return nil, err
		}
		var running []string
		for _, st := range dp.StartHooks(hooks) {
			if st.Running {
				running = append(running, st.Program)
			}
		}
		note = "hooks attached: " + strings.Join(running, ",")
	}
	var noop datapath.NoopObjects
	if err := datapath.LoadNoopObjects(&noop, nil); err != nil {
		return nil, err
	}
	defer noop.Close()
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		return nil, err
	}
	real := progs.Ingress
	pkt := packet(fam)
	var pr *peer
	if o.peerObj != "" && !features {
		if pr, err = loadPeer(o.peerObj, n+extra, pkt); err != nil {
			return nil, fmt.Errorf("peer: %w", err)
		}
		defer pr.Close()
		if err := pr.warm(fam, n, pkt); err != nil {
			return nil, fmt.Errorf("peer warm-up: %w", err)
		}
	}

	// Calibrate: the key and value the program itself writes for flow 0.
	var ctl uint32 // generation: its parity indexes the active map
	if err := dp.Maps.Control.Lookup(uint32(0), &ctl); err != nil {
		return nil, err
	}
	gen := ctl
	if gen == 0 { // a generation with a previous one (new-ovf), same parity
		gen = 2
		if err := dp.Maps.Control.Put(uint32(0), gen); err != nil {
			return nil, err
		}
	}
	ctl &= 1
	cur, prev := dp.Maps.Flows[ctl], dp.Maps.Flows[1-ctl]
	if _, err := real.Run(&ebpf.RunOptions{Data: pkt}); err != nil {
		return nil, err
	}
	var tk datapath.FlowKey
	var tv datapath.FlowValue
	if err := cur.NextKey(nil, &tk); err != nil {
		return nil, fmt.Errorf("calibration run created no flow: %w", err)
	}
	if err := cur.Lookup(&tk, &tv); err != nil {
		return nil, err
	}
	if err := cur.Delete(&tk); err != nil {
		return nil, err
	}
	_, base := addrOff(fam)
	tv.Packets, tv.Bytes = 1, uint64(len(pkt))

	// Prefill: the active map holds flows [0, n); the previous generation
	// holds them too (a steady state), plus [n, n+extra) for the carry path.
	// [n+extra, n+2·extra) is in neither map: the new path.
	existing := keys(tk, base, 0, n)
	if err := fill(cur, existing, tv); err != nil {
		return nil, fmt.Errorf("prefill active map: %w", err)
	}
	carry := keys(tk, base, n, n+extra)
	fresh := keys(tk, base, n+extra, n+2*extra)
	if err := fill(prev, existing, tv); err != nil {
		return nil, fmt.Errorf("prefill previous map: %w", err)
	}
	if slices.Contains(o.paths, "carry") {
		if err := fill(prev, carry, tv); err != nil {
			return nil, fmt.Errorf("prefill previous map: %w", err)
		}
	}
	// listed and inherit: the flows' counting observation is another
	// interface (ifaces[0]); this program's is listed (ifaces[1]).
	lv := tv
	lv.Ifaces[1] = tv.Ifaces[0]
	lv.Ifaces[0].Ifindex += 1000
	lv.N_ifaces = 2
	lv.ListedOnly = 1 << 1

	paths := slices.Clone(o.paths)
	if o.statsRow && !features && fam == "ipv4" && slices.Contains(o.paths, "exist-hot") {
		paths = append(paths, "exist-hot/stats")
	}
	var rows []row
	for _, path := range paths {
		r := row{Family: fam, Path: path, Flows: n, Features: onOff(features), Reps: o.reps, Note: note}
		real := real
		withStats := false
		if base, ok := strings.CutSuffix(path, "/stats"); ok {
			path, withStats = base, true
			r.Note = "BPF run-time statistics on (BPF_ENABLE_STATS), as the agent keeps them for its metrics: floor and program both pay the clock reads"
		}
		var progRun, floorRun, peerRun *ebpf.Program
		var peerRet uint32
		var runs int
		var after func() error
		var newPerRep, overflowPerRep uint64
		if err := dp.Maps.Control.Put(datapath.ControlFlowsFull, uint32(0)); err != nil { // set by full only
			return nil, err
		}
		switch path {
		case "exist-hot":
			progRun, floorRun, runs = real, noop.Noop, o.existRuns
		case "exist", "listed":
			if path == "listed" { // a listed hook of existing flows (run after exist: rewrites them)
				if err := fill(cur, existing, lv); err != nil {
					return nil, err
				}
			}
			runs = max(o.existRuns, n)
			p, closeP, err := driver(real, fam, 0, n)
			if err != nil {
				return nil, err
			}
			defer closeP()
			f, closeF, err := driver(noop.Noop, fam, 0, n)
			if err != nil {
				return nil, err
			}
			defer closeF()
			progRun, floorRun = p, f
		case "new", "carry", "inherit", "new-ovf", "new-egress":
			first, ks := n+extra, fresh
			if path == "new-egress" {
				real = progs.Egress
			}
			// new-ovf: the previous generation sent packets to the
			// overflow ring (bpf/types.h, enum control_slot); the others:
			// it did not.
			mark := uint32(0)
			if path == "new-ovf" {
				mark = gen // (gen-1) + 1
			}
			if err := dp.Maps.Control.Put(datapath.ControlOverflowed+((gen-1)&1), mark); err != nil {
				return nil, err
			}
			if path == "carry" {
				first, ks = n, carry
			}
			if path == "inherit" { // carried over from a generation that counted it elsewhere
				if err := fill(prev, carry, lv); err != nil {
					return nil, err
				}
				first, ks = n, carry
			}
			runs, newPerRep = extra, uint64(extra)
			p, closeP, err := driver(real, fam, first, extra)
			if err != nil {
				return nil, err
			}
			defer closeP()
			f, closeF, err := driver(noop.Noop, fam, first, extra)
			if err != nil {
				return nil, err
			}
			defer closeF()
			progRun, floorRun = p, f
			after = func() error {
				_, err := cur.BatchDelete(ks, nil)
				return err
			}
		case "full":
			// Known full, and the previous generation overflowed: each
			// packet looks its flow up in both maps and overflow_seen,
			// classifies the hook, sends a record and remembers the flow.
			if err := dp.Maps.Control.Put(datapath.ControlFlowsFull, gen+1); err != nil {
				return nil, err
			}
			if err := dp.Maps.Control.Put(datapath.ControlOverflowed+((gen-1)&1), gen); err != nil {
				return nil, err
			}
			const distinct = 1 << 20
			first := n + 2*extra
			runs, overflowPerRep = o.fullRuns, uint64(o.fullRuns)
			p, closeP, err := driver(real, fam, first, distinct)
			if err != nil {
				return nil, err
			}
			defer closeP()
			f, closeF, err := driver(noop.Noop, fam, first, distinct)
			if err != nil {
				return nil, err
			}
			defer closeF()
			progRun, floorRun = p, f
			rd, err := ringbuf.NewReader(dp.Maps.Overflow)
			if err != nil {
				return nil, err
			}
			defer rd.Close()
			after = func() error { return drainRing(rd) }
		default:
			return nil, fmt.Errorf("unknown path %q", path)
		}
		if pr != nil && !withStats && path != "listed" {
			// The same packets through NetObserv's program, its map holding
			// the same flows (warm), through the same driver.
			peerRun, peerRet = pr.prog, pr.ret
			first, count := 0, n
			switch path {
			case "new", "new-ovf", "new-egress":
				first, count = n+extra, extra
			case "carry", "inherit":
				first, count = n, extra
			}
			if path != "exist-hot" {
				d, closeD, err := driver(pr.prog, fam, first, count)
				if err != nil {
					return nil, err
				}
				defer closeD()
				peerRun = d
			}
			if after != nil { // an insert path: the peer forgets its new flows too
				ours, ks := after, keys(tk, base, first, first+count)
				after = func() error {
					if err := ours(); err != nil {
						return err
					}
					return pr.forget(ks)
				}
			}
		}
		r.Runs = runs
		before, err := dp.ReadCounters()
		if err != nil {
			return nil, err
		}
		// Measured while BPF statistics are off; a case during which another
		// process turned them on is measured again (twice at most, then flagged).
		var c caseSamples
		totalReps := 0
		for attempt := 0; ; attempt++ {
			probe.waitOff(2 * time.Minute)
			var stats io.Closer
			if withStats {
				var err error
				if stats, err = ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err != nil {
					return nil, fmt.Errorf("enable BPF stats: %w", err)
				}
			}
			var err error
			c, err = measureCase(floorRun, progRun, pkt, runs, o.reps, after, peerRun, peerRet)
			totalReps += o.reps
			if stats != nil {
				stats.Close()
				probe.on() // reset its run count
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if withStats {
				r.StatsOn = true
				break
			}
			if on := probe.on(); !on || attempt == 2 {
				r.StatsOn = on
				break
			}
		}
		// Sanity: the path did what it claims (no surprise inserts, no overflow).
		cnt, err := dp.ReadCounters()
		if err != nil {
			return nil, err
		}
		created := cnt[datapath.CounterNewFlows] - before[datapath.CounterNewFlows]
		if want := newPerRep * uint64(totalReps); created != want {
			return nil, fmt.Errorf("%s: %d flows created, want %d", path, created, want)
		}
		ovRecs := cnt[datapath.CounterOverflowRecords] - before[datapath.CounterOverflowRecords]
		ovLost := cnt[datapath.CounterOverflowLost] - before[datapath.CounterOverflowLost]
		if want := overflowPerRep * uint64(totalReps); ovRecs != want || ovLost != 0 {
			return nil, fmt.Errorf("%s: %d packets sent to the overflow ring and %d lost there, want %d and 0", path, ovRecs, ovLost, want)
		}
		r.Prog, r.Floor = summarize(c.pu, c.pk), summarize(c.fu, c.fk)
		r.Ratio = median(c.ratios)
		r.Net = r.Prog.Median - r.Floor.Median
		peerNote := ""
		if peerRun != nil {
			s := summarize(c.nu, c.nk)
			r.Peer, r.PeerRatio, r.VsPeer = &s, median(c.nratios), median(c.vs)
			peerNote = fmt.Sprintf("  netobserv %7.2f ×%.2f  ours/netobserv %.2f", s.Median, r.PeerRatio, r.VsPeer)
		}
		rows = append(rows, r)
		fmt.Fprintf(os.Stderr, "  %-5s %-18s flows=%-5s features=%-3s  %7.2f ns/pkt  floor %6.2f  ×%.2f%s\n",
			fam, r.Path, human(n), onOff(features), r.Prog.Median, r.Floor.Median, r.Ratio, peerNote)
	}
	return rows, nil
}

type caseSamples struct {
	pu, pk, fu, fk, ratios []float64
	nu, nk, nratios, vs    []float64 // the peer's, when it runs
}

// measureCase alternates floor and program (and the peer, when not nil),
// reps times; after runs after each repetition (outside the timing).
func measureCase(floor, prog *ebpf.Program, pkt []byte, runs, reps int, after func() error, peer *ebpf.Program, peerRet uint32) (caseSamples, error) {
	var c caseSamples
	for rep := 0; rep < reps; rep++ {
		if peer != nil {
			u, k, err := measure(peer, pkt, runs, peerRet)
			if err != nil {
				return c, fmt.Errorf("peer: %w", err)
			}
			c.nu, c.nk = append(c.nu, u), append(c.nk, k)
		}
		u, k, err := measure(floor, pkt, runs, tcActUnspec)
		if err != nil {
			return c, fmt.Errorf("floor: %w", err)
		}
		c.fu, c.fk = append(c.fu, u), append(c.fk, k)
		u2, k2, err := measure(prog, pkt, runs, tcActUnspec)
		if err != nil {
			return c, err
		}
		c.pu, c.pk = append(c.pu, u2), append(c.pk, k2)
		c.ratios = append(c.ratios, u2/u)
		if peer != nil {
			n := c.nu[len(c.nu)-1]
			c.nratios, c.vs = append(c.nratios, n/u), append(c.vs, u2/n)
		}
		if after != nil {
			if err := after(); err != nil {
				return c, fmt.Errorf("clean up new flows: %w", err)
			}
		}
	}
	return c, nil
}

// drainRing reads every record in the overflow ring (the full path's clean-up).
func drainRing(rd *ringbuf.Reader) error {
	rd.SetDeadline(time.Now())
	defer rd.SetDeadline(time.Time{})
	for {
		if _, err := rd.Read(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			return err
		}
	}
}

func fill(m *ebpf.Map, ks []datapath.FlowKey, v datapath.FlowValue) error {
	const chunk = 65536
	vals := make([]datapath.FlowValue, min(chunk, len(ks)))
	for i := range vals {
		vals[i] = v
	}
	for i := 0; i < len(ks); i += chunk {
		end := min(i+chunk, len(ks))
		if _, err := m.BatchUpdate(ks[i:end], vals[:end-i], nil); err != nil {
			return err
		}
	}
	return nil
}

// statsProbe tells whether BPF run-time statistics are on. They cost every
// program run two clock reads (sched_clock: ~15-45 ns each in this VM), the
// floor's included, so a case measured while they are on is not comparable.
// Another process can turn them on at any time (kernel.bpf_stats_enabled, or
// any holder of a BPF_ENABLE_STATS descriptor, such as a metrics test): the
// probe's no-op program counts its own runs only while they are on.
type statsProbe struct {
	objs datapath.NoopObjects
	last uint64
}

func newStatsProbe() (*statsProbe, error) {
	p := &statsProbe{}
	if err := datapath.LoadNoopObjects(&p.objs, nil); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *statsProbe) on() bool {
	if _, err := p.objs.Noop.Run(&ebpf.RunOptions{Data: packet("ipv4")}); err != nil {
		return false
	}
	st, err := p.objs.Noop.Stats()
	if err != nil {
		return false
	}
	on := st.RunCount != p.last
	p.last = st.RunCount
	return on
}

// waitOff waits up to max for the statistics to be off; it reports whether
// they are.
func (p *statsProbe) waitOff(max time.Duration) bool {
	deadline := time.Now().Add(max)
	for p.on() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
	return true
}

var probe *statsProbe

// ---- output ----

func header(o options) {
	fmt.Printf("flowlens bench-bpf: BPF_PROG_TEST_RUN, %d repetitions per case, measuring thread pinned to CPU %d\n", o.reps, o.cpu)
	m := machine()
	fmt.Printf("machine: %s, %s CPUs, kernel %s, %s\n\n", m["cpu"], m["cpus"], m["kernel"], m["go"])
}

func machine() map[string]string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	return map[string]string{
		"cpu":    model,
		"cpus":   strconv.Itoa(runtime.NumCPU()),
		"kernel": unix.ByteSliceToString(u.Release[:]),
		"go":     runtime.Version(),
		"date":   time.Now().UTC().Format(time.RFC3339),
	}
}

func printDatapath(rows []row) {
	fmt.Println("TC program flowlens_ingress vs the no-op floor (same path, same run)")
	fmt.Println("median over repetitions; spread = p10..p90 of ns/pkt; ×floor = median of per-repetition ratios")
	fmt.Println()
	fmt.Printf("%-5s %-18s %6s %4s | %9s %8s %15s | %8s %8s | %6s %7s\n",
		"fam", "path", "flows", "feat", "M pkts/s", "ns/pkt", "p10..p90", "floor ns", "floor M", "×floor", "net ns")
	fmt.Println(strings.Repeat("-", 113))
	sorted := slices.Clone(rows)
	order := map[string]int{"exist-hot": 0, "exist-hot/stats": 1, "exist": 2, "new": 3, "new-egress": 4, "new-ovf": 5, "full": 6, "carry": 7, "listed": 8, "inherit": 9}
	slices.SortStableFunc(sorted, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.Family, b.Family), cmp.Compare(order[a.Path], order[b.Path]),
			cmp.Compare(a.Features, b.Features), cmp.Compare(a.Flows, b.Flows))
	})
	last := ""
	for _, r := range sorted {
		if g := r.Family + r.Path + r.Features; g != last && last != "" {
			fmt.Println()
		}
		last = r.Family + r.Path + r.Features
		mark := ""
		if r.StatsOn {
			mark = " *"
		}
		if r.Peer != nil {
			mark += fmt.Sprintf(" | netobserv %7.2f ns ×%.2f, ours ×%.2f of it", r.Peer.Median, r.PeerRatio, r.VsPeer)
		}
		fmt.Printf("%-5s %-18s %6s %4s | %9.2f %8.2f %15s | %8.2f %8.2f | %6.2f %7.2f%s\n",
			r.Family, r.Path, human(r.Flows), r.Features, 1000/r.Prog.Median, r.Prog.Median,
			fmt.Sprintf("%.2f..%.2f", r.Prog.P10, r.Prog.P90), r.Floor.Median, 1000/r.Floor.Median, r.Ratio, r.Net, mark)
	}
	fmt.Println()
}

// watchLoopback gives the benchmark's namespace a loopback zone, as the
// agent does before it attaches to a namespace's lo (internal/agent,
// zones.go): BPF_PROG_TEST_RUN packets are on that lo, and a watched
// device's namespace always has its zones.
func watchLoopback(dp *datapath.Datapath) error {
	c, err := ifaces.NetnsCookie("")
	if err != nil {
		return err
	}
	return dp.Maps.SetZones(c, datapath.Zones{Lo: 1})
}
