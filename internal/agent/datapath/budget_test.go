package datapath_test

import (
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/agent/feature/dns"
	"github.com/flowlens/flowlens/internal/agent/feature/tcp"
	"github.com/flowlens/flowlens/internal/agent/feature/tls"
	"github.com/flowlens/flowlens/internal/agent/feature/xlat"
	"github.com/flowlens/flowlens/internal/agent/flowrules"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The regression gate on cost figures that do not depend on timing, so it
// cannot flake: the BPF programs' sizes and the verifier's work as the
// kernel reports them after loading, and the eviction path's allocations.
// Each is compared with bpf/budget.json and the test fails when one grows
// past its budget. Raising a budget is a reviewed change: regenerate the
// file with `make budget-update` and say why in the commit.
//
// Kernel-reported figures (verified instructions, translated and JIT sizes)
// depend on the kernel; they are enforced when the running kernel's
// major.minor matches the budget's, and only logged otherwise. The ELF
// instruction counts and the allocation counts are enforced everywhere.

const budgetFile = "../../../bpf/budget.json"

type progBudget struct {
	ELFInsns      int `json:"elf_insns"`      // instructions in the committed object (clang output)
	VerifiedInsns int `json:"verified_insns"` // instructions the verifier processed (all paths)
	XlatedBytes   int `json:"xlated_bytes"`   // translated program, after the verifier's rewrites
	JitedBytes    int `json:"jited_bytes"`    // native code
}

type budget struct {
	Comment  string                `json:"comment"`
	Kernel   string                `json:"kernel"` // where the kernel-reported figures were taken
	Programs map[string]progBudget `json:"programs"`
	// Allocations, counted by the Go runtime (deterministic).
	Allocs map[string]float64 `json:"allocs"`
}

const (
	allocReaderPer100k       = "reader_read_and_delete_allocs_per_100k_flows"
	allocEvictorPer100k      = "evictor_allocs_per_100k_flows"
	allocEvictorBytesPerFlow = "evictor_bytes_per_flow"
	allocAppendJSON          = "append_json_allocs_per_record"
)

func kernelRelease() string {
	var u unix.Utsname
	_ = unix.Uname(&u)
	return unix.ByteSliceToString(u.Release[:])
}

func majorMinor(rel string) string {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return rel
	}
	return parts[0] + "." + strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
}

func TestBudget(t *testing.T) {
	needBPF(t)
	got := budget{
		Comment: "Cost budget checked by internal/agent/datapath/budget_test.go (make test, make check-budget). " +
			"A figure above its budget fails CI. Raise one only in a reviewed commit that says why; " +
			"regenerate with `make budget-update`.",
		Kernel:   kernelRelease(),
		Programs: measurePrograms(t),
		Allocs:   measureAllocs(t),
	}
	if os.Getenv("FLOWLENS_BUDGET_UPDATE") == "1" {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(budgetFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", budgetFile)
		return
	}
	raw, err := os.ReadFile(budgetFile)
	if err != nil {
		t.Fatalf("read budget: %v", err)
	}
	var want budget
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatalf("parse %s: %v", budgetFile, err)
	}
	sameKernel := majorMinor(want.Kernel) == majorMinor(got.Kernel)
	if !sameKernel {
		t.Logf("kernel %s differs from the budget's (%s): kernel-reported figures are logged, not enforced", got.Kernel, want.Kernel)
	}
	check := func(what string, have, limit float64, enforce bool) {
		t.Helper()
		switch {
		case have > limit && enforce:
			t.Errorf("%s = %g, over its budget of %g (bpf/budget.json): make it cheaper, or raise the budget in a reviewed commit", what, have, limit)
		case have > limit:
			t.Logf("%s = %g, over the budget of %g (not enforced on this kernel)", what, have, limit)
		case have < limit:
			t.Logf("%s = %g, under its budget of %g: the budget can be lowered", what, have, limit)
		default:
			t.Logf("%s = %g (budget %g)", what, have, limit)
		}
	}
	names := make([]string, 0, len(want.Programs))
	for name := range want.Programs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w := want.Programs[name]
		g, ok := got.Programs[name]
		if !ok {
			if sameKernel {
				t.Errorf("program %s is in the budget but did not load", name)
			} else {
				t.Logf("program %s is in the budget but does not load on this kernel", name)
			}
			continue
		}
		check(name+" elf_insns", float64(g.ELFInsns), float64(w.ELFInsns), true)
		check(name+" verified_insns", float64(g.VerifiedInsns), float64(w.VerifiedInsns), sameKernel)
		check(name+" xlated_bytes", float64(g.XlatedBytes), float64(w.XlatedBytes), sameKernel)
		check(name+" jited_bytes", float64(g.JitedBytes), float64(w.JitedBytes), sameKernel)
	}
	for name, g := range got.Programs {
		if _, ok := want.Programs[name]; ok {
			continue
		}
		// A program the budget's kernel refused (rtt_fentry where fentry is
		// not permitted) may load elsewhere: only a new program on the
		// budget's kernel lacks a budget.
		if sameKernel {
			t.Errorf("program %s has no budget: add it with `make budget-update`", name)
		} else {
			t.Logf("program %s (not budgeted: it does not load on the budget's kernel): %+v", name, g)
		}
	}
	for name, limit := range want.Allocs {
		have, ok := got.Allocs[name]
		if !ok {
			t.Errorf("allocation figure %s is not measured any more", name)
			continue
		}
		check(name, have, limit, true)
	}
}

