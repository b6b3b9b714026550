package main

// The flow filter rules (issue #14, bpf/filter.h): IPv4 exist-hot, one
// existing flow, the same packet repeated, with 0, 1, 16 and 64 rules.
//
// With N rules the packet is decided by the rule of last precedence (bit
// N-1): the N-1 others are more specific (a /24 inside its /16, a /24 inside
// its peer's /16), so they sort before it and the packet's LPM-trie walks go
// through their nodes. Every rule constrains addresses, ports, protocol and
// (TCP rules) flags, so the classifier does all its lookups. "accept": that
// rule accepts, the default rejects; "reject": that rule rejects, the
// default accepts. The no-rule program (today's fast path) runs in the same
// repetitions as each case, so ×no-rule is a median of back-to-back ratios.

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/flowrules"
	frames "github.com/flowlens/flowlens/internal/testkit/packet"
)

// filterRow is one rule-count × action case. The embedded row carries the
// program's and floor's figures as in "datapath" (family ipv4, path
// exist-hot, flows 1, features off).
type filterRow struct {
	row
	Rules  int    `json:"rules"`
	Action string `json:"action"` // "none" (0 rules), "accept" or "reject"
	// NoRules is the program loaded without rules, measured in the same
	// repetitions; VsNoRules the median of the per-repetition ratios
	// prog/no-rules, VsNoRulesMin and VsNoRulesMax their extremes.
	NoRules      *stat   `json:"no_rules,omitempty"`
	VsNoRules    float64 `json:"vs_no_rules"`
	VsNoRulesMin float64 `json:"vs_no_rules_min"`
	VsNoRulesMax float64 `json:"vs_no_rules_max"`
	// Matched is the rule the kernel counted the packets under, by
	// precedence position (-1: the default action; 0 rules: not checked).
	Matched int `json:"matched_rule"`
	// Fields is what the generated rules constrain (-rule-fields, -rule-addrs).
	Fields string `json:"rule_fields,omitempty"`
}

// The measured packet, as packet("ipv4") builds it.
var (
	benchSrc   = netip.MustParseAddr("10.0.0.0")
	benchDst   = netip.MustParseAddr("10.100.0.1")
	benchSPort = uint16(40000)
	benchDPort = uint16(80)
)

// ruleShape says what the generated rules constrain (-rule-fields,
// -rule-addrs): by default everything the classifier can look up without an
// interface, the other rules' prefixes nested in the target's ("near": the
// packet's trie walks go through their nodes). Fewer fields or disjoint
// prefixes ("far") attribute the cost.
type ruleShape struct {
	addr, ports, flags bool
	far                bool
}

func parseShape(fields, addrs string) (ruleShape, error) {
	var sh ruleShape
	for _, f := range strings.Split(fields, ",") {
		switch strings.TrimSpace(f) {
		case "addr":
			sh.addr = true
		case "ports":
			sh.ports = true
		case "flags":
			sh.flags = true
		case "", "proto":
		default:
			return sh, fmt.Errorf("bad -rule-fields entry %q: addr, ports, flags (proto is always used)", f)
		}
	}
	switch addrs {
	case "near":
	case "far":
		sh.far = true
	default:
		return sh, fmt.Errorf("bad -rule-addrs %q: near or far", addrs)
	}
	return sh, nil
}

func (sh ruleShape) fields() flowrules.Fields {
	f := flowrules.FieldProto | flowrules.FieldDir
	if sh.addr {
		f |= flowrules.FieldAddr
	}
	if sh.ports {
		f |= flowrules.FieldPorts
	}
	if sh.flags {
		f |= flowrules.FieldTCPFlags
	}
	return f
}

func (sh ruleShape) String() string {
	var out []string
	if sh.addr {
		out = append(out, map[bool]string{false: "addresses (nested prefixes)", true: "addresses (disjoint prefixes)"}[sh.far])
	}
	if sh.ports {
		out = append(out, "ports")
	}
	out = append(out, "protocol", "direction")
	if sh.flags {
		out = append(out, "TCP flags")
	}
	return strings.Join(out, ", ")
}

