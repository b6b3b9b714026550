package flowrules

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func u8(v uint8) *uint8 { return &v }

func TestParseEveryKey(t *testing.T) {
	const doc = `
- name: web
  action: accept
  cidr: 10.1.0.0/16
  peer_cidr: 10.2.0.5
  direction: egress
  protocol: tcp
  ports: 443
  source_ports: "1024-65535"
  destination_ports: [80, "8000-8100", "443,8443"]
  tcp_flags: [SYN, syn-ack]
  drops: true
  interfaces: "eth0, /^veth[0-9]{1,3}$/"
  sampling: 100
- action: Reject
  cidr: fd00::/8
  protocol: 58
  icmp_type: 128
  icmp_code: 0
  interfaces: [eth1]
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{{
		Name: "web", Action: Accept,
		CIDR: netip.MustParsePrefix("10.1.0.0/16"), PeerCIDR: netip.MustParsePrefix("10.2.0.5/32"),
		Direction: Egress, Protocol: u8(TCP),
		Ports:            []PortRange{{443, 443}},
		SourcePorts:      []PortRange{{1024, 65535}},
		DestinationPorts: []PortRange{{80, 80}, {8000, 8100}, {443, 443}, {8443, 8443}},
		TCPFlags:         []TCPFlags{SYN, SYN | ACK},
		Drops:            true,
		Interfaces:       []string{"eth0", "/^veth[0-9]{1,3}$/"},
		Sampling:         100,
	}, {
		Action: Reject, CIDR: netip.MustParsePrefix("fd00::/8"), Protocol: u8(ICMPv6),
		ICMPType: u8(128), ICMPCode: u8(0), Interfaces: []string{"eth1"},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseForms(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []Rule
	}{
		{"empty document", "", nil},
		{"empty list", "[]", []Rule{}},
		{"null", "~", nil},
		{"JSON", `[{"action": "accept", "ports": "80,443", "protocol": "17", "drops": false}]`,
			[]Rule{{Action: Accept, Ports: []PortRange{{80, 80}, {443, 443}}, Protocol: u8(UDP)}}},
		{"IPv6 host", "- {action: accept, cidr: 'fd00::1'}",
			[]Rule{{Action: Accept, CIDR: netip.MustParsePrefix("fd00::1/128")}}},
		{"null value is absent", "- {action: accept, cidr: ~, sampling: }", []Rule{{Action: Accept}}},
		{"flags as a comma string", "- {action: accept, tcp_flags: 'fin, RST-ACK'}",
			[]Rule{{Action: Accept, TCPFlags: []TCPFlags{FIN, RST | ACK}}}},
		{"case-insensitive names", "- {action: ACCEPT, direction: Ingress, protocol: SCTP}",
			[]Rule{{Action: Accept, Direction: Ingress, Protocol: u8(SCTP)}}},
		{"alias", "- &r {action: reject, ports: 53}\n- {action: accept, sampling: 10}",
			[]Rule{{Action: Reject, Ports: []PortRange{{53, 53}}}, {Action: Accept, Sampling: 10}}},
		{"whole port range and protocol 0", "- {action: accept, protocol: 0, cidr: 0.0.0.0/0}\n- {action: accept, ports: 0-65535}",
			[]Rule{{Action: Accept, Protocol: u8(0), CIDR: netip.MustParsePrefix("0.0.0.0/0")},
				{Action: Accept, Ports: []PortRange{{0, 65535}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestParseErrors checks every error's exact text, and the line it points at.
func TestParseErrors(t *testing.T) {
	// Three good rules first, so the bad one is rule 3 on line 4.
	const head = "- {action: accept, cidr: 10.0.0.0/8}\n- {name: a, action: accept}\n- {name: web, action: accept}\n"
	for _, tc := range []struct {
		rule string // rule 3, on line 4
		want string
		line int
	}{
		{`- {name: no-health, action: reject, destination_ports: "100-80"}`,
			`filter rule 3 ("no-health"): destination_ports "100-80": range is upside down`, 4},
		{`- {cidr: 10.0.0.0/8}`, `filter rule 3: action: is required: accept or reject`, 4},
		{`- {action: allow}`, `filter rule 3: action "allow": must be accept or reject`, 4},
		{`- {action: accept, port: 80}`, `filter rule 3: unknown key "port"`, 4},
		{`- {action: accept, peerCIDR: 10.0.0.0/8}`, `filter rule 3: unknown key "peerCIDR"`, 4},
		{`- {action: accept, cidr: 10.0.0.0/8, cidr: 11.0.0.0/8}`, `filter rule 3: key "cidr" given twice`, 4},
		{`- accept`, `filter rule 3: must be a mapping of keys to values`, 4},
		{`- {name: "", action: accept}`, `filter rule 3: name: must not be empty`, 4},
		{`- {name: web, action: accept}`, `filter rule 3 ("web"): name "web": already the name of rule 2`, 4},
		{`- {name: x, action: accept, cidr: 10.0.0.0/33}`,
			`filter rule 3 ("x"): cidr "10.0.0.0/33": must be an IPv4 or IPv6 CIDR or address, e.g. 10.0.0.0/8 or fd00::/8`, 4},
		{`- {action: accept, cidr: 10.0.0}`,
			`filter rule 3: cidr "10.0.0": must be an IPv4 or IPv6 CIDR or address, e.g. 10.0.0.0/8 or fd00::/8`, 4},
		{`- {action: accept, cidr: "fe80::1%eth0"}`, `filter rule 3: cidr "fe80::1%eth0": must not have a zone`, 4},
		{`- {action: accept, cidr: 10.1.2.3/8}`, `filter rule 3: cidr "10.1.2.3/8": has host bits set: write 10.0.0.0/8`, 4},
		{`- {action: accept, peer_cidr: "::ffff:10.0.0.0/104"}`,
			`filter rule 3: peer_cidr "::ffff:10.0.0.0/104": is IPv4-mapped IPv6: write IPv4 prefixes as IPv4, e.g. 10.0.0.0/8`, 4},
		{`- {action: accept, cidr: 10.0.0.0/8, peer_cidr: "fd00::/8"}`,
			`filter rule 3: peer_cidr "fd00::/8": is IPv6 but cidr "10.0.0.0/8" is IPv4: a rule's two sides are of one family`, 4},
		{`- {action: accept, peer_cidr: "fd00::/8", protocol: icmp}`,
			`filter rule 3: protocol "icmp": cannot match peer_cidr "fd00::/8", which is IPv6: use icmpv6`, 4},
		{`- {action: accept, cidr: 10.0.0.0/8, protocol: ICMPv6}`,
			`filter rule 3: protocol "icmpv6": cannot match cidr "10.0.0.0/8", which is IPv4: use icmp`, 4},
		{`- {action: accept, protocol: tpc}`,
			`filter rule 3: protocol "tpc": must be tcp, udp, icmp, icmpv6, sctp or a number from 0 to 255`, 4},
		{`- {action: accept, protocol: 256}`,
			`filter rule 3: protocol "256": must be tcp, udp, icmp, icmpv6, sctp or a number from 0 to 255`, 4},
		{`- {action: accept, ports: http}`,
			`filter rule 3: ports "http": must be a port (443), a range (80-100) or a list (80,443)`, 4},
		{`- {action: accept, ports: "80-"}`,
			`filter rule 3: ports "80-": must be a port (443), a range (80-100) or a list (80,443)`, 4},
		{`- {action: accept, source_ports: "80,8000-70000"}`,
			`filter rule 3: source_ports "8000-70000": must be a port from 0 to 65535`, 4},
		{`- {action: accept, ports: 99999999999999999999}`,
			`filter rule 3: ports "99999999999999999999": must be a port from 0 to 65535`, 4},
		{`- {action: accept, ports: []}`, `filter rule 3: ports: is empty: leave the key out to match any`, 4},
		{`- {action: accept, ports: [[80]]}`, `filter rule 3: ports: list entries must be plain values`, 4},
		{`- {action: accept, protocol: icmp, ports: 80}`,
			`filter rule 3: ports "80": needs protocol tcp, udp or sctp, not icmp`, 4},
		{`- {action: accept, protocol: 47, destination_ports: "1-2,5"}`,
			`filter rule 3: destination_ports "1-2,5": needs protocol tcp, udp or sctp, not 47`, 4},
		{`- {action: accept, protocol: tcp, icmp_type: 8}`,
			`filter rule 3: icmp_type "8": needs protocol icmp or icmpv6, not tcp`, 4},
		{`- {action: accept, ports: 80, icmp_type: 8}`,
			`filter rule 3: icmp_type "8": cannot go with ports: ICMP packets have no ports`, 4},
		{`- {action: accept, icmp_code: 3}`,
			`filter rule 3: icmp_code "3": needs icmp_type: a code means something only within its type`, 4},
		{`- {action: accept, icmp_type: 256}`, `filter rule 3: icmp_type "256": must be a number from 0 to 255`, 4},
		{`- {action: accept, icmp_type: 3, icmp_code: -1}`, `filter rule 3: icmp_code "-1": must be a number from 0 to 255`, 4},
		{`- {action: accept, tcp_flags: [SYN, SYNACK]}`,
			`filter rule 3: tcp_flags "SYNACK": unknown flag: must be FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, SYN-ACK, FIN-ACK or RST-ACK`, 4},
		{`- {action: accept, protocol: udp, tcp_flags: "syn,rst"}`,
			`filter rule 3: tcp_flags "SYN,RST": needs protocol tcp, not udp`, 4},
		{`- {action: accept, icmp_type: 8, tcp_flags: SYN}`,
			`filter rule 3: tcp_flags "SYN": cannot go with icmp_type: ICMP packets have no TCP flags`, 4},
		{`- {action: accept, direction: inbound}`, `filter rule 3: direction "inbound": must be ingress or egress`, 4},
		{`- {action: accept, drops: yes}`, `filter rule 3: drops "yes": must be true or false`, 4},
		{`- {action: reject, drops: true}`, `filter rule 3: drops "true": needs action accept: a reject rule keeps nothing`, 4},
		{`- {action: accept, sampling: 0}`,
			`filter rule 3: sampling "0": must be >= 1 (leave it out for the agent's --sampling)`, 4},
		{`- {action: accept, sampling: -1}`, `filter rule 3: sampling "-1": must be an integer from 1 to 4294967295`, 4},
		{`- {action: accept, sampling: 4294967296}`, `filter rule 3: sampling "4294967296": must be an integer from 1 to 4294967295`, 4},
		{`- {action: reject, sampling: 10}`, `filter rule 3: sampling "10": needs action accept: a reject rule keeps nothing`, 4},
		{`- {action: accept, interfaces: "eth0,/[/"}`,
			"filter rule 3: interfaces \"/[/\": error parsing regexp: missing closing ]: `[`", 4},
		{`- {action: accept, interfaces: [/eth0]}`, `filter rule 3: interfaces "/eth0": a pattern must be written /regex/`, 4},
		{`- {action: accept, cidr: {ip: 10.0.0.0}}`, `filter rule 3: cidr: must be a single value`, 4},
		{`- {action: accept, interfaces: {a: b}}`, `filter rule 3: interfaces: must be a value or a list`, 4},
		{"- name: multi\n  action: accept\n  ports: 80\n  protocol: icmp",
			`filter rule 3 ("multi"): ports "80": needs protocol tcp, udp or sctp, not icmp`, 6},
	} {
		rules, err := Parse([]byte(head + tc.rule))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: got %v, %v; want an *Error", tc.rule, rules, err)
			continue
		}
		if e.Error() != tc.want || e.Line != tc.line {
			t.Errorf("%s:\n got  line %d: %s\n want line %d: %s", tc.rule, e.Line, e, tc.line, tc.want)
		}
	}
}