// measurePrograms loads the TC programs and every enrichment program and reads
// what the kernel reports about them.
func measurePrograms(t *testing.T) map[string]progBudget {
	t.Helper()
	out := map[string]progBudget{}
	dp, err := datapath.Load(datapath.Config{MaxFlows: 1024, Sampling: 1})
	if err != nil {
		t.Fatalf("load datapath: %v", err)
	}
	defer dp.Close()
	spec := dp.Spec()
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}
	// The TC set as the agent loads it (the shared set where the kernel
	// allows it, with its load-time constants).
	tc := map[string]*ebpf.Program{datapath.ProgramIngress: progs.Ingress, datapath.ProgramEgress: progs.Egress,
		datapath.ProgramIngressL3: progs.IngressL3, datapath.ProgramEgressL3: progs.EgressL3}
	for name, p := range tc {
		out[name] = progFigures(t, p, len(spec.Programs[name].Instructions))
	}
	out[datapath.ProgramIngress+"+filter"] = filterFigures(t)
	out[captureProgram] = captureFigures(t)
	if b, ok := featuresFigures(t); ok {
		out[datapath.ProgramIngress+"+features"] = b
	}

	// The other programs (the features' hooks): each loaded alone, as the
	// agent does (one the kernel refuses must not take the others down);
	// not attached.
	for name, ps := range spec.Programs {
		if tc[name] != nil {
			continue
		}
		p, err := dp.LoadProgram(name)
		if err != nil {
			t.Logf("program %s does not load on this kernel (not budgeted here): %v", name, err)
			continue
		}
		out[name] = progFigures(t, p, len(ps.Instructions))
		p.Close()
	}
	return out
}

// filterFigures measures the ingress program with flow filter rules using
// every field (bpf/filter.h compiled in whole; its global function
// flowlens_filter is part of the program).
func filterFigures(t *testing.T) progBudget {
	t.Helper()
	rules, err := flowrules.Parse([]byte(filterRules))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := flowrules.Compile(rules, flowrules.Reject)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := datapath.Load(datapath.Config{MaxFlows: 1024, Sampling: 1, FlowRules: tbl})
	if err != nil {
		t.Fatalf("load datapath with filter rules: %v", err)
	}
	defer dp.Close()
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}
	return progFigures(t, progs.Ingress, len(dp.Spec().Programs[datapath.ProgramIngress].Instructions))
}

// featuresFigures measures the ingress program with the features that run
// inside the TC programs all on (xlat, tls, dns, tcp): their load-time constants
// and map sizes from their hooks, merged as the agent merges them. false
// when one is refused on this kernel (xlat without the conntrack kfuncs).
func featuresFigures(t *testing.T) (progBudget, bool) {
	t.Helper()
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Logf("kernel BTF: %v (ingress+features not measured)", err)
		return progBudget{}, false
	}
	tc, sizes := map[string]any{}, map[string]uint32{}
	for _, f := range []interface {
		Plan(*btf.Spec) datapath.Plan
	}{xlat.New(), tls.New(), dns.New(), tcp.New()} {
		h := f.Plan(kernel)
		if h.Err != nil {
			t.Logf("feature %s refused on this kernel: %v (ingress+features not measured)", h.Name, h.Err)
			return progBudget{}, false
		}
		for k, v := range h.TC {
			tc[k] = v
		}
		for k, v := range h.MapSizes {
			sizes[k] = v
		}
	}
	dp, err := datapath.Load(datapath.Config{MaxFlows: 1024, Sampling: 1, Enrichment: true, TCConstants: tc, MapSizes: sizes})
	if err != nil {
		t.Fatalf("load datapath with xlat, tls, dns and tcp on: %v", err)
	}
	defer dp.Close()
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}
	return progFigures(t, progs.Ingress, len(dp.Spec().Programs[datapath.ProgramIngress].Instructions)), true
}

func progFigures(t *testing.T, p *ebpf.Program, elf int) progBudget {
	t.Helper()
	info, err := p.Info()
	if err != nil {
		t.Fatalf("program info: %v", err)
	}
	var b progBudget
	b.ELFInsns = elf
	if v, ok := info.VerifiedInstructions(); ok {
		b.VerifiedInsns = int(v)
	}
	if v, err := info.TranslatedSize(); err == nil {
		b.XlatedBytes = v
	}
	if v, err := info.JitedSize(); err == nil {
		b.JitedBytes = int(v)
	}
	return b
}

