package datapath_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

func udpFrame(sport uint16) []byte {
	return packet.Cat(
		packet.Eth(packet.EtherTypeIPv4),
		packet.IPv4(packet.ProtoUDP, "10.1.0.1", "10.1.0.2", packet.UDPLen+10),
		packet.UDP(sport, 53, 10))
}

// The eviction protocol: each packet lands in exactly one generation; Flip
// hands back the generation that just ended (readable, no longer written),
// counts the active map's entries from zero again, and empties a flow map
// only when it becomes active again, two flips later.
func TestGenerationsFlip(t *testing.T) {
	needBPF(t)
	dp := load(t, 64)
	g, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	read := func(e datapath.Ended) (flows, packets uint64) {
		t.Helper()
		if _, err := e.ReadFlows(func(_ []datapath.FlowKey, vals []datapath.FlowValue) error {
			for _, v := range vals {
				flows++
				packets += v.Packets
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return flows, packets
	}
	entries := func() uint64 {
		t.Helper()
		n, err := g.Entries()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	gen0 := g.Generation()
	runPkt(t, dp, udpFrame(1000), 3) // generation gen0: one flow, 3 packets
	runPkt(t, dp, udpFrame(1001), 1) // a second flow
	if n := entries(); n != 2 {
		t.Fatalf("active map entries %d, want 2", n)
	}
	first, err := g.Flip()
	if err != nil {
		t.Fatal(err)
	}
	if g.Generation() != gen0+1 {
		t.Fatalf("generation %d after a flip from %d", g.Generation(), gen0)
	}
	if n := entries(); n != 0 {
		t.Fatalf("active map entries %d right after the flip, want 0", n)
	}
	runPkt(t, dp, udpFrame(1002), 5) // the next generation
	if f, p := read(first); f != 2 || p != 4 {
		t.Fatalf("ended generation: %d flows %d packets, want 2 and 4", f, p)
	}
	// Still readable, unchanged, until the next flip (the programs look it up).
	if f, p := read(first); f != 2 || p != 4 {
		t.Fatalf("ended generation read again: %d flows %d packets, want 2 and 4", f, p)
	}
	second, err := g.Flip()
	if err != nil {
		t.Fatal(err)
	}
	if f, p := read(second); f != 1 || p != 5 {
		t.Fatalf("second generation: %d flows %d packets, want 1 and 5", f, p)
	}
	// The first generation's map is the active one again, emptied by the flip.
	if _, err := g.Flip(); err != nil {
		t.Fatal(err)
	}
	if f, _ := read(second); f != 0 {
		t.Fatalf("a generation two flips old still holds %d flows", f)
	}
}

// Enrichment entries are read and emptied with their generation.
func TestGenerationsReadEnrich(t *testing.T) {
	needBPF(t)
	dp := load(t, 64)
	g, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	active := dp.Maps.Enrich[g.Generation()&1]
	// With enrichment off the maps hold one entry each: enough here.
	if err := active.Put(&datapath.FlowKey{Proto: 17}, &datapath.EnrichValue{DropPackets: 7}); err != nil {
		t.Fatal(err)
	}
	ended, err := g.Flip()
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for range 2 {
		if _, err := ended.ReadEnrich(func(_ []datapath.FlowKey, vals []datapath.EnrichValue) error {
			for _, v := range vals {
				got = append(got, v.DropPackets)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0] != 7 {
		t.Fatalf("enrichment entries read over two reads: %v, want [7] once", got)
	}
}

// A hook whose every candidate fails reports each candidate's error, with
// why: a program that does not exist on this kernel's terms (an attach
// point that is missing) is unsupported, one skipped by configuration is
// skipped; the datapath keeps running either way.
func TestHookErrorsSayWhy(t *testing.T) {
	needBPF(t)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, SkipHookPrograms: []string{"drop_kfree_skb"}})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	st := dp.StartHooks([]datapath.Plan{
		{Name: "skipped", Candidates: []datapath.Candidate{{Program: "drop_kfree_skb", Attach: datapath.Tracing}}},
		{Name: "missing", Candidates: []datapath.Candidate{
			{Program: "drop_tracepoint", Attach: datapath.Tracepoint("flowlens_no_such_group", "no_such_event")}}},
	})
	if st[0].Running || !errors.Is(st[0].Err, datapath.ErrSkipped) {
		t.Fatalf("skipped hook: running=%v err=%v, want ErrSkipped", st[0].Running, st[0].Err)
	}
	if st[1].Running || !errors.Is(st[1].Err, datapath.ErrUnsupported) {
		t.Fatalf("hook on a missing tracepoint: running=%v err=%v, want ErrUnsupported", st[1].Running, st[1].Err)
	}
	if want := "drop_tracepoint: not supported by this kernel: attach: "; len(st[1].Err.Error()) < len(want) || st[1].Err.Error()[:len(want)] != want {
		t.Fatalf("error text %q, want it to start with %q", st[1].Err, want)
	}
	// The TC programs still run.
	progs, err := dp.ProgramsFor(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := progs.Ingress.Run(&ebpf.RunOptions{Data: udpFrame(1)}); err != nil {
		t.Fatal(err)
	}
}

// A program the kernel refuses (EPERM: fentry loads on this machine) is
// reported as refused, not as missing.
func TestHookRefused(t *testing.T) {
	needBPF(t)
	dp := load(t, 64)
	st := dp.StartHooks([]datapath.Plan{{Name: "rtt", Candidates: []datapath.Candidate{
		{Program: "rtt_fentry", Attach: datapath.Tracing}}}})
	switch {
	case st[0].Running:
		t.Skip("fentry programs load on this kernel: nothing refused")
	case errors.Is(st[0].Err, unix.EPERM) && !errors.Is(st[0].Err, datapath.ErrRefused):
		t.Fatalf("EPERM not reported as refused: %v", st[0].Err)
	case !errors.Is(st[0].Err, datapath.ErrRefused) && !errors.Is(st[0].Err, datapath.ErrUnsupported):
		t.Fatalf("failure neither refused nor unsupported: %v", st[0].Err)
	}
	t.Logf("rtt_fentry: %v", st[0].Err)
}

// A hook that runs inside the TC programs (Plan.TC) runs only when Load
// set its constants, and says so when it did not.
func TestTCHook(t *testing.T) {
	needBPF(t)
	hook := datapath.Plan{Name: "tls", TC: map[string]any{"tls_on": uint32(1)}}
	for _, with := range []bool{true, false} {
		cfg := datapath.Config{MaxFlows: 16, Sampling: 1}
		if with {
			cfg.TCConstants = hook.TC
		}
		dp, err := datapath.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := dp.StartHooks([]datapath.Plan{hook})[0]
		dp.Close()
		if with && (!st.Running || st.Program != "tc") {
			t.Errorf("loaded with tls_on: %+v, want running in tc", st)
		}
		if !with && (st.Running || !errors.Is(st.Err, datapath.ErrSkipped) || !strings.Contains(st.Err.Error(), "loaded without tls_on")) {
			t.Errorf("loaded without tls_on: %+v, want skipped, saying so", st)
		}
	}
	// A feature that found its kernel lacking reports why, and loads nothing.
	dp := load(t, 16)
	missing := errors.New("no such kfunc")
	st := dp.StartHooks([]datapath.Plan{{Name: "xlat", TC: map[string]any{"xlat_on": uint32(1)}, Err: missing}})[0]
	if st.Running || !errors.Is(st.Err, missing) {
		t.Errorf("hook with Err: %+v", st)
	}
}
