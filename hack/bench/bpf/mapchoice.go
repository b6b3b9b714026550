package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The enrichment map choice: bpf/drops.h (enrich_entry: bpf/enrich.h) keeps the drop counters in one
// shared hash updated with atomic adds; the alternative is a per-CPU hash
// with plain adds. mapchoice.c does only the map part of record_drop();
// key_only (the key construction alone) is the floor.

const choiceMapSize = 1 << 17

type choiceMaps struct {
	shared, percpu *ebpf.Map
}

func newChoiceMaps() (*choiceMaps, error) {
	spec, err := LoadMapchoice()
	if err != nil {
		return nil, err
	}
	var m choiceMaps
	for name, dst := range map[string]**ebpf.Map{"shared": &m.shared, "percpu": &m.percpu} {
		ms := spec.Maps[name].Copy()
		ms.MaxEntries = choiceMapSize
		mp, err := ebpf.NewMap(ms)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("create %s: %w", name, err)
		}
		*dst = mp
	}
	return &m, nil
}

func (m *choiceMaps) close() {
	if m.shared != nil {
		m.shared.Close()
	}
	if m.percpu != nil {
		m.percpu.Close()
	}
}

// choiceProgs loads the three programs cycling through keys [first, first+n).
func (m *choiceMaps) progs(first, n int) (*MapchoiceObjects, error) {
	spec, err := LoadMapchoice()
	if err != nil {
		return nil, err
	}
	for name, v := range map[string]uint32{"first": uint32(first), "n": uint32(n), "stride": stride(n)} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"shared", "percpu"} {
		spec.Maps[name].MaxEntries = choiceMapSize
	}
	var objs MapchoiceObjects
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"shared": m.shared, "percpu": m.percpu}})
	if err != nil {
		return nil, err
	}
	return &objs, nil
}

func choiceKeys(first, n int) []MapchoiceFlowKey {
	out := make([]MapchoiceFlowKey, n)
	for i := range out {
		k := MapchoiceFlowKey{SrcPort: 40000, DstPort: 80, Proto: 6}
		k.SrcIp[10], k.SrcIp[11] = 0xff, 0xff
		binary.NativeEndian.PutUint32(k.SrcIp[12:], uint32(first+i)) // as the program copies it
		k.DstIp[10], k.DstIp[11], k.DstIp[12], k.DstIp[15] = 0xff, 0xff, 10, 1
		out[i] = k
	}
	return out
}

func runMapChoice(o options) ([]row, error) {
	m, err := newChoiceMaps()
	if err != nil {
		return nil, err
	}
	defer m.close()
	pkt := packet("ipv4")
	var rows []row

	type variant struct {
		name string
		prog func(*MapchoiceObjects) *ebpf.Program
		m    *ebpf.Map
	}
	variants := []variant{
		{"shared hash + atomic adds", func(x *MapchoiceObjects) *ebpf.Program { return x.SharedAtomic }, m.shared},
		{"per-CPU hash + plain adds", func(x *MapchoiceObjects) *ebpf.Program { return x.PercpuPlain }, m.percpu},
	}
	const hitRuns = 200000
	// Existing entries: one hot key, then 10k keys.
	for _, n := range []int{1, 10000} {
		objs, err := m.progs(0, n)
		if err != nil {
			return nil, err
		}
		for _, v := range variants {
			// Create the entries first (one pass).
			if _, _, err := v.prog(objs).Benchmark(pkt, n, nil); err != nil {
				objs.Close()
				return nil, err
			}
			r, err := measurePair(objs.KeyOnly, v.prog(objs), pkt, hitRuns, o.reps, nil)
			if err != nil {
				objs.Close()
				return nil, err
			}
			r.Path, r.Flows, r.CPUs, r.Note = "existing, 1 CPU: "+v.name, n, 1, v.name
			rows = append(rows, r)
		}
		// Both CPUs at once on the same entries: the shared value's cache
		// line bounces between CPUs; the per-CPU one does not.
		for _, v := range variants {
			r, err := measureConcurrent(objs.KeyOnly, v.prog(objs), pkt, hitRuns, o.reps)
			if err != nil {
				objs.Close()
				return nil, err
			}
			r.Path, r.Flows, r.Note = fmt.Sprintf("existing, %d CPUs at once: %s", r.CPUs, v.name), n, v.name
			rows = append(rows, r)
		}
		objs.Close()
		for _, v := range variants {
			if _, err := v.m.BatchDelete(choiceKeys(0, n), nil); err != nil {
				var k MapchoiceFlowKey
				_ = v.m.NextKey(nil, &k)
				return nil, fmt.Errorf("clear %s (n=%d, first key in map %+v, want %+v): %w", v.name, n, k, choiceKeys(0, 1)[0], err)
			}
		}
	}
	// New entries: every run inserts (no-prealloc maps allocate per entry).
	const newN = 50000
	objs, err := m.progs(100000, newN)
	if err != nil {
		return nil, err
	}
	for _, v := range variants {
		r, err := measurePair(objs.KeyOnly, v.prog(objs), pkt, newN, o.reps, func() error {
			_, err := drain(v.m)
			return err
		})
		if err != nil {
			objs.Close()
			return nil, err
		}
		r.Path, r.Flows, r.CPUs, r.Note = "insert, 1 CPU: "+v.name, newN, 1, v.name
		fails, err := sumFailed(objs.Failed)
		if err != nil {
			objs.Close()
			return nil, err
		}
		r.Failed = fails
		if fails > 0 {
			r.Note += fmt.Sprintf("; %d of %d inserts failed (allocation)", fails, newN*o.reps)
		}
		if err := objs.Failed.Put(uint32(0), make([]uint64, mustCPUs())); err != nil {
			objs.Close()
			return nil, err
		}
		rows = append(rows, r)
	}
	// User space: reading and deleting the entries at eviction (ns per entry).
	readRows, err := measureChoiceRead(m, objs, variants[0].prog(objs), variants[1].prog(objs), pkt, newN, o.reps)
	objs.Close()
	if err != nil {
		return nil, err
	}
	rows = append(rows, readRows...)
	printMapChoice(rows)
	return rows, nil
}

