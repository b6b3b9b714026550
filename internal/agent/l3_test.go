package agent_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// A tun device (link/none: no link-layer header, skb->data is the IP
// header) in a namespace: IPv4 and IPv6 UDP written into its queue arrive
// as ingress on it, datagrams a socket sends through it leave as egress.
// The agent attaches its L3 programs there: every flow has its addresses
// and ports, exact packets, bytes equal to the IP packet lengths (what the
// tun's own counters count), no MAC addresses, and not one packet counts as
// non-IP or malformed.
func TestTunDevice(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts agent.Options
	}{
		{"tcx", agent.Options{}},
		{"clsact", agent.Options{ForceLegacyTC: true}},
	} {
		t.Run(mode.name, func(t *testing.T) { testTun(t, mode.opts) })
	}
}

func testTun(t *testing.T, opts agent.Options) {
	ns := netlab.NewNetns(t, "tun")
	netlab.QuietIPv6(t, ns)
	// No link-local address on the tun (addr_gen_mode none): with the
	// sysctls of QuietIPv6 it then sends nothing of its own.
	if err := netlab.Sysctl(ns, "net.ipv6.conf.default.addr_gen_mode", "1"); err != nil {
		t.Fatal(err)
	}
	const dev = "tun0"
	q, _ := netlab.Tun(t, ns, dev)
	netlab.AddAddr(t, ns, dev, "10.201.0.1/24")
	netlab.AddAddr(t, ns, dev, "fd00:201::1/64")
	l4 := agenttest.MustListen(t, ns, "10.201.0.1:9000")
	l6 := agenttest.MustListen(t, ns, "[fd00:201::1]:9006")
	out := readTun(t, q)
	time.Sleep(300 * time.Millisecond) // whatever the kernel sends on address add has left before the counters are read

	h := agenttest.Start(t, 1, opts, "--netns="+ns.Name, "--metrics-address=127.0.0.1:0")
	before, err := netlab.ReadLinkStats(ns, dev)
	if err != nil {
		t.Fatal(err)
	}
	noise := out.other()
	if len(noise) > 0 {
		t.Logf("before the test, the tun sent %d packets of its own: %v", len(noise), noise)
	}

	// Ingress: hand-built packets written into the queue.
	const n4, size4, n6, size6 = 25, 100, 15, 77
	in4 := packet.Cat(packet.IPv4(packet.ProtoUDP, "10.201.0.2", "10.201.0.1", packet.UDPLen+size4, packet.Checksum()),
		packet.UDP(4000, 9000, size4)) // UDP checksum 0: none, valid over IPv4
	in6 := udp6("fd00:201::2", "fd00:201::1", 4006, 9006, size6)
	for i := 0; i < n4; i++ {
		if _, err := q.Write(in4); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n6; i++ {
		if _, err := q.Write(in6); err != nil {
			t.Fatal(err)
		}
	}
	// Egress: a socket in the namespace, routed out through the tun.
	const e4, esize4, e6, esize6 = 20, 50, 10, 33
	if err := netlab.UDPSend(ns, "10.201.0.1:7000", "10.201.0.9:7001", make([]byte, esize4), e4); err != nil {
		t.Fatal(err)
	}
	if err := netlab.UDPSend(ns, "[fd00:201::1]:7006", "[fd00:201::9]:7007", make([]byte, esize6), e6); err != nil {
		t.Fatal(err)
	}
	// Every packet got where it was going: the listeners received the
	// ingress datagrams (so their checksums were right), the queue gave
	// back the egress ones.
	if got := drainUDP(l4, n4); got != n4 {
		t.Fatalf("listener 10.201.0.1:9000 received %d of %d datagrams", got, n4)
	}
	if got := drainUDP(l6, n6); got != n6 {
		t.Fatalf("listener [fd00:201::1]:9006 received %d of %d datagrams", got, n6)
	}
	out.wait(t, map[string]int{"10.201.0.1:7000>10.201.0.9:7001": e4, "[fd00:201::1]:7006>[fd00:201::9]:7007": e6})
	after, err := netlab.ReadLinkStats(ns, dev)
	if err != nil {
		t.Fatal(err)
	}
	if extra := out.other(); len(extra) != len(noise) {
		t.Fatalf("the tun sent packets of its own during the test: %v", extra[len(noise):])
	}
	metrics := scrapeMetrics(t, h)
	flows := h.Stop()

	for _, f := range flows {
		t.Logf("%s:%d > %s:%d proto %d: %d packets / %d bytes, eth_type %#x, macs %s %s, on %q",
			f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto, f.Packets, f.Bytes, f.EthType, f.SrcMAC, f.DstMAC, f.Ifaces())
	}
	type flowSpec struct {
		m           agenttest.Match
		n, ipLen    int // packets, and the length of each (IP header on)
		ethType     uint16
		direction   string
		description string
	}
	specs := []flowSpec{
		{agenttest.Match{Src: "10.201.0.2", Dst: "10.201.0.1", Sport: 4000, Dport: 9000, Proto: 17}, n4, 20 + 8 + size4, 0x0800, "ingress", "IPv4 written into the tun"},
		{agenttest.Match{Src: "fd00:201::2", Dst: "fd00:201::1", Sport: 4006, Dport: 9006, Proto: 17}, n6, 40 + 8 + size6, 0x86dd, "ingress", "IPv6 written into the tun"},
		{agenttest.Match{Src: "10.201.0.1", Dst: "10.201.0.9", Sport: 7000, Dport: 7001, Proto: 17}, e4, 20 + 8 + esize4, 0x0800, "egress", "IPv4 sent through the tun"},
		{agenttest.Match{Src: "fd00:201::1", Dst: "fd00:201::9", Sport: 7006, Dport: 7007, Proto: 17}, e6, 40 + 8 + esize6, 0x86dd, "egress", "IPv6 sent through the tun"},
	}
	var rxP, rxB, txP, txB uint64
	for _, s := range specs {
		pk, by, recs := agenttest.Sum(flows, s.m)
		if pk != uint64(s.n) || by != uint64(s.n*s.ipLen) {
			t.Errorf("%s: %d packets / %d bytes in %d records, want %d / %d (%d-byte IP packets): %+v",
				s.description, pk, by, len(recs), s.n, s.n*s.ipLen, s.ipLen, recs)
			continue
		}
		want := fmt.Sprintf("%s/%s:%s", ns.Name, dev, s.direction)
		for _, f := range recs {
			// The JSON spells an absent MAC address as all zeros.
			if f.SrcMAC != "00:00:00:00:00:00" || f.DstMAC != "00:00:00:00:00:00" {
				t.Errorf("%s: src_mac %q dst_mac %q, want zeros (no link-layer header)", s.description, f.SrcMAC, f.DstMAC)
			}
			if f.EthType != s.ethType {
				t.Errorf("%s: eth_type %#x, want %#x", s.description, f.EthType, s.ethType)
			}
			if got := f.Ifaces(); got != want {
				t.Errorf("%s: interfaces %q, want %q", s.description, got, want)
			}
		}
		if s.direction == "ingress" {
			rxP, rxB = rxP+pk, rxB+by
		} else {
			txP, txB = txP+pk, txB+by
		}
	}
	// The tun counts the IP packets it received and sent: the same numbers.
	if d := (netlab.Stats{RxPackets: after.RxPackets - before.RxPackets, RxBytes: after.RxBytes - before.RxBytes,
		TxPackets: after.TxPackets - before.TxPackets, TxBytes: after.TxBytes - before.TxBytes}); d != (netlab.Stats{RxPackets: rxP, RxBytes: rxB, TxPackets: txP, TxBytes: txB}) {
		t.Errorf("flows: rx %d packets / %d bytes, tx %d / %d; %s's counters: rx %d / %d, tx %d / %d",
			rxP, rxB, txP, txB, dev, d.RxPackets, d.RxBytes, d.TxPackets, d.TxBytes)
	}
	for _, series := range []string{"flowlens_agent_non_ip_packets_total", `flowlens_agent_malformed_packets_total{reason="truncated"}`, `flowlens_agent_malformed_packets_total{reason="invalid"}`} {
		if v := metrics.value(t, series); v != 0 {
			t.Errorf("%s = %v, want 0", series, v)
		}
	}
}

// udp6 is an IPv6 UDP packet with size zero bytes of payload and a valid
// checksum (mandatory over IPv6).
func udp6(src, dst string, sport, dport uint16, size int) []byte {
	ip := packet.IPv6(packet.ProtoUDP, src, dst, packet.UDPLen+size)
	udp := packet.UDP(sport, dport, size)
	pseudo := make([]byte, 0, 40+len(udp))
	pseudo = append(pseudo, ip[8:40]...) // source and destination addresses
	pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(udp)))
	pseudo = append(pseudo, 0, 0, 0, packet.ProtoUDP)
	pseudo = append(pseudo, udp...)
	sum := packet.Sum(pseudo)
	if sum == 0 {
		sum = 0xffff // 0 means "no checksum", forbidden over IPv6
	}
	binary.BigEndian.PutUint16(udp[6:], sum)
	return packet.Cat(ip, udp)
}

