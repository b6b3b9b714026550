package evictor_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/packet"
	"github.com/flowlens/flowlens/pkg/flow"
)

// A packet whose first sighting went through the overflow ring buffer (the
// flow map was full) and whose later sighting, after a flip, finds room in
// the fresh map is counted once: the kernel remembers the flows it sent to
// the ring, with the counting observation the evictor's aggregation gives
// them (bpf/flows.h, remember), and insert inherits it as it would from the
// previous generation's map. The exported totals are exact.
//
// The TC programs run through BPF_PROG_TEST_RUN on lo, which gives three
// kinds of hook: egress of a locally sent packet (certainly first), egress
// of a forwarded one (ingress_ifindex set: order unknown) and ingress
// (loopback: order unknown). The flow map holds 2 flows, filled by two
// other flows before each generation that must overflow.
func TestOverflowAcrossFlipCountedOnce(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	const flowPort = 7000 // the flow under test; the fillers are 1..
	for _, tc := range []struct {
		name string
		// steps run in order: a hook seeing one packet of the flow, a
		// flip ('|'), or filling the (fresh) active map ('f').
		steps   string
		packets uint64 // the flow's packets, each counted once
		ring    uint64 // records the ring must have carried
	}{
		// The first hook is not certainly first: the packet counts in the
		// ring on it, and the fresh map's ingress inherits it.
		{"unknown first hook", "F|I", 1, 1},
		// The first hook is a source's egress: the same.
		{"first hook certainly first", "S|I", 1, 1},
		// A certainly-first hook takes the counting over within the
		// generation (a packet seen only at ingress came first): the
		// remembered observation follows it.
		{"takeover", "IS|I", 2, 2},
		// The generation after an overflow overflows too: its first
		// record of the flow (the in-flight packet's ingress) inherits the
		// counting observation, as the aggregation does, and a packet
		// counted on it before the next flip is not counted again after.
		{"inherited across two overflowing generations", "F|fIF|I", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newOverflowRig(t)
			fillers := uint16(0)
			want := map[uint16]uint64{flowPort: tc.packets}
			for i, s := range tc.steps {
				if i == 0 || s == 'f' { // fill the active map
					for range 2 {
						fillers++
						r.run(t, r.progs.Ingress, fillers, 0)
						want[fillers] = 1
					}
				}
				switch s {
				case 'S':
					r.run(t, r.progs.Egress, flowPort, 0) // sent here: certainly first
				case 'F':
					r.run(t, r.progs.Egress, flowPort, 1) // forwarded: order unknown
				case 'I':
					r.run(t, r.progs.Ingress, flowPort, 0) // lo ingress: order unknown
				case '|':
					if err := r.ev.Evict(evictor.ReasonTimer); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := r.ev.Shutdown(); err != nil {
				t.Fatal(err)
			}
			if ring, lost := r.ring(t); ring != tc.ring || lost != 0 {
				t.Fatalf("ring records %d, lost %d; want %d and 0 (the steps did not overflow as planned)",
					ring, lost, tc.ring)
			}
			for sport, n := range want {
				if r.g.packets[sport] != n {
					t.Errorf("flow from port %d: %d packets exported, want %d", sport, r.g.packets[sport], n)
				}
			}
			if len(r.g.packets) != len(want) {
				t.Errorf("flows exported %v, want %v", r.g.packets, want)
			}
		})
	}
}

// The other way round: a packet counted in the map before a flip whose
// later sighting finds the fresh map full goes through the ring marked as
// inherited (OrderInherited, with the counting observation), and the
// aggregation lists it without counting it again. The flip is the
// generations' own (Generations.Flip), without the evictor's drain, so
// that the packet's second hook runs while the ended map still holds its
// flow, as for a packet in transit across a flip.
func TestOverflowAfterFlipOfMapCountedFlow(t *testing.T) {
	testkit.NeedRoot(t, "BPF")
	const flowPort = 7000
	r := newOverflowRig(t)

	r.run(t, r.progs.Egress, flowPort, 1) // forwarded: counted in the map, on lo egress
	ended, err := r.gens.Flip()
	if err != nil {
		t.Fatal(err)
	}
	r.run(t, r.progs.Ingress, 1, 0) // fill the fresh map
	r.run(t, r.progs.Ingress, 2, 0)
	r.run(t, r.progs.Ingress, flowPort, 0) // the same packet's lo ingress: no room
	var inMap uint64
	if _, err := ended.ReadFlows(func(_ []datapath.FlowKey, vals []datapath.FlowValue) error {
		for _, v := range vals {
			inMap += v.Packets
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.ev.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if ring, lost := r.ring(t); inMap != 1 || ring != 1 || lost != 0 {
		t.Fatalf("ended map %d packets, ring records %d, lost %d; want 1, 1 and 0 (the steps did not run as planned)",
			inMap, ring, lost)
	}
	if got := inMap + r.g.packets[flowPort]; got != 1 {
		t.Errorf("the packet was counted %d times (map 1, ring aggregation %d), want once", got, r.g.packets[flowPort])
	}
	if r.g.packets[1] != 1 || r.g.packets[2] != 1 {
		t.Errorf("fillers exported %v, want 1 packet each", r.g.packets)
	}
}

// overflowRig is the overflow tests' set-up: the TC programs with a flow
// map of 2 flows, their generations, and an evictor whose exported
// packets per source port land in g.
type overflowRig struct {
	dp    *datapath.Datapath
	progs *datapath.Programs
	gens  *datapath.Generations
	ev    *evictor.Evictor
	g     *got
}

func newOverflowRig(t *testing.T) *overflowRig { return newOverflowRigWith(t, nil) }

// newOverflowRigWith is newOverflowRig with the evictor's Config changed
// by with (when not nil) before the evictor is made.
func newOverflowRigWith(t *testing.T, with func(*evictor.Config)) *overflowRig {
	dp, err := datapath.Load(datapath.Config{MaxFlows: 2, Sampling: 1})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { dp.Close() })
	progs, err := dp.ProgramsFor(testCookie)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := datapath.NewGenerations(&dp.Maps, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newGot()
	cfg := evictor.Config{Generations: gens, Overflow: dp.Maps.Overflow, Clock: dp.Clock,
		MaxFlows: 2, Period: time.Hour, Sampling: 1,
		Sink: evictor.SinkFunc(func(b *flow.Batch, _ time.Time) { g.add(b); b.Release() })}
	if with != nil {
		with(&cfg)
	}
	ev, err := evictor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &overflowRig{dp: dp, progs: progs, gens: gens, ev: ev, g: g}
}

// run runs prog once on a UDP packet from sport; a non-zero ingressIfindex
// makes it a forwarded packet (order unknown at egress).
func (r *overflowRig) run(t *testing.T, prog *ebpf.Program, sport uint16, ingressIfindex uint32) {
	t.Helper()
	frame := packet.Cat(packet.Eth(packet.EtherTypeIPv4),
		packet.IPv4(packet.ProtoUDP, "10.1.0.1", "10.1.0.2", packet.UDPLen+10), packet.UDP(sport, 53, 10))
	// struct __sk_buff up to ifindex; ingress_ifindex (skb_iif) is at
	// offset 36, and a zero ifindex means lo.
	ctx := make([]byte, 44)
	binary.NativeEndian.PutUint32(ctx[36:], ingressIfindex)
	// One run per call: a single run is never restarted (bpfrun).
	if _, err := prog.Run(&ebpf.RunOptions{Data: frame, Context: ctx, Repeat: 1}); err != nil {
		t.Fatal(err)
	}
}

// ring reads the overflow ring's counters: records carried and lost.
func (r *overflowRig) ring(t *testing.T) (records, lost uint64) {
	c, err := r.dp.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	return c[datapath.CounterOverflowRecords], c[datapath.CounterOverflowLost]
}
