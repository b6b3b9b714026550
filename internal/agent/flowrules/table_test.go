package flowrules

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
)

func compile(t *testing.T, doc string, def Action) *Table {
	t.Helper()
	rules, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Compile(rules, def)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// winner is the index, in the list as written, of the rule that wins p; -1
// for none.
func winner(tab *Table, p Packet) int {
	if i, ok := tab.Match(p); ok {
		return tab.Rules[i].Index
	}
	return -1
}

// pkt is a TCP packet from src to dst (addresses with optional :port) seen at
// eth0's ingress; change what a case needs.
func pkt(src, dst string) Packet {
	p := Packet{Proto: TCP, Direction: Ingress, Interface: "eth0", TCPFlags: uint8(ACK)}
	p.Src, p.SrcPort = addrPort(src)
	p.Dst, p.DstPort = addrPort(dst)
	return p
}

func addrPort(s string) (netip.Addr, uint16) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr(), ap.Port()
	}
	return netip.MustParseAddr(s), 40000
}

func with(p Packet, f func(*Packet)) Packet { f(&p); return p }

func proto(n uint8) func(*Packet) { return func(p *Packet) { p.Proto = n } }

func icmp(n, typ, code uint8) func(*Packet) {
	return func(p *Packet) { p.Proto, p.ICMPType, p.ICMPCode, p.SrcPort, p.DstPort = n, typ, code, 0, 0 }
}

func flags(f TCPFlags) func(*Packet) { return func(p *Packet) { p.TCPFlags = uint8(f) } }

