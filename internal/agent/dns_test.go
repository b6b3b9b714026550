package agent_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// dnsQuery is a DNS query for name (type A, class IN), id given.
func dnsQuery(id uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; one question
	for _, label := range strings.Split(name, ".") {
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	return append(b, 0, 0, 1, 0, 1)
}

// ask sends one query from src to dst and waits up to wait for an answer;
// it returns the answer's rcode, or -1 when none came.
func ask(ns *netlab.Netns, src, dst string, q []byte, wait time.Duration) (rcode int, err error) {
	rcode = -1
	err = ns.Do(func() error {
		la, _ := net.ResolveUDPAddr("udp", src)
		ra, _ := net.ResolveUDPAddr("udp", dst)
		c, err := net.ListenUDP("udp", la)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.WriteToUDP(q, ra); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		c.SetReadDeadline(time.Now().Add(wait))
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			return nil // unanswered
		}
		if n >= 4 {
			rcode = int(buf[3] & 0xf)
		}
		return nil
	})
	return
}

// slowUpstream answers every query on addr after delay, with NOERROR and no
// records: the upstream dnsmasq forwards slow.test to.
func slowUpstream(t *testing.T, ns *netlab.Netns, addr string, delay time.Duration) {
	t.Helper()
	var c *net.UDPConn
	if err := ns.Do(func() (err error) {
		la, _ := net.ResolveUDPAddr("udp", addr)
		c, err = net.ListenUDP("udp", la)
		return
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			ans := append([]byte(nil), buf[:n]...)
			ans[2] |= 0x80 // QR
			ans[3] = 0x80  // RA, NOERROR
			time.Sleep(delay)
			c.WriteToUDP(ans, from)
		}
	}()
}

// DNS through a real server (dnsmasq) in a namespace: a name it knows
// (NOERROR), one it does not (NXDOMAIN), one it forwards to an upstream
// that answers after 150 ms (the latency's bounds), and a query nobody
// answers (a timeout); ids, names, codes and counts exactly.
func TestDNS(t *testing.T) {
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Fatal("dnsmasq not installed: make deps-test (hack/install-deps.sh test) installs it")
	}
	p := newPair(t)
	const delay = 150 * time.Millisecond
	slowUpstream(t, p.B, p.ipB+":5300", delay)
	mustListen(t, p.B, p.ipB+":5353") // a DNS port where nobody answers
	var srv *exec.Cmd
	if err := p.B.Do(func() error {
		srv = exec.Command("dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--bind-interfaces",
			"--listen-address="+p.ipB, "--port=53", "--local=/test/", "--address=/exists.test/10.1.2.3",
			"--server=/slow.test/"+p.ipB+"#5300", "--pid-file=", "--user=root", "--group=root", "--cache-size=0")
		return srv.Start()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	h := startAgent(t, 2, agent.Options{}, p.netnsArg(), "--features=dns", "--dns-ports=53,5353", "--dns-timeout=200ms")

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
		if rc, _ := ask(p.A, p.ipA+":39999", p.ipB+":53", dnsQuery(1, "exists.test"), 200*time.Millisecond); rc == 0 {
			break
		}
		if i == 50 {
			t.Fatal("dnsmasq does not answer")
		}
	}
	for _, c := range cases {
		rc, err := ask(p.A, fmt.Sprintf("%s:%d", p.ipA, c.sport), fmt.Sprintf("%s:%d", p.ipB, c.port), dnsQuery(c.id, c.name), time.Second)
		if err != nil || rc != c.rcode {
			t.Fatalf("%s: rcode %d (%v), want %d", c.name, rc, err, c.rcode)
		}
	}
	time.Sleep(300 * time.Millisecond) // past --dns-timeout for the unanswered query
	flows := h.Stop()
	for _, c := range cases {
		m := match{src: p.ipA, dst: p.ipB, sport: uint16(c.sport), dport: uint16(c.port), proto: 17}
		var q jsonFlow
		var n uint64
		for _, f := range flows {
			if m.ok(f) {
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
		am := match{src: p.ipB, dst: p.ipA, sport: uint16(c.port), dport: uint16(c.sport), proto: 17}
		var a jsonFlow
		var na uint64
		for _, f := range flows {
			if am.ok(f) {
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
