package datapath_test

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/bpfrun"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// A new flow's value is built in a per-CPU buffer that the previous new
// flow on the CPU was built in (bpf/build.h): nothing of the buffer's
// former contents may reach the map. The buffer starts poisoned (every
// byte 0xff, on every CPU), then two different flows are inserted in a
// row, the second through the L3 program, which writes no MACs, after an
// Ethernet flow with MACs: each value must be exactly what its packet
// says, every other byte zero.
func TestBuildBufferNoLeak(t *testing.T) {
	needBPF(t)
	dp := load(t, 16)
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	poison := make([][168]byte, ncpu)
	for i := range poison {
		for j := range poison[i] {
			poison[i][j] = 0xff
		}
	}
	if err := dp.Maps.FlowBuild.Put(uint32(0), poison); err != nil {
		t.Fatalf("poison the build buffer: %v", err)
	}
	progs, err := dp.ProgramsFor(testCookie)
	if err != nil {
		t.Fatal(err)
	}
	netns := runNetns(t, dp)

	// 1: TCP SYN over Ethernet, DSCP 46, its own MACs.
	src, dst := packet.MAC{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}, packet.MAC{0x02, 0x66, 0x77, 0x88, 0x99, 0xaa}
	eth := packet.Cat(packet.Eth(packet.EtherTypeIPv4, packet.MACs(dst, src)),
		packet.IPv4(packet.ProtoTCP, "10.0.0.1", "10.0.0.2", packet.TCPLen, packet.TOS(46<<2)),
		packet.TCP(40000, 443, packet.SYN))
	if _, err := bpfrun.Exactly(progs.Ingress, eth, 1); err != nil {
		t.Fatal(err)
	}
	// 2: UDP through the L3 program (no Ethernet header: BPF_PROG_TEST_RUN
	// takes the IPv4 header's bytes 12-13, the source address's first
	// two, as the protocol, hence 8.0.x.x), DSCP 0, no TCP flags.
	l3 := packet.Cat(packet.IPv4(packet.ProtoUDP, "8.0.0.3", "10.0.0.4", 8+20), packet.UDP(5353, 53, 20))
	if _, err := bpfrun.Exactly(progs.IngressL3, l3, 1); err != nil {
		t.Fatal(err)
	}

	got := map[uint8]entry{}
	for _, e := range flows(t, dp) {
		got[e.k.Proto] = e
	}
	if len(got) != 2 {
		t.Fatalf("%d flows, want 2 (TCP and UDP): %+v", len(got), got)
	}
	me := datapath.IfaceObs{Netns: netns, Ifindex: 1, Dir: datapath.DirIngress} // lo: BPF_PROG_TEST_RUN's device
	for _, c := range []struct {
		name    string
		proto   uint8
		wantKey datapath.FlowKey
		want    datapath.FlowValue
	}{
		{"ethernet TCP", packet.ProtoTCP,
			datapath.FlowKey{SrcIp: v4mapped("10.0.0.1"), DstIp: v4mapped("10.0.0.2"), SrcPort: 40000, DstPort: 443, Proto: packet.ProtoTCP},
			datapath.FlowValue{FirstDir: uint8(datapath.DirIngress), N_ifaces: 1, TcpFlags: 0x02, EthType: 0x0800, Dscp: 46,
				Bytes: uint64(len(eth)), Packets: 1, Ifaces: [6]datapath.IfaceObs{me}, SrcMac: src, DstMac: dst}},
		{"L3 UDP after it", packet.ProtoUDP,
			datapath.FlowKey{SrcIp: v4mapped("8.0.0.3"), DstIp: v4mapped("10.0.0.4"), SrcPort: 5353, DstPort: 53, Proto: packet.ProtoUDP},
			datapath.FlowValue{FirstDir: uint8(datapath.DirIngress), N_ifaces: 1, EthType: 0x0800,
				Bytes: uint64(len(l3)), Packets: 1, Ifaces: [6]datapath.IfaceObs{me}}},
	} {
		e, ok := got[c.proto]
		if !ok {
			t.Errorf("%s: no flow", c.name)
			continue
		}
		// The zone is the key's, written by the parser: the one the
		// other flow's key has (lo, one namespace), not the buffer's.
		c.wantKey.Zone = e.k.Zone
		if e.k != c.wantKey || e.k.Zone != got[packet.ProtoTCP].k.Zone {
			t.Errorf("%s: key %+v, want %+v", c.name, e.k, c.wantKey)
		}
		if e.v.FirstSeen == 0 || e.v.LastSeen != e.v.FirstSeen {
			t.Errorf("%s: first_seen %d, last_seen %d: want one nonzero jiffies value", c.name, e.v.FirstSeen, e.v.LastSeen)
		}
		c.want.FirstSeen, c.want.LastSeen = e.v.FirstSeen, e.v.LastSeen
		if e.v != c.want {
			t.Errorf("%s: value\n%+v\nwant\n%+v", c.name, e.v, c.want)
		}
		var raw [168]byte
		if err := dp.Maps.Flows[0].Lookup(e.k, &raw); err != nil {
			if err := dp.Maps.Flows[1].Lookup(e.k, &raw); err != nil {
				t.Fatal(err)
			}
		}
		if bytes.Contains(raw[:], []byte{0xff, 0xff, 0xff, 0xff}) {
			t.Errorf("%s: the poisoned buffer's bytes reached the value: % x", c.name, raw)
		}
	}
}
