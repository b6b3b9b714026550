package dns_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/feature/dns"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// answer is netlab.DNSAnswer, failing t.
func answer(t testing.TB, id uint16, name string, records ...netlab.DNSRecord) []byte {
	t.Helper()
	msg, err := netlab.DNSAnswer(id, name, records...)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

type rr = netlab.DNSRecord

const (
	answersMetric   = "flowlens_agent_dns_answers_total"
	namesMetric     = "flowlens_agent_dns_names"
	evictionsNames  = "flowlens_agent_dns_names_evictions_total"
	namesCacheLimit = 3
)

// Names of addresses from a real resolver's answers (a Go DNS server in
// namespace b): web.test answers b's address (A, TTL 300) and fd00::2
// (AAAA), client.test a's (A, TTL 1), many.test two more (TTL 100, 200).
// A datagram from a to b right after the answers carries both names
// (src_dns_name client.test, dst_dns_name web.test); once client.test's
// TTL ran out (the cache's gauge drops to 2), the next carries only
// web.test. The third answer overfills the cache of 3: exactly one
// address goes, the one expiring first (10.99.1.1). Each answer crosses
// two hooks and is handed on once: read 4 (NXDOMAIN's too), lost 0,
// unparsed 0.
func TestDNSNames(t *testing.T) {
	p := agenttest.NewPair(t)
	netlab.ServeDNS(t, p.B, p.IPB+":53", map[string][]rr{
		"web.test":    {{Addr: p.IPB, TTL: 300}, {Addr: "fd00::2", TTL: 300}},
		"client.test": {{Addr: p.IPA, TTL: 1}},
		"many.test":   {{Addr: "10.99.1.1", TTL: 100}, {Addr: "10.99.1.2", TTL: 200}},
	})
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=dns", "--cache-active-timeout=1s",
		fmt.Sprintf("--dns-names-cache-size=%d", namesCacheLimit))

	ask := func(sport int, id uint16, name string, rcode int) {
		t.Helper()
		rc, err := netlab.AskDNS(p.A, fmt.Sprintf("%s:%d", p.IPA, sport), p.IPB+":53", netlab.DNSQuery(id, name), 2*time.Second)
		if err != nil || rc != rcode {
			t.Fatalf("%s: rcode %d (%v), want %d", name, rc, err, rcode)
		}
	}
	send := func(sport int) {
		t.Helper()
		if err := p.A.Do(func() error {
			la, _ := net.ResolveUDPAddr("udp", fmt.Sprintf("%s:%d", p.IPA, sport))
			ra, _ := net.ResolveUDPAddr("udp", p.IPB+":9000")
			c, err := net.DialUDP("udp", la, ra)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("hello"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	gauge := func() float64 {
		v, _ := promtest.Value(promtest.GatherFrom(t, h.A.Metrics.Registry()), namesMetric, "")
		return v
	}
	waitNames := func(want float64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); gauge() != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v, want %v", namesMetric, gauge(), want)
			}
		}
	}

	ask(40001, 0x1111, "web.test", 0)
	ask(40002, 0x2222, "client.test", 0)
	ask(40003, 0x3333, "nowhere.test", 3)
	send(41001)
	waitNames(3) // web.test's two, client.test's
	// client.test's TTL (1 s) runs out: forgotten at the drain after the
	// one past its expiry, so the datagram after is sent past it.
	waitNames(2)
	send(41002)
	ask(40004, 0x4444, "many.test", 0)
	waitNames(3)

	fams := promtest.GatherFrom(t, h.A.Metrics.Registry())
	promtest.Expect(t, fams, 4, answersMetric, "result=read")
	promtest.Expect(t, fams, 0, answersMetric, "result=lost")
	promtest.Expect(t, fams, 0, answersMetric, "result=unparsed")
	promtest.Expect(t, fams, 1, evictionsNames, "")
	flows := h.Stop()

	names := func(sport uint16) (src, dst string, n int) {
		m := agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: sport, Dport: 9000, Proto: 17}
		for _, f := range flows {
			if m.OK(f) {
				src, dst, n = f.SrcDNSName, f.DstDNSName, n+1
			}
		}
		return
	}
	if src, dst, n := names(41001); n != 1 || src != "client.test" || dst != "web.test" {
		t.Errorf("datagram within client.test's TTL: %d records, src_dns_name %q dst_dns_name %q; want 1, client.test, web.test", n, src, dst)
	}
	if src, dst, n := names(41002); n != 1 || src != "" || dst != "web.test" {
		t.Errorf("datagram past client.test's TTL: %d records, src_dns_name %q dst_dns_name %q; want 1, none, web.test", n, src, dst)
	}
	// The DNS flows are named too: the answer's, from b (web.test) to a.
	var named int
	for _, f := range flows {
		if f.SrcAddr == p.IPB && f.SrcPort == 53 && f.SrcDNSName == "web.test" {
			named++
		}
	}
	if named == 0 {
		t.Error("no answer flow from b's port 53 says src_dns_name web.test")
	}
	s1, d1, _ := names(41001)
	s2, d2, _ := names(41002)
	t.Logf("41001: %q → %q; 41002: %q → %q; %d answer records of b:53 named web.test", s1, d1, s2, d2, named)
}

