package dns_test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// DNS through a real server (dnsmasq) in a namespace: a name it knows
// (NOERROR), one it does not (NXDOMAIN), one it forwards to an upstream
// that answers after 150 ms (the latency's bounds), and a query nobody
// answers (a timeout); ids, names, codes and counts exactly.
func TestDNS(t *testing.T) {
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Fatal("dnsmasq not installed: make deps-test (hack/install-deps.sh test) installs it")
	}
	p := agenttest.NewPair(t)
	const delay = 150 * time.Millisecond
	netlab.SlowDNS(t, p.B, p.IPB+":5300", delay)
	agenttest.MustListen(t, p.B, p.IPB+":5353") // a DNS port where nobody answers
	var srv *exec.Cmd
	if err := p.B.Do(func() error {
		srv = exec.Command("dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--bind-interfaces",
			"--listen-address="+p.IPB, "--port=53", "--local=/test/", "--address=/exists.test/10.1.2.3",
			"--server=/slow.test/"+p.IPB+"#5300", "--pid-file=", "--user=root", "--group=root", "--cache-size=0")
		return srv.Start()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=dns", "--dns-ports=53,5353", "--dns-timeout=200ms")

	cases := []struct {
		sport   int
		port    int
		id      uint16
		name    string
		rcode   int    // what the client got
		jsonRC  string // what the query's flow must say
		minLat  time.Duration
		timeout bool
	}{
		{40001, 53, 0x1111, "exists.test", 0, "NOERROR", 0, false},
		{40002, 53, 0x2222, "missing.test", 3, "NXDOMAIN", 0, false},
		{40003, 53, 0x3333, "a.slow.test", 0, "NOERROR", delay, false},
		{40004, 5353, 0x4444, "nobody.test", -1, "", 0, true},
	}
	// dnsmasq is ready when it answers (from a port no case uses).
	for i := 0; ; i++ {
		if rc, _ := netlab.AskDNS(p.A, p.IPA+":39999", p.IPB+":53", netlab.DNSQuery(1, "exists.test"), 200*time.Millisecond); rc == 0 {
			break
		}
		if i == 50 {
			t.Fatal("dnsmasq does not answer")
		}
	}
	for _, c := range cases {
		rc, err := netlab.AskDNS(p.A, fmt.Sprintf("%s:%d", p.IPA, c.sport), fmt.Sprintf("%s:%d", p.IPB, c.port), netlab.DNSQuery(c.id, c.name), time.Second)
		if err != nil || rc != c.rcode {
			t.Fatalf("%s: rcode %d (%v), want %d", c.name, rc, err, c.rcode)
		}
	}
	time.Sleep(300 * time.Millisecond) // past --dns-timeout for the unanswered query
	flows := h.Stop()
	for _, c := range cases {
		m := agenttest.Match{Src: p.IPA, Dst: p.IPB, Sport: uint16(c.sport), Dport: uint16(c.port), Proto: 17}
		var q agenttest.JSONFlow
		var n uint64
		for _, f := range flows {
			if m.OK(f) {
				n += f.Packets
				if f.DNSName != "" {
					q = f
				}
			}
		}
		if q.DNSName != c.name || q.DNSID != c.id || q.DNSTimeout != c.timeout || q.DNSRcode != c.jsonRC {
			t.Errorf("%s: query flow name %q id %#x rcode %q timeout %v; want %q %#x %q %v",
				c.name, q.DNSName, q.DNSID, q.DNSRcode, q.DNSTimeout, c.name, c.id, c.jsonRC, c.timeout)
		}
		lat := time.Duration(q.DNSLatencyNs)
		switch {
		case c.timeout && lat != 0:
			t.Errorf("%s: unanswered, but latency %v", c.name, lat)
		case !c.timeout && (lat <= c.minLat || lat > c.minLat+500*time.Millisecond):
			t.Errorf("%s: latency %v, want in (%v, %v]", c.name, lat, c.minLat, c.minLat+500*time.Millisecond)
		}
		if n != 1 {
			t.Errorf("%s: query flow has %d packets, want 1", c.name, n)
		}
		if c.timeout {
			continue
		}
		// The answer's flow carries the answer.
		am := agenttest.Match{Src: p.IPB, Dst: p.IPA, Sport: uint16(c.port), Dport: uint16(c.sport), Proto: 17}
		var a agenttest.JSONFlow
		var na uint64
		for _, f := range flows {
			if am.OK(f) {
				a = f
				na += f.Packets
			}
		}
		if na != 1 {
			t.Errorf("%s: answer flow has %d packets, want 1", c.name, na)
		}
		if a.DNSID != c.id || a.DNSRcode != c.jsonRC || a.DNSName != c.name {
			t.Errorf("%s: answer flow id %#x rcode %q name %q", c.name, a.DNSID, a.DNSRcode, a.DNSName)
		}
	}
}

// A query and its answer on a namespace's loopback (a node-local cache on
// 127.0.0.x): the flow key's zone is non-zero there, and the answer must
// find its query with it (it did not: every loopback answer was left
// pending and the query reported as a timeout).
func TestDNSOnLoopback(t *testing.T) {
	p := agenttest.NewPair(t)
	const delay = 20 * time.Millisecond
	netlab.SlowDNS(t, p.A, "127.0.0.1:53", delay)
	// Both namespaces' lo and the veth pair: 4 interfaces.
	h := agenttest.Start(t, 4, agent.Options{}, p.NetnsArg(), "--exclude-interfaces=", "--features=dns",
		"--dns-timeout=2s")
	rc, err := netlab.AskDNS(p.A, "127.0.0.1:40101", "127.0.0.1:53", netlab.DNSQuery(0x5151, "lo.test"), time.Second)
	if err != nil || rc < 0 {
		t.Fatalf("loopback DNS: rcode %d (%v)", rc, err)
	}
	flows := h.Stop()
	var q agenttest.JSONFlow
	for _, f := range flows {
		if (agenttest.Match{Src: "127.0.0.1", Dst: "127.0.0.1", Sport: 40101, Dport: 53, Proto: 17}).OK(f) && f.DNSName != "" {
			q = f
		}
	}
	if q.DNSName != "lo.test" || q.DNSID != 0x5151 || q.DNSTimeout || time.Duration(q.DNSLatencyNs) < delay {
		t.Errorf("loopback query flow: name %q id %#x timeout %v latency %v; want lo.test 0x5151, answered after >= %v",
			q.DNSName, q.DNSID, q.DNSTimeout, time.Duration(q.DNSLatencyNs), delay)
	}
}
