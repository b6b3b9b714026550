package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// The flow key's size (issue #33, item 2): what a 16-byte IPv4 key would buy
// in the flow map's hash, before anyone builds it. csrc/hashkey.c has four
// maps shaped like the flow map (preallocated hash, spin lock in the value,
// hashKeyMaxEntries entries: the default --cache-max-flows' bucket count)
// and the operations the TC programs do on them. Every repetition measures
// each map's program and its floor back to back, the maps in a rotating
// order; the paired difference is per repetition, against k40 (today's).

const hashKeyMaxEntries = 131072 // roundup_pow_of_two(100,000): the default flow map's buckets

type hashVariant struct {
	name  string
	about string
	m     *ebpf.Map
	floor *ebpf.Program
	hit   *ebpf.Program
	new   *ebpf.Program
	exist *ebpf.Program
	lock  *ebpf.Program // nil: not measured (k40h keeps its lock outside line 1)
	del   *ebpf.Program
}

// hashKeyRow is one (operation, entries, map) case.
type hashKeyRow struct {
	Op      string  `json:"op"`
	Entries int     `json:"entries"`
	Map     string  `json:"map"`
	Prog    stat    `json:"prog"`
	Floor   stat    `json:"floor"`
	Net     float64 `json:"net_ns"` // median of per-repetition prog - floor
	NetP10  float64 `json:"net_p10"`
	NetP90  float64 `json:"net_p90"`
	// Delta is the median of the per-repetition differences of net ns
	// against k40 in the same repetition (negative: cheaper), with spread.
	Delta    float64 `json:"delta_vs_k40"`
	DeltaP10 float64 `json:"delta_p10"`
	DeltaP90 float64 `json:"delta_p90"`
	// KNet and KDelta: the same from the kernel's own per-run figure
	// (BPF_PROG_TEST_RUN's duration: whole ns, its timer paused while the
	// thread is rescheduled, so other processes on the CPU count less).
	KNet      float64 `json:"kernel_net_ns"`
	KDelta    float64 `json:"kernel_delta_vs_k40"`
	KDeltaP10 float64 `json:"kernel_delta_p10"`
	KDeltaP90 float64 `json:"kernel_delta_p90"`
	Runs      int     `json:"runs_per_rep"`
	Reps      int     `json:"reps"`
	StatsOn   bool    `json:"stats_on,omitempty"`
}

func runHashKey(o options, entries []int) ([]hashKeyRow, error) {
	spec, err := LoadHashkey()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"k40", "k16", "k16a", "k40h"} {
		spec.Maps[name].MaxEntries = hashKeyMaxEntries
	}
	var objs HashkeyObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, err
	}
	defer objs.Close()
	x := &objs.HashkeyPrograms
	vs := []hashVariant{
		{"k40", "40-byte key, 168-byte value (today)", objs.K40, x.Floor40, x.HitK40, x.NewK40, x.ExistK40, x.LockK40, x.DelK40},
		{"k16", "16-byte key, same 168-byte value (232-byte element)", objs.K16, x.Floor16, x.HitK16, x.NewK16, x.ExistK16, x.LockK16, x.DelK16},
		{"k16a", "16-byte key, value padded to 192 (256-byte element, value on line 1)", objs.K16a, x.Floor16, x.HitK16a, x.NewK16a, x.ExistK16a, x.LockK16a, x.DelK16a},
		{"k40h", "40-byte key, counting fields packed in line 1 (u32 last_seen)", objs.K40h, x.Floor40, x.HitK40h, x.NewK40h, x.ExistK40h, nil, x.DelK40h},
	}
	pkt := packet("ipv4")
	setCursor := func(first, n int) error {
		return objs.Cursor.Put(uint32(0), HashkeyCursor{First: uint32(first), N: uint32(n), Stride: stride(n)})
	}
	// runAll runs prog n times over [first, first+n) in key order (stride
	// 1: the measured runs' scattered order is then unrelated to the
	// elements' order in memory, as on a node, where no prefetcher
	// follows a flow map) and requires no failure.
	runAll := func(prog *ebpf.Program, first, n int, what string) error {
		if err := objs.Cursor.Put(uint32(0), HashkeyCursor{I: uint32(n - 1), First: uint32(first), N: uint32(n), Stride: 1}); err != nil {
			return err
		}
		if _, _, err := prog.Benchmark(pkt, n, nil); err != nil {
			return err
		}
		return checkFailed(objs.Failed, what)
	}
	const newN = 20000
	var out []hashKeyRow
	for _, n := range entries {
		if n+newN > hashKeyMaxEntries {
			return nil, fmt.Errorf("%d entries + %d new ones exceed %d", n, newN, hashKeyMaxEntries)
		}
		for _, v := range vs {
			if err := runAll(v.new, 0, n, v.name+" prefill"); err != nil {
				return nil, err
			}
		}
		for _, op := range []string{"hit", "exist", "lock", "new"} {
			runs := max(o.existRuns, 2*n)
			if op == "new" {
				runs = newN
			}
			type acc struct{ pu, pk, fu, fk, net, delta, knet, kdelta []float64 }
			accs := make([]acc, len(vs))
			for rep := 0; rep < o.reps; rep++ {
				if probe != nil {
					probe.waitOff(2 * time.Minute)
				}
				nets, knets := make([]float64, len(vs)), make([]float64, len(vs))
				for j := range vs {
					i := (j + rep) % len(vs) // rotate who goes first
					v := vs[i]
					prog := map[string]*ebpf.Program{"hit": v.hit, "exist": v.exist, "lock": v.lock, "new": v.new}[op]
					if prog == nil {
						nets[i], knets[i] = nan, nan
						continue
					}
					first, cnt := 0, n
					if op == "new" {
						first, cnt = n, newN
					}
					if err := setCursor(first, cnt); err != nil {
						return nil, err
					}
					fu, fk, err := measure(v.floor, pkt, runs, tcActUnspec)
					if err != nil {
						return nil, err
					}
					if err := setCursor(first, cnt); err != nil {
						return nil, err
					}
					pu, pk, err := measure(prog, pkt, runs, tcActUnspec)
					if err != nil {
						return nil, err
					}
					if err := checkFailed(objs.Failed, fmt.Sprintf("%s %s, %d entries", op, v.name, n)); err != nil {
						return nil, err
					}
					if op == "new" {
						if err := runAll(v.del, n, newN, v.name+" delete"); err != nil {
							return nil, err
						}
					}
					a := &accs[i]
					a.pu, a.pk, a.fu, a.fk = append(a.pu, pu), append(a.pk, pk), append(a.fu, fu), append(a.fk, fk)
					nets[i], knets[i] = pu-fu, pk-fk
					a.net, a.knet = append(a.net, pu-fu), append(a.knet, pk-fk)
				}
				for i := range vs {
					if nets[i] == nets[i] { // not NaN
						accs[i].delta = append(accs[i].delta, nets[i]-nets[0])
						accs[i].kdelta = append(accs[i].kdelta, knets[i]-knets[0])
					}
				}
			}
			for i, v := range vs {
				a := accs[i]
				if len(a.pu) == 0 {
					continue
				}
				net, d, kd := sortedCopy(a.net), sortedCopy(a.delta), sortedCopy(a.kdelta)
				out = append(out, hashKeyRow{Op: op, Entries: n, Map: v.name, Prog: summarize(a.pu, a.pk), Floor: summarize(a.fu, a.fk),
					Net: quantile(net, 0.5), NetP10: quantile(net, 0.1), NetP90: quantile(net, 0.9),
					Delta: quantile(d, 0.5), DeltaP10: quantile(d, 0.1), DeltaP90: quantile(d, 0.9),
					KNet: median(a.knet), KDelta: quantile(kd, 0.5), KDeltaP10: quantile(kd, 0.1), KDeltaP90: quantile(kd, 0.9),
					Runs: runs, Reps: o.reps, StatsOn: probe != nil && probe.on()})
			}
		}
		for _, v := range vs {
			if err := runAll(v.del, 0, n, v.name+" clear"); err != nil {
				return nil, err
			}
		}
	}
	printHashKey(vs, out)
	return out, nil
}

