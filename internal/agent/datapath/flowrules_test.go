package datapath_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/flowrules"
	"github.com/flowlens/flowlens/internal/testkit/bpfrun"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// filterRules uses every field the kernel evaluates without an interface:
// overlapping IPv4 and IPv6 CIDRs with and without a peer, port lists and
// ranges on each side, protocols, ICMP type and code, TCP flags, direction,
// sampling, accept and reject; the interface rule matches nothing here
// (BPF_PROG_TEST_RUN packets arrive on lo) but compiles its lookup in.
const filterRules = `
- {name: web-in-a, action: accept, cidr: 10.1.0.0/16, destination_ports: "80,443", direction: ingress}
- {name: no-ssh-a, action: reject, cidr: 10.1.2.0/24, ports: 22}
- {name: a-to-b, action: accept, cidr: 10.1.0.0/16, peer_cidr: 10.2.0.0/16, sampling: 3}
- {name: high-ports, action: accept, source_ports: 30000-40000, protocol: udp}
- {name: syn, action: accept, tcp_flags: [SYN, RST-ACK]}
- {name: ping, action: accept, protocol: icmp, icmp_type: 8, icmp_code: 0}
- {name: v6-net, action: accept, cidr: "fd00:1::/32", direction: egress}
- {name: v6-host-reject, action: reject, cidr: "fd00:1::5/128"}
- {name: icmpv6, action: accept, protocol: icmpv6, icmp_type: 128}
- {name: dns, action: reject, ports: 53}
- {name: a-hosts, action: accept, cidr: 10.1.2.0/30, protocol: udp}
- {name: a-host-reject, action: reject, cidr: 10.1.2.3/32, peer_cidr: 10.2.0.0/16}
- {name: eth-only, action: reject, interfaces: ["/^eth/"], protocol: udp}
`

// TestFilterKernelMatchesReference runs random packets through the TC
// programs and checks that the kernel picks, for each, the rule the Go
// reference (flowrules.Table.Match) picks, and accepts or rejects it as that
// rule (or the default) says.
func TestFilterKernelMatchesReference(t *testing.T) {
	needBPF(t)
	rules, err := flowrules.Parse([]byte(filterRules))
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range []flowrules.Action{flowrules.Reject, flowrules.Accept} {
		t.Run(fmt.Sprint("default ", def), func(t *testing.T) {
			tbl, err := flowrules.Compile(rules, def)
			if err != nil {
				t.Fatal(err)
			}
			dp, err := datapath.Load(datapath.Config{MaxFlows: 4096, Sampling: 1, FlowRules: tbl})
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			defer dp.Close()
			progs, err := dp.ProgramsFor(testCookie)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(14, uint64(def)))
			seen := map[int]int{}
			for i := range 600 {
				p, frame := randomFilterPacket(rng)
				prog, dir := progs.Ingress, flowrules.Ingress
				if rng.IntN(2) == 1 {
					prog, dir = progs.Egress, flowrules.Egress
				}
				p.Direction = dir
				want, matched := tbl.Match(p)
				if !matched {
					want = datapath.FlowRuleDefault
				}
				before, err := dp.ReadFlowRuleCounters()
				if err != nil {
					t.Fatal(err)
				}
				c0 := counters(t, dp)
				if _, err := bpfrun.Exactly(prog, frame, 1); err != nil {
					t.Fatal(err)
				}
				after, err := dp.ReadFlowRuleCounters()
				if err != nil {
					t.Fatal(err)
				}
				c1 := counters(t, dp)
				var got []int
				for j := range after {
					if after[j] != before[j] {
						got = append(got, j)
					}
				}
				if len(got) != 1 || got[0] != want {
					t.Fatalf("packet %d %+v: kernel counted rules %v, reference picks %d", i, p, got, want)
				}
				seen[want]++
				accept := tbl.Default == flowrules.Accept
				if matched {
					accept = tbl.Rules[want].Action == flowrules.Accept
				}
				rejected := c1[datapath.CounterFilterRejected] - c0[datapath.CounterFilterRejected]
				if rejected != map[bool]uint64{true: 0, false: 1}[accept] {
					t.Fatalf("packet %d %+v (rule %d): rejected counter +%d, want accept=%v", i, p, want, rejected, accept)
				}
			}
			// The packets must have exercised most rules, or the test
			// proves little.
			if len(seen) < len(rules)-1 {
				t.Fatalf("only %d of %d rules (and default) were hit: %v", len(seen), len(rules)+1, seen)
			}
		})
	}
}

// randomFilterPacket builds a packet from values near the rules' edges.
func randomFilterPacket(rng *rand.Rand) (flowrules.Packet, []byte) {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	port := func() uint16 {
		return []uint16{22, 53, 80, 443, 8080, 29999, 30000, 35000, 40000, 40001, 1}[rng.IntN(11)]
	}
	v6 := rng.IntN(3) == 0
	var src, dst string
	if v6 {
		src, dst = pick("fd00:1::5", "fd00:1:2::1", "fd00:2::1"), pick("fd00:1::5", "fd00:1:2::1", "fd00:2::1")
	} else {
		src, dst = pick("10.1.2.3", "10.1.9.9", "10.2.0.1", "10.3.0.1"), pick("10.1.2.3", "10.1.9.9", "10.2.0.1", "10.3.0.1")
	}
	p := flowrules.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst)}
	var l4 []byte
	switch rng.IntN(4) {
	case 0, 1:
		p.Proto = packet.ProtoTCP
		p.SrcPort, p.DstPort = port(), port()
		p.TCPFlags = []uint8{packet.SYN, packet.SYN | packet.ACK, packet.ACK, packet.RST | packet.ACK, packet.RST, packet.FIN | packet.ACK}[rng.IntN(6)]
		l4 = packet.TCP(p.SrcPort, p.DstPort, p.TCPFlags)
	case 2:
		p.Proto = packet.ProtoUDP
		p.SrcPort, p.DstPort = port(), port()
		l4 = packet.UDP(p.SrcPort, p.DstPort, 0)
	case 3:
		p.Proto = packet.ProtoICMP
		if v6 {
			p.Proto = packet.ProtoICMPv6
		}
		p.ICMPType, p.ICMPCode = []uint8{8, 0, 128, 3}[rng.IntN(4)], uint8(rng.IntN(2))
		l4 = packet.ICMP(p.ICMPType, p.ICMPCode, 1, 1)
	}
	if v6 {
		return p, packet.Pad(packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(p.Proto, src, dst, len(l4)), l4))
	}
	return p, packet.Pad(packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(p.Proto, src, dst, len(l4)), l4))
}