// The cache by itself: A and AAAA answers name their addresses with the
// question's name for their TTL (0: not at all), a later answer renames,
// the cap pushes out the address expiring first (counted), an answer
// that is not a response, cut in its question or of another class names
// nothing, and a record's address is named only while its start is
// before the name's expiry.
func TestNamesCache(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	n := dns.NewNames(3)
	n.Add(answer(t, 1, "web.test", rr{Addr: "10.0.0.1", TTL: 60}, rr{Addr: "fd00::1", TTL: 30}, rr{Addr: "10.0.0.9", TTL: 0}), now)
	if got, exp := n.Lookup(netip.MustParseAddr("10.0.0.1")); got != "web.test" || !exp.Equal(now.Add(60*time.Second)) {
		t.Errorf("10.0.0.1: %q until %v", got, exp)
	}
	if got, _ := n.Lookup(netip.MustParseAddr("fd00::1")); got != "web.test" {
		t.Errorf("fd00::1 (AAAA): %q", got)
	}
	if got, _ := n.Lookup(netip.MustParseAddr("10.0.0.9")); got != "" || n.Len() != 2 {
		t.Errorf("TTL 0: %q, %d names", got, n.Len())
	}
	// A rename; then two more addresses over the cap of 3: fd00::1
	// (30 s) goes first, then 10.0.0.2 (40 s).
	n.Add(answer(t, 2, "api.test", rr{Addr: "10.0.0.1", TTL: 120}), now)
	n.Add(answer(t, 3, "db.test", rr{Addr: "10.0.0.2", TTL: 40}, rr{Addr: "10.0.0.3", TTL: 90}), now)
	n.Add(answer(t, 4, "ledger.test", rr{Addr: "10.0.0.4", TTL: 100}), now)
	for addr, want := range map[string]string{"10.0.0.1": "api.test", "fd00::1": "", "10.0.0.2": "", "10.0.0.3": "db.test", "10.0.0.4": "ledger.test"} {
		if got, _ := n.Lookup(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
	if n.Len() != 3 {
		t.Errorf("%d names, want 3", n.Len())
	}
	// Not an answer, cut short, nonsense: nothing.
	q := netlab.DNSQuery(5, "query.test")
	full := answer(t, 6, "cut.test", rr{Addr: "10.0.0.5", TTL: 60})
	for _, msg := range [][]byte{q, full[:20], {1, 2, 3}} {
		n.Add(msg, now)
	}
	if got, _ := n.Lookup(netip.MustParseAddr("10.0.0.5")); got != "" {
		t.Errorf("cut answer named 10.0.0.5 %q", got)
	}
	if read, unparsed, evictions := n.Stats(); read != 4 || unparsed != 3 || evictions != 2 {
		t.Errorf("read %d, unparsed %d, evictions %d; want 4, 3, 2", read, unparsed, evictions)
	}
	// Records: 10.0.0.3's name runs until now+90s.
	r := flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.3"), DstAddr: netip.MustParseAddr("10.0.0.4"), StartTime: now.Add(89 * time.Second)}
	n.Annotate(&r)
	if r.SrcDNSName != "db.test" || r.DstDNSName != "ledger.test" {
		t.Errorf("record at +89s: %q → %q", r.SrcDNSName, r.DstDNSName)
	}
	r = flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.3"), DstAddr: netip.MustParseAddr("10.0.0.4"), StartTime: now.Add(90 * time.Second)}
	n.Annotate(&r)
	if r.SrcDNSName != "" || r.DstDNSName != "ledger.test" {
		t.Errorf("record at +90s: %q → %q, want none → ledger.test", r.SrcDNSName, r.DstDNSName)
	}
}