var nan = func() float64 { var z float64; return z / z }()

func sortedCopy(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}

func checkFailed(m *ebpf.Map, what string) error {
	var f uint64
	if err := m.Lookup(uint32(0), &f); err != nil {
		return err
	}
	if f != 0 {
		_ = m.Put(uint32(0), uint64(0))
		return fmt.Errorf("%s: %d operations failed (miss on a hit, failed insert or delete)", what, f)
	}
	return nil
}

func printHashKey(vs []hashVariant, rows []hashKeyRow) {
	fmt.Println("Flow key size: hash maps shaped like the flow map (hack/bench/bpf/csrc/hashkey.c), IPv4 keys")
	for _, v := range vs {
		fmt.Printf("  %-5s %s\n", v.name, v.about)
	}
	fmt.Println("ns per operation; floor: building the key; net: median of per-repetition (prog - floor);")
	fmt.Println("Δ k40: median of per-repetition differences of net against k40 in the same repetition, p10..p90;")
	fmt.Println("kernel: the same from BPF_PROG_TEST_RUN's own duration (whole ns, paused while rescheduled)")
	fmt.Println()
	fmt.Printf("%-6s %6s %-5s | %8s %17s | %7s | %8s %17s | %8s %17s | %8s %8s %17s\n", "op", "entries", "map", "ns/op", "p10..p90", "floor", "net", "p10..p90", "Δ k40", "p10..p90", "k net", "k Δ k40", "p10..p90")
	fmt.Println(strings.Repeat("-", 165))
	for _, r := range rows {
		star := " "
		if r.StatsOn {
			star = "*"
		}
		fmt.Printf("%-6s %6s %-5s | %8.1f %17s | %7.1f | %8.1f %17s | %+8.1f %17s | %8.0f %+8.1f %17s %s\n", r.Op, human(r.Entries), r.Map,
			r.Prog.Median, fmt.Sprintf("%.1f..%.1f", r.Prog.P10, r.Prog.P90), r.Floor.Median,
			r.Net, fmt.Sprintf("%.1f..%.1f", r.NetP10, r.NetP90), r.Delta, fmt.Sprintf("%+.1f..%+.1f", r.DeltaP10, r.DeltaP90),
			r.KNet, r.KDelta, fmt.Sprintf("%+.1f..%+.1f", r.KDeltaP10, r.KDeltaP90), star)
	}
	fmt.Println()
}