// benchRules returns n rules whose last-precedence rule, and no other,
// matches the measured packet, with the given action.
func benchRules(n int, last flowrules.Action, sh ruleShape) []flowrules.Rule {
	u8 := func(v uint8) *uint8 { return &v }
	flags := []flowrules.TCPFlags{flowrules.SYN, flowrules.FIN, flowrules.RST | flowrules.ACK, flowrules.SYN | flowrules.ACK, flowrules.PSH | flowrules.ACK}
	var rules []flowrules.Rule
	for i := 0; i < n-1; i++ {
		r := flowrules.Rule{
			Name:      fmt.Sprintf("filler-%d", i),
			Action:    []flowrules.Action{flowrules.Accept, flowrules.Reject}[i%2],
			Direction: []flowrules.Direction{flowrules.AnyDirection, flowrules.Ingress, flowrules.Egress}[i%3],
		}
		if sh.addr && sh.far { // disjoint from the packet's addresses and the target's prefixes
			r.CIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, byte(i), 0}), 24)
			r.PeerCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, byte(i), 0}), 24)
		} else if sh.addr { // inside the target's prefixes, never holding the packet's addresses
			r.CIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i + 1), 0}), 24)
			r.PeerCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 100, byte(i + 1), 0}), 24)
		}
		if sh.ports {
			r.SourcePorts = []flowrules.PortRange{{First: uint16(20000 + 100*i), Last: uint16(20000 + 100*i + 49)}}
			r.DestinationPorts = []flowrules.PortRange{{First: uint16(1000 + i), Last: uint16(1000 + i)}}
		}
		switch {
		case i%4 == 3:
			r.Protocol = u8(flowrules.UDP)
		case sh.flags:
			r.Protocol = u8(flowrules.TCP)
			r.TCPFlags = []flowrules.TCPFlags{flags[i%len(flags)]}
		default: // not TCP: without flags, a TCP rule could match the packet
			r.Protocol = u8([]uint8{flowrules.SCTP, flowrules.ICMP, 47 /* GRE */}[i%4])
		}
		if sh.ports && !slices.Contains([]uint8{flowrules.TCP, flowrules.UDP, flowrules.SCTP}, *r.Protocol) {
			r.Protocol = u8(flowrules.SCTP)
		}
		rules = append(rules, r)
	}
	t := flowrules.Rule{
		Name:      "target",
		Action:    last,
		Direction: flowrules.Ingress,
		Protocol:  u8(flowrules.TCP),
	}
	if sh.addr {
		t.CIDR, t.PeerCIDR = netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("10.100.0.0/16")
	}
	if sh.ports {
		t.SourcePorts = []flowrules.PortRange{{First: 32768, Last: 60999}}
		t.DestinationPorts = []flowrules.PortRange{{First: 80, Last: 80}, {First: 443, Last: 443}}
	}
	if sh.flags {
		t.TCPFlags = []flowrules.TCPFlags{flowrules.ACK}
	}
	return append(rules, t)
}

// benchTable compiles benchRules and checks, with the Go reference, that
// the packet picks the last rule.
func benchTable(n int, action flowrules.Action, sh ruleShape) (*flowrules.Table, error) {
	def := flowrules.Reject
	if action == flowrules.Reject {
		def = flowrules.Accept
	}
	t, err := flowrules.Compile(benchRules(n, action, sh), def)
	if err != nil {
		return nil, err
	}
	if want := sh.fields(); t.Used&^flowrules.FieldProto != want&^flowrules.FieldProto {
		return nil, fmt.Errorf("%d rules use %v, want %v", n, t.Used, want)
	}
	p := flowrules.Packet{Src: benchSrc, Dst: benchDst, Proto: flowrules.TCP, SrcPort: benchSPort, DstPort: benchDPort,
		TCPFlags: uint8(frames.ACK), Direction: flowrules.Ingress}
	got, ok := t.Match(p)
	if !ok || got != n-1 || t.Rules[got].Name != "target" || t.Action(p) != action {
		return nil, fmt.Errorf("%d rules: the packet matches rule %d (%v), want the target at %d, %v", n, got, ok, n-1, action)
	}
	return t, nil
}