func TestParseListErrors(t *testing.T) {
	many := strings.Repeat("- {action: accept}\n", MaxRules+1)
	for _, tc := range []struct{ doc, want string }{
		{"action: accept", "filter rules: must be a list of rules"},
		{many, "filter rules: 65 rules: at most 64"},
		{"- {action: accept", "filter rules: yaml: line 1: did not find expected ',' or '}'"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%.30q:\n got  %v\n want %s", tc.doc, err, tc.want)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("- {action: accept}\n", MaxRules))); err != nil {
		t.Errorf("%d rules: %v", MaxRules, err)
	}
}

// TestCheckHandBuilt covers what only a Rule built in Go can get wrong.
func TestCheckHandBuilt(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{Action: Accept, TCPFlags: []TCPFlags{0}}, "filter rule 0: tcp_flags: an entry has no flags"},
		{Rule{Action: Accept, Direction: 7}, `filter rule 0: direction "Direction(7)": must be ingress or egress`},
		{Rule{Action: 9}, "filter rule 0: action: is required: accept or reject"},
		{Rule{Action: Accept, CIDR: netip.MustParsePrefix("fd00::1/8")}, `filter rule 0: cidr "fd00::1/8": has host bits set: write fd00::/8`},
	} {
		if err := Check([]Rule{tc.rule}); err == nil || err.Error() != tc.want {
			t.Errorf("%+v:\n got  %v\n want %s", tc.rule, err, tc.want)
		}
	}
	if err := Check(make([]Rule, MaxRules+1)); err == nil || err.Error() != "filter rules: 65 rules: at most 64" {
		t.Errorf("65 rules: %v", err)
	}
}
