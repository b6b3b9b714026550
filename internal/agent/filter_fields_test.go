package agent_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// The live traffic of the filter field tests, on a veth pair (a, b):
//
//	udp-ab  a:4000 -> b:9000, 40 datagrams
//	udp-ba  b:5000 -> a:9100, 30 datagrams
//	req     a -> b ICMP (v6: ICMPv6) echo requests, 5
//	rep     b -> a echo replies, 5
//
// Each flow crosses two hooks: the sender's veth egress and the receiver's
// veth ingress. A packet is accounted when either hook accepts it, once.
const (
	nAB, nBA, nEcho = 40, 30, 5
)

type filterCase struct {
	name  string
	rules string // {A}: a's address, {B}: b's, {ICMP}: the ICMP protocol's name, {ECHO}: the echo request's type, {HOST}: a host's prefix length
	extra []string
	want  string // the flows accounted, e.g. "udp-ab,req"
}

var filterCases = []filterCase{
	{"cidr", "- {action: accept, cidr: {B}/{HOST}}", nil, "udp-ab,udp-ba,req,rep"},
	{"cidr and peer_cidr", "- {action: accept, cidr: {A}/{HOST}, peer_cidr: {B}/{HOST}, protocol: udp}", nil, "udp-ab,udp-ba"},
	{"cidr matching nothing", "- {action: accept, cidr: {B}/{HOST}, peer_cidr: {B}/{HOST}}", nil, ""},
	{"direction", "- {action: accept, direction: ingress, destination_ports: 9000}", nil, "udp-ab"},
	{"protocol reject, default accept", "- {action: reject, protocol: {ICMP}}", []string{"--filter-default=accept"}, "udp-ab,udp-ba"},
	{"ports either side", "- {action: accept, ports: 9100}", nil, "udp-ba"},
	{"source_ports range", "- {action: accept, source_ports: 3999-4001}", nil, "udp-ab"},
	{"destination_ports list", "- {action: accept, destination_ports: \"80,9000,9100\"}", nil, "udp-ab,udp-ba"},
	{"icmp type", "- {action: accept, protocol: {ICMP}, icmp_type: {ECHO}, icmp_code: 0}", nil, "req"},
	{"interface by name and direction", "- {action: accept, interfaces: [veth-b], direction: egress}", nil, "udp-ba,rep"},
	{"interface regex reject", "- {action: reject, interfaces: [\"/^veth-/\"]}", []string{"--filter-default=accept"}, ""},
	// The cidr rule is more specific than the protocol rule listed first, so
	// it wins for udp-ab (docs/filters.md, precedence).
	{"precedence", "- {action: accept, protocol: udp}\n- {action: reject, cidr: {B}/{HOST}, ports: 9000}", nil, "udp-ba"},
}

func TestFilterFieldsIPv4(t *testing.T) { runFilterCases(t, false) }
func TestFilterFieldsIPv6(t *testing.T) { runFilterCases(t, true) }

func runFilterCases(t *testing.T, v6 bool) {
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) {
			p := agenttest.NewPair(t)
			icmp, echo, reply, host, network := "icmp", 8, 0, "32", "ip4:icmp"
			if v6 {
				p = agenttest.PairOf(t, "fa6", "fb6", "fd00:97::1", "fd00:97::2", "/64", netlab.QuietIPv6)
				icmp, echo, reply, host, network = "icmpv6", 128, 129, "128", "ip6:ipv6-icmp"
			}
			text := strings.NewReplacer("{A}", p.IPA, "{B}", p.IPB, "{ICMP}", icmp, "{ECHO}", fmt.Sprint(echo), "{HOST}", host).Replace(tc.rules)
			rules := writeRules(t, text+"\n")
			agenttest.MustListen(t, p.B, net.JoinHostPort(p.IPB, "9000"))
			agenttest.MustListen(t, p.A, net.JoinHostPort(p.IPA, "9100"))
			h := agenttest.Start(t, 2, agent.Options{}, append([]string{p.NetnsArg(), rules}, tc.extra...)...)
			if err := netlab.UDPSend(p.A, net.JoinHostPort(p.IPA, "4000"), net.JoinHostPort(p.IPB, "9000"), []byte("ab"), nAB); err != nil {
				t.Fatal(err)
			}
			if err := netlab.UDPSend(p.B, net.JoinHostPort(p.IPB, "5000"), net.JoinHostPort(p.IPA, "9100"), []byte("ba"), nBA); err != nil {
				t.Fatal(err)
			}
			if err := ping(p, network, v6, nEcho); err != nil {
				t.Fatal(err)
			}
			flows := h.Stop()
			proto := uint8(1)
			if v6 {
				proto = 58
			}
			got := map[string]uint64{}
			got["udp-ab"], _, _ = agenttest.Sum(flows, agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: 4000, Dport: 9000, Proto: 17})
			got["udp-ba"], _, _ = agenttest.Sum(flows, agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: 5000, Dport: 9100, Proto: 17})
			for _, f := range flows {
				if f.Proto == proto && f.SrcAddr == p.IPA && f.DstAddr == p.IPB && f.IcmpType == uint8(echo) {
					got["req"] += f.Packets
				}
				if f.Proto == proto && f.SrcAddr == p.IPB && f.DstAddr == p.IPA && f.IcmpType == uint8(reply) {
					got["rep"] += f.Packets
				}
			}
			sent := map[string]uint64{"udp-ab": nAB, "udp-ba": nBA, "req": nEcho, "rep": nEcho}
			for name, n := range sent {
				want := uint64(0)
				if strings.Contains(","+tc.want+",", ","+name+",") {
					want = n
				}
				if got[name] != want {
					t.Errorf("%s: %d packets accounted, want %d (rules:\n%s)", name, got[name], want, text)
				}
			}
		})
	}
}

// ping sends n echo requests from a to b and waits for each reply.
func ping(p *agenttest.Pair, network string, v6 bool, n int) error {
	return p.A.Do(func() error {
		c, err := net.ListenPacket(network, p.IPA)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 1500)
		for i := 0; i < n; i++ {
			msg := icmpEcho(uint16(i))
			if v6 { // ICMPv6 echo request; the kernel fills the checksum
				msg[0], msg[2], msg[3] = 128, 0, 0
			}
			if _, err := c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(p.IPB)}); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := c.ReadFrom(buf); err != nil {
				return fmt.Errorf("no echo reply: %w", err)
			}
		}
		return nil
	})
}