func measurePair(floor, prog *ebpf.Program, pkt []byte, runs, reps int, after func() error) (row, error) {
	if probe != nil {
		probe.waitOff(2 * time.Minute)
	}
	var pu, pk, fu, fk, ratios []float64
	for rep := 0; rep < reps; rep++ {
		u, k, err := measure(floor, pkt, runs, tcActUnspec)
		if err != nil {
			return row{}, err
		}
		fu, fk = append(fu, u), append(fk, k)
		u2, k2, err := measure(prog, pkt, runs, tcActUnspec)
		if err != nil {
			return row{}, err
		}
		pu, pk = append(pu, u2), append(pk, k2)
		ratios = append(ratios, u2/u)
		if after != nil {
			if err := after(); err != nil {
				return row{}, err
			}
		}
	}
	r := row{Prog: summarize(pu, pk), Floor: summarize(fu, fk), Ratio: median(ratios), Runs: runs, Reps: reps}
	r.Net = r.Prog.Median - r.Floor.Median
	r.StatsOn = probe != nil && probe.on()
	return r, nil
}

// measureConcurrent runs prog on every CPU at once (one pinned thread each)
// and reports the per-CPU ns per run.
func measureConcurrent(floor, prog *ebpf.Program, pkt []byte, runs, reps int) (row, error) {
	if probe != nil {
		probe.waitOff(2 * time.Minute)
	}
	ncpu := runtime.NumCPU()
	var pu, pk, fu, fk, ratios []float64
	for rep := 0; rep < reps; rep++ {
		for _, which := range []*ebpf.Program{floor, prog} {
			us := make([]float64, ncpu)
			ks := make([]float64, ncpu)
			errs := make([]error, ncpu)
			var ready, done sync.WaitGroup
			start := make(chan struct{})
			for c := 0; c < ncpu; c++ {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					var set unix.CPUSet
					set.Set(c)
					errs[c] = unix.SchedSetaffinity(0, &set)
					ready.Done()
					<-start
					if errs[c] == nil {
						us[c], ks[c], errs[c] = measure(which, pkt, runs, tcActUnspec)
					}
				}()
			}
			ready.Wait()
			close(start)
			done.Wait()
			for _, err := range errs {
				if err != nil {
					return row{}, err
				}
			}
			u, k := median(us), median(ks)
			if which == floor {
				fu, fk = append(fu, u), append(fk, k)
			} else {
				pu, pk = append(pu, u), append(pk, k)
				ratios = append(ratios, u/fu[len(fu)-1])
			}
		}
	}
	r := row{Prog: summarize(pu, pk), Floor: summarize(fu, fk), Ratio: median(ratios), Runs: runs, Reps: reps, CPUs: ncpu}
	r.Net = r.Prog.Median - r.Floor.Median
	r.StatsOn = probe != nil && probe.on()
	return r, nil
}