// measureAllocs counts the eviction path's allocations on real maps.
func measureAllocs(t *testing.T) map[string]float64 {
	t.Helper()
	const n = 100000
	out := map[string]float64{}
	dp, err := datapath.Load(datapath.Config{MaxFlows: n, Sampling: 1})
	if err != nil {
		t.Fatalf("load datapath: %v", err)
	}
	defer dp.Close()
	keys := make([]datapath.FlowKey, n)
	vals := make([]datapath.FlowValue, n)
	for i := range keys {
		k := &keys[i]
		k.SrcIp[10], k.SrcIp[11] = 0xff, 0xff
		k.SrcIp[12], k.SrcIp[13], k.SrcIp[14], k.SrcIp[15] = 10, byte(i>>16), byte(i>>8), byte(i)
		k.SrcPort, k.DstPort, k.Proto = uint16(i), 80, 6
		vals[i] = datapath.FlowValue{Packets: 1, Bytes: 100, N_ifaces: 1, FirstDir: 1}
		vals[i].Ifaces[0] = datapath.IfaceObs{Netns: 1, Ifindex: 2, Dir: 1}
	}
	fill := func(m *ebpf.Map) {
		for i := 0; i < n; i += 65536 {
			end := min(i+65536, n)
			if _, err := m.BatchUpdate(keys[i:end], vals[i:end], nil); err != nil {
				t.Fatalf("fill: %v", err)
			}
		}
	}
	// mallocs runs f and returns the heap objects and bytes it allocated,
	// the smallest of three runs. To make the counts exact: the garbage
	// collector is off meanwhile, so no finalizer or cleanup (cilium/ebpf
	// closes file descriptors with them) runs and allocates in the middle,
	// and sync.Pool is cleared before each run; and there is one P, so a
	// goroutine moving between Ps cannot miss a pooled buffer (a P's private
	// pool slot cannot be stolen) and allocate anew.
	mallocs := func(prepare, f func()) (objs, bytes uint64) {
		objs, bytes = ^uint64(0), ^uint64(0)
		var ms runtime.MemStats
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		for range 3 {
			prepare()
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&ms)
			o, b := ms.Mallocs, ms.TotalAlloc
			f()
			runtime.ReadMemStats(&ms)
			objs, bytes = min(objs, ms.Mallocs-o), min(bytes, ms.TotalAlloc-b)
		}
		return objs, bytes
	}

	// The batch reader, read-and-delete (what the evictor does to a map).
	r := batchread.NewReader[datapath.FlowKey, datapath.FlowValue](batchread.DefaultChunk, true)
	noop := func([]datapath.FlowKey, []datapath.FlowValue) error { return nil }
	m := dp.Maps.Flows[1]
	objs, _ := mallocs(func() { fill(m) }, func() {
		if got, err := r.ReadAndDelete(m, noop); err != nil || got != n {
			t.Fatalf("read %d of %d: %v", got, n, err)
		}
	})
	out[allocReaderPer100k] = float64(objs) * 100000 / n

	// A whole steady-state eviction cycle into records (batches of 1000).
	res := evictor.NewResolver()
	res.Add(evictor.IfaceKey{Netns: 1, Ifindex: 2}, "eth0", "host")
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	gens.NoFill = true // no pressure check here: the eviction path alone, as budgeted
	got := 0
	// No Overflow: no ring-buffer reader goroutine.
	ev, err := evictor.New(evictor.Config{Generations: gens, Clock: dp.Clock, MaxFlows: n, Period: time.Hour, Sampling: 1,
		BatchSize: 1000, Resolver: res, Sink: evictor.SinkFunc(func(b *flow.Batch, _ time.Time) { got += b.Len(); b.Release() })})
	if err != nil {
		t.Fatal(err)
	}
	fillActive := func() {
		var ctl uint32 // generation: its parity indexes the active map
		if err := dp.Maps.Control.Lookup(uint32(0), &ctl); err != nil {
			t.Fatal(err)
		}
		ctl &= 1
		fill(dp.Maps.Flows[ctl])
		got = 0
	}
	for range 2 { // both maps hold a generation, buffers exist
		fillActive()
		if err := ev.Evict(evictor.ReasonTimer); err != nil {
			t.Fatal(err)
		}
	}
	objs, bytes := mallocs(fillActive, func() {
		if err := ev.Evict(evictor.ReasonTimer); err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Fatalf("%d records, want %d", got, n)
		}
	})
	out[allocEvictorPer100k] = float64(objs) * 100000 / n
	out[allocEvictorBytesPerFlow] = float64(bytes / n)

	rec := flow.Record{Interfaces: []flow.Interface{{Name: "eth0", Netns: "host", Direction: flow.DirIngress}}, Sampling: 1}
	buf := make([]byte, 0, 4096)
	out[allocAppendJSON] = testing.AllocsPerRun(100, func() { buf = rec.AppendJSON(buf[:0]) })
	return out
}