// runRules measures the rule counts in counts (0: the no-rule program
// alone) for both actions.
func runRules(o options, counts []int) ([]filterRow, error) {
	pkt := packet("ipv4")
	var noop datapath.NoopObjects
	if err := datapath.LoadNoopObjects(&noop, nil); err != nil {
		return nil, err
	}
	defer noop.Close()
	load := func(t *flowrules.Table) (*datapath.Datapath, *ebpf.Program, error) {
		dp, err := datapath.Load(datapath.Config{MaxFlows: uint32(1 + o.newFlows), Sampling: 1, FlowRules: t})
		if err != nil {
			return nil, nil, err
		}
		if err := watchLoopback(dp); err != nil {
			dp.Close()
			return nil, nil, err
		}
		progs, err := dp.ProgramsFor(0)
		if err != nil {
			dp.Close()
			return nil, nil, err
		}
		// Warm: an accepted packet creates its flow here, the one every
		// later run finds (exist-hot, one flow).
		if _, err := progs.Ingress.Run(&ebpf.RunOptions{Data: pkt}); err != nil {
			dp.Close()
			return nil, nil, err
		}
		return dp, progs.Ingress, nil
	}
	base, baseProg, err := load(nil)
	if err != nil {
		return nil, fmt.Errorf("load without rules: %w", err)
	}
	defer base.Close()

	var rows []filterRow
	for _, n := range counts {
		actions := []flowrules.Action{flowrules.Accept, flowrules.Reject}
		if n == 0 {
			actions = []flowrules.Action{0}
		}
		for _, action := range actions {
			r := filterRow{row: row{Family: "ipv4", Path: "exist-hot", Flows: 1, Features: "off", Reps: o.reps, Runs: o.existRuns},
				Rules: n, Action: "none", Matched: -1}
			dp, prog, peer := base, baseProg, (*ebpf.Program)(nil)
			if n > 0 {
				r.Action = action.String()
				r.Fields = o.shape.String()
				t, err := benchTable(n, action, o.shape)
				if err != nil {
					return nil, err
				}
				if dp, prog, err = load(t); err != nil {
					return nil, fmt.Errorf("load with %d rules: %w", n, err)
				}
				peer = baseProg
			}
			before, err := dp.ReadCounters()
			if err != nil {
				return nil, err
			}
			fbefore, err := dp.ReadFlowRuleCounters()
			if err != nil {
				return nil, err
			}
			var c caseSamples
			total := 0
			for attempt := 0; ; attempt++ {
				probe.waitOff(2 * time.Minute)
				c, err = measureCase(noop.Noop, prog, pkt, o.existRuns, o.reps, nil, peer, tcActUnspec)
				total += o.reps
				if err != nil {
					return nil, fmt.Errorf("%d rules %s: %w", n, r.Action, err)
				}
				if on := probe.on(); !on || attempt == 2 {
					r.StatsOn = on
					break
				}
			}
			if err := checkRules(dp, n, action, before, fbefore, uint64(total*o.existRuns)); err != nil {
				return nil, fmt.Errorf("%d rules %s: %w", n, r.Action, err)
			}
			if n > 0 {
				r.Matched = n - 1
				dp.Close()
			}
			r.Prog, r.Floor = summarize(c.pu, c.pk), summarize(c.fu, c.fk)
			r.Ratio = median(c.ratios)
			r.Net = r.Prog.Median - r.Floor.Median
			r.VsNoRules, r.VsNoRulesMin, r.VsNoRulesMax = 1, 1, 1
			if peer != nil {
				s := summarize(c.nu, c.nk)
				r.NoRules = &s
				r.VsNoRules, r.VsNoRulesMin, r.VsNoRulesMax = median(c.vs), slices.Min(c.vs), slices.Max(c.vs)
			}
			rows = append(rows, r)
			fmt.Fprintf(os.Stderr, "  ipv4  exist-hot rules=%-2d %-6s %7.2f ns/pkt  floor %6.2f  ×%.2f  ×%.3f of no rules\n",
				n, r.Action, r.Prog.Median, r.Floor.Median, r.Ratio, r.VsNoRules)
		}
	}
	return rows, nil
}