// measureChoiceRead fills each map with n entries (through the programs, on
// every CPU for the per-CPU map so each slot is populated) and times one
// BPF_MAP_LOOKUP_AND_DELETE_BATCH pass, in ns per entry.
func measureChoiceRead(m *choiceMaps, objs *MapchoiceObjects, sharedProg, percpuProg *ebpf.Program, pkt []byte, n, reps int) ([]row, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	ks := make([]MapchoiceFlowKey, 4096)
	sharedVals := make([]MapchoiceEnrichValue, 4096)
	percpuVals := make([]MapchoiceEnrichValue, 4096*ncpu)
	var out []row
	for _, c := range []struct {
		name string
		prog *ebpf.Program
		m    *ebpf.Map
		vals any
	}{
		{"shared hash + atomic adds", sharedProg, m.shared, sharedVals},
		{"per-CPU hash + plain adds", percpuProg, m.percpu, percpuVals},
	} {
		var samples []float64
		for rep := 0; rep < reps; rep++ {
			if _, _, err := c.prog.Benchmark(pkt, n, nil); err != nil {
				return nil, err
			}
			var cursor ebpf.MapBatchCursor
			start := time.Now()
			total := 0
			for {
				got, err := c.m.BatchLookupAndDelete(&cursor, ks, c.vals, nil)
				total += got
				if err != nil {
					if isKeyNotExist(err) {
						break
					}
					return nil, err
				}
			}
			el := time.Since(start)
			if total == 0 {
				return nil, fmt.Errorf("%s: read no entries", c.name)
			}
			samples = append(samples, float64(el.Nanoseconds())/float64(total))
		}
		st := summarize(samples, samples)
		st.KernelMedian = 0
		out = append(out, row{Path: "user-space batch read+delete, ns/entry: " + c.name, Flows: n, Prog: st, Reps: reps,
			Note: fmt.Sprintf("%d value bytes per entry read", int(sizeofEnrich)*map[bool]int{true: ncpu, false: 1}[c.m == m.percpu])})
	}
	return out, nil
}

const sizeofEnrich = 48

// drain empties m with batch lookup-and-delete, returning how many entries
// it held. (Per-key deletion from GET_NEXT_KEY(nil) would rescan the
// emptied buckets each time: quadratic.)
func drain(m *ebpf.Map) (int, error) {
	ncpu := mustCPUs()
	ks := make([]MapchoiceFlowKey, 4096)
	var vals any = make([]MapchoiceEnrichValue, 4096)
	if m.Type() == ebpf.PerCPUHash {
		vals = make([]MapchoiceEnrichValue, 4096*ncpu)
	}
	var cursor ebpf.MapBatchCursor
	n := 0
	for {
		got, err := m.BatchLookupAndDelete(&cursor, ks, vals, nil)
		n += got
		if isKeyNotExist(err) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func mustCPUs() int {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		panic(err)
	}
	return n
}

func sumFailed(m *ebpf.Map) (uint64, error) {
	var per []uint64
	if err := m.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	var s uint64
	for _, x := range per {
		s += x
	}
	return s, nil
}

func isKeyNotExist(err error) bool { return errors.Is(err, ebpf.ErrKeyNotExist) }

func printMapChoice(rows []row) {
	fmt.Println("Enrichment map choice for the drop counters (hack/bench/bpf/csrc/mapchoice.c)")
	fmt.Println("ns per drop event for the map part of record_drop(); floor: building the key alone; net = median - floor median")
	fmt.Println()
	fmt.Printf("%-62s %6s | %8s %17s | %8s | %8s | %s\n", "case", "keys", "ns/op", "p10..p90", "floor ns", "net ns", "failed inserts")
	fmt.Println(strings.Repeat("-", 135))
	for _, r := range rows {
		floor := fmt.Sprintf("%8.2f", r.Floor.Median)
		net := fmt.Sprintf("%8.2f", r.Net)
		if r.Floor.Median == 0 {
			floor, net = fmt.Sprintf("%8s", "-"), fmt.Sprintf("%8s", "-")
		}
		fmt.Printf("%-62s %6s | %8.2f %17s | %s | %s | %d\n", r.Path, human(r.Flows), r.Prog.Median,
			fmt.Sprintf("%.2f..%.2f", r.Prog.P10, r.Prog.P90), floor, net, r.Failed)
	}
	fmt.Println()
	fmt.Fprintln(os.Stderr)
}