// TestFields checks each field alone: the packets it matches and those it
// does not.
func TestFields(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		matches []Packet
		misses  []Packet
	}{
		{"cidr: 10.1.0.0/16",
			[]Packet{pkt("10.1.2.3", "192.168.0.1"), pkt("192.168.0.1", "10.1.255.255")},
			[]Packet{pkt("10.2.0.1", "192.168.0.1"), pkt("fd00::1", "fd00::2")}},
		{"cidr: 10.1.2.3",
			[]Packet{pkt("10.1.2.3", "10.9.9.9")},
			[]Packet{pkt("10.1.2.4", "10.9.9.9")}},
		{"cidr: fd00:1::/32",
			[]Packet{pkt("fd00:1::5", "2001:db8::1"), pkt("2001:db8::1", "fd00:1:ffff::1")},
			[]Packet{pkt("fd00:2::5", "2001:db8::1"), pkt("10.0.0.1", "10.0.0.2")}},
		{"{cidr: 10.1.0.0/16, peer_cidr: 10.2.0.0/16}",
			[]Packet{pkt("10.1.0.1", "10.2.0.1"), pkt("10.2.0.1", "10.1.0.1")},
			[]Packet{pkt("10.1.0.1", "10.1.0.2"), pkt("10.1.0.1", "10.3.0.1"), pkt("10.2.0.1", "10.2.0.2")}},
		{"peer_cidr: 10.2.0.0/16",
			[]Packet{pkt("10.9.0.1", "10.2.0.1"), pkt("10.2.0.1", "10.9.0.1")},
			[]Packet{pkt("10.9.0.1", "10.9.0.2")}},
		// A prefix matches its own family only, even the whole of it.
		{"cidr: '::/0'",
			[]Packet{pkt("fd00::1", "fd00::2"), pkt("::1", "::1")},
			[]Packet{pkt("10.0.0.1", "10.0.0.2"), pkt("0.0.0.0", "0.0.0.0")}},
		{"cidr: 0.0.0.0/0",
			[]Packet{pkt("10.0.0.1", "10.0.0.2")},
			[]Packet{pkt("fd00::1", "fd00::2")}},
		{"protocol: udp",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), proto(UDP))},
			[]Packet{pkt("10.0.0.1", "10.0.0.2"), with(pkt("10.0.0.1", "10.0.0.2"), icmp(ICMP, 8, 0))}},
		{"protocol: 47",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), proto(47))},
			[]Packet{pkt("10.0.0.1", "10.0.0.2")}},
		{"ports: 443",
			[]Packet{pkt("10.0.0.1:443", "10.0.0.2:50000"), pkt("10.0.0.1:50000", "10.0.0.2:443"),
				with(pkt("10.0.0.1:5000", "10.0.0.2:443"), proto(UDP)), with(pkt("10.0.0.1:5000", "10.0.0.2:443"), proto(SCTP))},
			[]Packet{pkt("10.0.0.1:444", "10.0.0.2:442"),
				with(pkt("10.0.0.1:443", "10.0.0.2:443"), proto(47)), with(pkt("10.0.0.1", "10.0.0.2"), icmp(ICMP, 8, 0))}},
		{"source_ports: 1000-2000",
			[]Packet{pkt("10.0.0.1:1000", "10.0.0.2:80"), pkt("10.0.0.1:2000", "10.0.0.2:80")},
			[]Packet{pkt("10.0.0.1:999", "10.0.0.2:1500"), pkt("10.0.0.1:2001", "10.0.0.2:1500")}},
		{"destination_ports: '80,8000-8100'",
			[]Packet{pkt("10.0.0.1:1", "10.0.0.2:80"), pkt("10.0.0.1:1", "10.0.0.2:8050")},
			[]Packet{pkt("10.0.0.1:80", "10.0.0.2:81"), pkt("10.0.0.1:80", "10.0.0.2:8101")}},
		{"{ports: 443, source_ports: 1024-65535}",
			[]Packet{pkt("10.0.0.1:50000", "10.0.0.2:443")},
			[]Packet{pkt("10.0.0.1:443", "10.0.0.2:50000"), pkt("10.0.0.1:50000", "10.0.0.2:80")}},
		{"{ports: 0-65535}",
			[]Packet{pkt("10.0.0.1:0", "10.0.0.2:65535")},
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), icmp(ICMP, 0, 0))}},
		{"icmp_type: 8",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), icmp(ICMP, 8, 0)), with(pkt("fd00::1", "fd00::2"), icmp(ICMPv6, 8, 5))},
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), icmp(ICMP, 0, 0)), pkt("10.0.0.1:8", "10.0.0.2:8")}},
		{"{protocol: icmpv6, icmp_type: 128, icmp_code: 0}",
			[]Packet{with(pkt("fd00::1", "fd00::2"), icmp(ICMPv6, 128, 0))},
			[]Packet{with(pkt("fd00::1", "fd00::2"), icmp(ICMPv6, 128, 1)), with(pkt("10.0.0.1", "10.0.0.2"), icmp(ICMP, 128, 0))}},
		{"tcp_flags: SYN",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), flags(SYN)), with(pkt("10.0.0.1", "10.0.0.2"), flags(SYN|ACK))},
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), flags(ACK)), with(pkt("10.0.0.1", "10.0.0.2"), func(p *Packet) { p.Proto, p.TCPFlags = UDP, uint8(SYN) })}},
		{"tcp_flags: SYN-ACK",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), flags(SYN|ACK)), with(pkt("10.0.0.1", "10.0.0.2"), flags(SYN|ACK|PSH))},
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), flags(SYN)), with(pkt("10.0.0.1", "10.0.0.2"), flags(ACK))}},
		{"tcp_flags: [FIN, RST-ACK]",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), flags(FIN|ACK)), with(pkt("10.0.0.1", "10.0.0.2"), flags(RST|ACK))},
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), flags(RST)), with(pkt("10.0.0.1", "10.0.0.2"), flags(CWR|ECE|URG|PSH|SYN))}},
		{"direction: egress",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), func(p *Packet) { p.Direction = Egress })},
			[]Packet{pkt("10.0.0.1", "10.0.0.2")}},
		{"interfaces: [eth1, /^veth/]",
			[]Packet{with(pkt("10.0.0.1", "10.0.0.2"), func(p *Packet) { p.Interface = "eth1" }),
				with(pkt("10.0.0.1", "10.0.0.2"), func(p *Packet) { p.Interface = "veth9" })},
			[]Packet{pkt("10.0.0.1", "10.0.0.2"), with(pkt("10.0.0.1", "10.0.0.2"), func(p *Packet) { p.Interface = "myveth" })}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			rule := tc.rule
			if rule[0] != '{' {
				rule = "{" + rule + "}"
			}
			tab := compile(t, "- "+rule[:len(rule)-1]+", action: accept}", Reject)
			for _, p := range tc.matches {
				if got := winner(tab, p); got != 0 {
					t.Errorf("%+v: no match, want one", p)
				}
				if got := tab.Action(p); got != Accept {
					t.Errorf("%+v: %s, want accept", p, got)
				}
			}
			for _, p := range tc.misses {
				if got := winner(tab, p); got != -1 {
					t.Errorf("%+v: matched, want no match", p)
				}
				if got := tab.Action(p); got != Reject {
					t.Errorf("%+v: %s, want the default, reject", p, got)
				}
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		p           Packet
		want        int // the winner's index in the list as written
	}{
		{"a subnet wins over its network, listed after it",
			"- {name: net, action: accept, cidr: 10.0.0.0/8}\n- {name: subnet, action: reject, cidr: 10.1.0.0/16}",
			pkt("10.1.0.5", "192.168.0.1"), 1},
		{"outside the subnet, the network",
			"- {name: net, action: accept, cidr: 10.0.0.0/8}\n- {name: subnet, action: reject, cidr: 10.1.0.0/16}",
			pkt("10.2.0.5", "192.168.0.1"), 0},
		{"a host wins over its subnet, listed before it",
			"- {action: reject, cidr: 10.1.2.3}\n- {action: accept, cidr: 10.1.0.0/16}",
			pkt("192.168.0.1", "10.1.2.3"), 0},
		{"the longest prefix on either side",
			"- {action: accept, cidr: 10.1.0.0/16}\n- {action: reject, cidr: 192.168.1.0/24}",
			pkt("10.1.0.1", "192.168.1.1"), 1},
		{"IPv4 0.0.0.0/0 is /96: it wins over a rule without cidr",
			"- {action: reject}\n- {action: accept, cidr: 0.0.0.0/0}",
			pkt("10.0.0.1", "10.0.0.2"), 1},
		{"IPv6 fd00::/8 is /8: it wins over a rule without cidr",
			"- {action: reject}\n- {action: accept, cidr: 'fd00::/8'}",
			pkt("fd00::1", "fd00::2"), 1},
		{"same cidr: the longer peer_cidr",
			"- {action: accept, cidr: 10.1.0.0/16}\n- {action: reject, cidr: 10.1.0.0/16, peer_cidr: 10.2.0.0/16}",
			pkt("10.2.0.1", "10.1.0.1"), 1},
		{"same cidr, the peer does not match: the other",
			"- {action: accept, cidr: 10.1.0.0/16}\n- {action: reject, cidr: 10.1.0.0/16, peer_cidr: 10.2.0.0/16}",
			pkt("10.3.0.1", "10.1.0.1"), 0},
		{"a port exempted inside a CIDR: same cidr, listed first",
			"- {action: reject, cidr: 10.1.0.0/16, ports: 8080}\n- {action: accept, cidr: 10.1.0.0/16}",
			pkt("10.1.0.1:40000", "10.9.0.1:8080"), 0},
		{"other ports of that CIDR",
			"- {action: reject, cidr: 10.1.0.0/16, ports: 8080}\n- {action: accept, cidr: 10.1.0.0/16}",
			pkt("10.1.0.1:40000", "10.9.0.1:443"), 1},
		{"listed after, the exemption never wins",
			"- {action: accept, cidr: 10.1.0.0/16}\n- {action: reject, cidr: 10.1.0.0/16, ports: 8080}",
			pkt("10.1.0.1:40000", "10.9.0.1:8080"), 0},
		{"a port rule without cidr loses to a CIDR rule",
			"- {action: reject, ports: 8080}\n- {action: accept, cidr: 10.1.0.0/16}",
			pkt("10.1.0.1:40000", "10.9.0.1:8080"), 1},
		{"no cidr anywhere: the first listed",
			"- {action: accept, tcp_flags: SYN}\n- {action: accept, sampling: 100}",
			with(pkt("10.0.0.1", "10.0.0.2"), flags(SYN)), 0},
		{"no cidr anywhere: the second when the first misses",
			"- {action: accept, tcp_flags: SYN}\n- {action: accept, sampling: 100}",
			pkt("10.0.0.1", "10.0.0.2"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := winner(compile(t, tc.rules, Reject), tc.p); got != tc.want {
				t.Errorf("winner %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDefaultAction(t *testing.T) {
	p := pkt("10.0.0.1", "10.0.0.2")
	for _, tc := range []struct {
		rules string
		def   Action
		want  Action
	}{
		{"", Reject, Accept}, // no rules: every packet, whatever def says
		{"", Accept, Accept},
		{"- {action: accept, ports: 53}", Reject, Reject},
		{"- {action: reject, ports: 53}", Accept, Accept},
		{"- {action: reject, ports: 40000}", Accept, Reject}, // the rule, not the default
	} {
		tab := compile(t, tc.rules, tc.def)
		if got := tab.Action(p); got != tc.want {
			t.Errorf("rules %q default %s: %s, want %s", tc.rules, tc.def, got, tc.want)
		}
	}
	if _, err := Compile([]Rule{{Action: Accept}}, 0); err == nil || err.Error() != "filter rules: the default action must be accept or reject" {
		t.Errorf("Compile with no default: %v", err)
	}
	tab, err := Compile(nil, 0)
	if err != nil || tab.Default != Accept || tab.All != 0 || tab.Used != 0 {
		t.Errorf("Compile(nil) = %+v, %v; want an empty table that accepts", tab, err)
	}
}

// TestLayout pins the tables of a small list, as the kernel side reads them.
func TestLayout(t *testing.T) {
	tab := compile(t, `
- {name: v6, action: reject, cidr: "fd00::/8", peer_cidr: "fd00:1::/32", drops: false}
- {name: v4, action: accept, cidr: 10.0.0.0/8, drops: true, sampling: 10}
- {name: web, action: accept, ports: 80, source_ports: 1000-2000, direction: ingress}
`, Reject)
	// Precedence: 10.0.0.0/8 is /104, fd00::/8 is /8, no cidr is /0.
	var order []string
	for _, r := range tab.Rules {
		order = append(order, fmt.Sprintf("%d:%s", r.Index, r.Name))
	}
	if want := []string{"1:v4", "0:v6", "2:web"}; !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if tab.All != 0b111 || tab.Accept != 0b101 || tab.Drops != 0b001 {
		t.Errorf("All %b Accept %b Drops %b, want 111 101 001", tab.All, tab.Accept, tab.Drops)
	}

	var addrs []string
	for _, e := range tab.Addrs {
		addrs = append(addrs, fmt.Sprintf("%s/%d=%s CIDR %03b Peer %03b", netip.AddrFrom16(e.Addr), e.Len, e.Prefix(), e.CIDR, e.Peer))
	}
	want := []string{
		"::/0=::/0 CIDR 100 Peer 101",
		"fd00::/8=fd00::/8 CIDR 110 Peer 101",
		"fd00:1::/32=fd00:1::/32 CIDR 110 Peer 111",
		// ::/0 entries do not reach IPv4: this one stops them.
		"::ffff:0.0.0.0/96=0.0.0.0/0 CIDR 100 Peer 101",
		"::ffff:10.0.0.0/104=10.0.0.0/8 CIDR 101 Peer 101",
	}
	if !reflect.DeepEqual(addrs, want) {
		t.Errorf("Addrs:\n got  %q\n want %q", addrs, want)
	}

	wantPorts := []PortRun{
		{0, 79, 0b011, 0b111, 0},
		{80, 80, 0b011, 0b111, 0b100},
		{81, 999, 0b011, 0b111, 0},
		{1000, 2000, 0b111, 0b111, 0},
		{2001, 65535, 0b011, 0b111, 0},
	}
	if !reflect.DeepEqual(tab.Ports, wantPorts) {
		t.Errorf("Ports:\n got  %+v\n want %+v", tab.Ports, wantPorts)
	}
	if tab.NoAnyPorts != 0b011 || tab.PortFree != 0b011 {
		t.Errorf("NoAnyPorts %03b PortFree %03b, want 011 011", tab.NoAnyPorts, tab.PortFree)
	}
	if tab.Proto[TCP] != 0b111 || tab.Proto[UDP] != 0b111 || tab.Proto[ICMP] != 0b011 || tab.Proto[0] != 0b011 {
		t.Errorf("Proto tcp %03b udp %03b icmp %03b 0 %03b, want 111 111 011 011", tab.Proto[TCP], tab.Proto[UDP], tab.Proto[ICMP], tab.Proto[0])
	}
	if tab.Dir != [2]uint64{0b111, 0b011} {
		t.Errorf("Dir %03b, want [111 011]", tab.Dir)
	}
	if want := FieldAddr | FieldPorts | FieldProto | FieldDir; tab.Used != want {
		t.Errorf("Used %s, want %s", tab.Used, want)
	}
}

func TestUsed(t *testing.T) {
	for _, tc := range []struct {
		rules string
		want  Fields
	}{
		{"- {action: accept}", 0},
		{"- {action: accept, sampling: 10, drops: true}", 0},
		{"- {action: accept, direction: egress}", FieldDir},
		{"- {action: accept, interfaces: eth0}", FieldIface},
		{"- {action: accept, protocol: udp}", FieldProto},
		// Ports, ICMP fields and flags also say which protocols they fit.
		{"- {action: accept, ports: 0-65535}", FieldPorts | FieldProto},
		{"- {action: accept, icmp_type: 3}", FieldICMP | FieldProto},
		{"- {action: accept, tcp_flags: RST}", FieldTCPFlags | FieldProto},
		{"- {action: accept, peer_cidr: 'fd00::/8'}", FieldAddr},
	} {
		if got := compile(t, tc.rules, Reject).Used; got != tc.want {
			t.Errorf("%s: Used %s, want %s", tc.rules, got, tc.want)
		}
	}
}

// TestSixtyFourRules: bit 63 works like the others.
func TestSixtyFourRules(t *testing.T) {
	rules := make([]Rule, MaxRules)
	for i := range rules {
		rules[i] = Rule{Action: Reject, DestinationPorts: []PortRange{{uint16(i), uint16(i)}}}
	}
	rules[63].Action = Accept
	tab, err := Compile(rules, Reject)
	if err != nil {
		t.Fatal(err)
	}
	p := pkt("10.0.0.1:9", "10.0.0.2:63")
	if got := winner(tab, p); got != 63 || tab.Action(p) != Accept {
		t.Errorf("port 63: winner %d, %s; want 63, accept", got, tab.Action(p))
	}
}