// checkRules verifies the case did what it claims: no flow created, every
// run counted under the target rule, rejected ones counted as rejected.
func checkRules(dp *datapath.Datapath, n int, action flowrules.Action, before datapath.Counters, fbefore []uint64, runs uint64) error {
	cnt, err := dp.ReadCounters()
	if err != nil {
		return err
	}
	if d := cnt[datapath.CounterNewFlows] - before[datapath.CounterNewFlows]; d != 0 {
		return fmt.Errorf("%d flows created, want 0", d)
	}
	rejected := cnt[datapath.CounterFilterRejected] - before[datapath.CounterFilterRejected]
	if want := map[bool]uint64{true: runs, false: 0}[action == flowrules.Reject]; rejected != want {
		return fmt.Errorf("%d packets rejected, want %d", rejected, want)
	}
	if n == 0 {
		return nil
	}
	fc, err := dp.ReadFlowRuleCounters()
	if err != nil {
		return err
	}
	for i := range fc {
		want := uint64(0)
		if i == n-1 {
			want = runs
		}
		if d := fc[i] - fbefore[i]; d != want {
			return fmt.Errorf("filter counter %d: +%d, want +%d (the target is rule %d)", i, d, want, n-1)
		}
	}
	return nil
}

func parseRules(s string) ([]int, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := parseCount(f)
		if err != nil || n < 0 || n > flowrules.MaxRules {
			return nil, fmt.Errorf("bad -rules entry %q: 0 to %d", f, flowrules.MaxRules)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Issue #14's targets at the largest rule count measured.
const (
	targetAccept = 1.25 // accept: at most this × the no-rule fast path
	targetReject = 1.0  // reject: below the no-rule fast path
)

func printRules(rows []filterRow, sh ruleShape) {
	fmt.Println("Flow filter rules (issue #14): IPv4 exist-hot (one existing flow, repeated packet), features off")
	fmt.Println("rules constrain: " + sh.String())
	fmt.Println("N rules, the packet decided by the last-precedence one (accept: it accepts, default reject;")
	fmt.Println("reject: it rejects, default accept); the no-rule program runs in the same repetitions.")
	fmt.Println("median over repetitions [min..max]; ×floor, ×no-rule = medians of per-repetition ratios")
	fmt.Println()
	fmt.Printf("%5s %-6s | %8s %17s | %8s | %6s | %9s %8s %15s\n",
		"rules", "case", "ns/pkt", "min..max", "floor ns", "×floor", "no-rule", "×no-rule", "min..max")
	fmt.Println(strings.Repeat("-", 101))
	for _, r := range rows {
		mark := ""
		if r.StatsOn {
			mark = " *"
		}
		nr := "-"
		if r.NoRules != nil {
			nr = fmt.Sprintf("%.2f", r.NoRules.Median)
		}
		fmt.Printf("%5d %-6s | %8.2f %17s | %8.2f | %6.2f | %9s %8.3f %15s%s\n",
			r.Rules, r.Action, r.Prog.Median, fmt.Sprintf("%.2f..%.2f", r.Prog.Min, r.Prog.Max),
			r.Floor.Median, r.Ratio, nr, r.VsNoRules, fmt.Sprintf("%.3f..%.3f", r.VsNoRulesMin, r.VsNoRulesMax), mark)
	}
	top := 0
	for _, r := range rows {
		top = max(top, r.Rules)
	}
	if top > 0 {
		fmt.Println()
		for _, r := range rows {
			if r.Rules != top {
				continue
			}
			switch r.Action {
			case "accept":
				fmt.Printf("target, accept at %d rules ≤ %.2f× no rules: ×%.3f, %s\n", top, targetAccept, r.VsNoRules, metOrNot(r.VsNoRules <= targetAccept))
			case "reject":
				fmt.Printf("target, reject at %d rules < no rules: ×%.3f, %s\n", top, r.VsNoRules, metOrNot(r.VsNoRules < targetReject))
			}
		}
	}
	fmt.Println()
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