// drainUDP reads datagrams from c until want arrived or none came for 2s.
func drainUDP(c *net.UDPConn, want int) int {
	buf := make([]byte, 2048)
	got := 0
	for got < want {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, _, err := c.ReadFromUDP(buf); err != nil {
			break
		}
		got++
	}
	return got
}

// tunReader reads every packet a tun transmits, so none piles up in its
// queue (or is dropped there, uncounted by tx_packets), and tells them
// apart: UDP by "src:port>dst:port", anything else kept as a description.
type tunReader struct {
	mu     sync.Mutex
	udp    map[string]int
	others []string
}

func readTun(t *testing.T, q *os.File) *tunReader {
	r := &tunReader{udp: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, err := q.Read(buf)
			if err != nil {
				return // the queue was closed
			}
			r.add(buf[:n])
		}
	}()
	t.Cleanup(func() { q.Close(); <-done })
	return r
}

func (r *tunReader) add(p []byte) {
	key := ""
	if len(p) >= 28 && p[0]>>4 == 4 && p[9] == 17 {
		ihl := int(p[0]&0xf) * 4
		if len(p) >= ihl+8 {
			src, _ := netip.AddrFromSlice(p[12:16])
			dst, _ := netip.AddrFromSlice(p[16:20])
			key = netip.AddrPortFrom(src, binary.BigEndian.Uint16(p[ihl:])).String() + ">" +
				netip.AddrPortFrom(dst, binary.BigEndian.Uint16(p[ihl+2:])).String()
		}
	} else if len(p) >= 48 && p[0]>>4 == 6 && p[6] == 17 {
		src, _ := netip.AddrFromSlice(p[8:24])
		dst, _ := netip.AddrFromSlice(p[24:40])
		key = netip.AddrPortFrom(src, binary.BigEndian.Uint16(p[40:])).String() + ">" +
			netip.AddrPortFrom(dst, binary.BigEndian.Uint16(p[42:])).String()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if key != "" {
		r.udp[key]++
		return
	}
	r.others = append(r.others, fmt.Sprintf("%d bytes % x", len(p), p[:min(len(p), 48)]))
}

// wait waits until the tun has sent at least the given UDP datagrams, then
// fails unless it sent exactly those.
func (r *tunReader) wait(t *testing.T, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		ok := true
		for k, n := range want {
			ok = ok && r.udp[k] >= n
		}
		got := fmt.Sprint(r.udp)
		r.mu.Unlock()
		if ok {
			if got != fmt.Sprint(want) {
				t.Fatalf("the tun sent %s, want %v", got, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tun sent %s, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *tunReader) other() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.others...)
}

// metricsText is one scrape of the agent's /metrics.
type metricsText string

// scrapeMetrics reads the agent's /metrics (the agent runs with
// --metrics-address=127.0.0.1:0).
func scrapeMetrics(t *testing.T, h *agenttest.Harness) metricsText {
	t.Helper()
	resp, err := http.Get("http://" + h.A.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return metricsText(body)
}

// value is the value of one series (name and labels exactly as exposed).
func (m metricsText) value(t *testing.T, series string) float64 {
	t.Helper()
	s := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(string(m))
	if s == nil {
		t.Fatalf("no series %s in /metrics:\n%s", series, m)
	}
	v, err := strconv.ParseFloat(s[1], 64)
	if err != nil {
		t.Fatalf("series %s: %v", series, err)
	}
	return v
}
