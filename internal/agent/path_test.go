package agent_test

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// A continuing flow that changes path. src sends from an address on its lo
// (10.200.0.1) to dst through the router namespace rtr, over link1 (src l1
// <-> rtr r1), then, after `ip route replace`, over link2 (l2 <-> r2), then
// over link1 again; rtr forwards to dst over rd <-> d0. Traffic flows
// across several evictions before and after each change (paused only
// around an at-flip change, below). Every packet the sender sent (and dst
// received: no loss) is counted exactly once over all the flow's records,
// and both paths are listed: src's egress of a locally sent packet is
// certainly its first hook, and takes the counting over from the other
// link's.
//
// The two orders of a route change and an eviction:
//   - mid-period: the flow is already in the active generation, counted on
//     the old path, when the new path first sees it (the new path's first
//     hook takes the counting over within the generation);
//   - at-flip: the sender pauses, a flip ends the generation that counted
//     the flow on the old path, the route changes, and the new
//     generation's first packet of the flow takes the new path (the new
//     generation must not inherit the old path's counting hook).
func TestPathChange(t *testing.T) {
	for _, order := range []struct {
		name   string
		atFlip bool
	}{{"mid-period", false}, {"at-flip", true}} {
		t.Run(order.name, func(t *testing.T) { testPathChange(t, order.atFlip) })
	}
}

func testPathChange(t *testing.T, atFlip bool) {
	lab := newPathLab(t)
	src, rtr, dst, via := lab.src, lab.rtr, lab.dst, lab.via

	const payload = 64
	recv := agenttest.MustListen(t, dst, "10.201.3.2:6000")
	if err := recv.SetReadBuffer(8 << 20); err != nil {
		t.Fatal(err)
	}
	received := countUDP(t, recv)

	h := agenttest.Start(t, 2+3+1, agent.Options{}, "--netns="+src.Name+","+rtr.Name+","+dst.Name, "--cache-active-timeout=300ms")
	stats := func(ifn string) netlab.Stats {
		t.Helper()
		s, err := netlab.ReadLinkStats(src, ifn)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	l1Before, l2Before := stats("l1"), stats("l2")

	s := startPacedSender(t, src, "10.200.0.1:5000", "10.201.3.2:6000", payload, 20, time.Millisecond)
	evictions := func() uint64 { return h.A.Evictor.Stats.Evictions[0].Load() }
	waitEvictions := func(k uint64) {
		t.Helper()
		target := evictions() + k
		deadline := time.Now().Add(10 * time.Second)
		for evictions() < target {
			if time.Now().After(deadline) {
				t.Fatalf("%d timer evictions in 10s, waiting for %d", evictions(), target)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	change := func(link int) {
		t.Helper()
		if atFlip {
			s.mu.Lock() // pause: the current burst ends
			defer s.mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			waitEvictions(1) // the generation that counted the flow has ended
			via(link)
			return
		}
		waitEvictions(1)
		time.Sleep(150 * time.Millisecond) // half a period: the flow is in the active generation
		via(link)
	}
	start := evictions()
	waitEvictions(2)
	change(2)
	waitEvictions(2)
	change(1)
	waitEvictions(2)
	sent := s.stop()
	if e := s.errs.Load(); e != 0 {
		t.Fatalf("%d sends failed", e)
	}
	if got := received.wait(sent); got != sent {
		t.Fatalf("sent %d datagrams, dst received %d", sent, got)
	}
	l1After, l2After := stats("l1"), stats("l2")
	flows := h.Stop()
	n := h.A.Evictor.Stats.Evictions[0].Load() - start

	onL1, onL2 := l1After.TxPackets-l1Before.TxPackets, l2After.TxPackets-l2Before.TxPackets
	if onL1+onL2 != uint64(sent) || onL1 == 0 || onL2 == 0 {
		t.Fatalf("sent %d datagrams; l1 transmitted %d, l2 %d", sent, onL1, onL2)
	}
	pk, by, recs := agenttest.Sum(flows, agenttest.Match{Src: "10.200.0.1", Dst: "10.201.3.2", Sport: 5000, Dport: 6000, Proto: 17})
	var dump strings.Builder
	listed := map[string]bool{}
	for _, f := range recs {
		fmt.Fprintf(&dump, "\n  %5d packets %7d bytes  %s", f.Packets, f.Bytes, f.Ifaces())
		for _, i := range f.Interfaces {
			listed[i.Netns+"/"+i.Name+":"+i.Direction] = true
		}
	}
	t.Logf("sent %d (l1 %d, l2 %d) over %d timer evictions; flow: %d packets / %d bytes in %d records:%s",
		sent, onL1, onL2, n, pk, by, len(recs), dump.String())
	wantBytes := uint64(sent) * (14 + 20 + 8 + payload)
	if pk != uint64(sent) || by != wantBytes {
		t.Fatalf("flow: %d packets / %d bytes, want %d / %d (every packet counted once)", pk, by, sent, wantBytes)
	}
	if lb := (l1After.TxBytes - l1Before.TxBytes) + (l2After.TxBytes - l2Before.TxBytes); by != lb {
		t.Fatalf("flow: %d bytes, l1 and l2 transmitted %d", by, lb)
	}
	// The scenario happened as designed: the change within a generation
	// shows as records listing both of src's links, the change at a flip
	// as none (each generation saw one path).
	both := 0
	for _, f := range recs {
		if strings.Contains(f.Ifaces(), src.Name+"/l1:egress") && strings.Contains(f.Ifaces(), src.Name+"/l2:egress") {
			both++
		}
	}
	wantBoth := 2 // two changes
	if atFlip {
		wantBoth = 0
	}
	if both != wantBoth {
		t.Fatalf("%d records list both l1 and l2, want %d: the route changes did not fall where the test meant them to", both, wantBoth)
	}
	var missing []string
	for _, w := range []string{src.Name + "/l1:egress", src.Name + "/l2:egress", rtr.Name + "/r1:ingress", rtr.Name + "/r2:ingress",
		rtr.Name + "/rd:egress", dst.Name + "/d0:ingress"} {
		if !listed[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		var got []string
		for k := range listed {
			got = append(got, k)
		}
		sort.Strings(got)
		t.Fatalf("interfaces %v never listed; listed: %v", missing, got)
	}
}

// pacedSender sends UDP datagrams from one socket in bursts of burst
// datagrams every gap, paced so that no queue on the way overflows (the
// tests count on no loss). Holding mu pauses it between two bursts.
type pacedSender struct {
	mu   sync.Mutex
	sent atomic.Int64
	errs atomic.Int64
	done atomic.Bool
	wg   sync.WaitGroup
}

func startPacedSender(t *testing.T, ns *netlab.Netns, from, to string, size, burst int, gap time.Duration) *pacedSender {
	t.Helper()
	la, err := net.ResolveUDPAddr("udp", from)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	var c *net.UDPConn
	if err := ns.Do(func() (err error) { c, err = net.ListenUDP("udp", la); return err }); err != nil {
		t.Fatal(err)
	}
	s := &pacedSender{}
	payload := make([]byte, size)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer c.Close()
		for !s.done.Load() {
			s.mu.Lock()
			for i := 0; i < burst; i++ {
				if _, err := c.WriteToUDP(payload, ra); err != nil {
					s.errs.Add(1)
				} else {
					s.sent.Add(1)
				}
			}
			s.mu.Unlock()
			time.Sleep(gap)
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends the sender and returns how many datagrams it sent.
func (s *pacedSender) stop() int64 {
	s.done.Store(true)
	s.wg.Wait()
	return s.sent.Load()
}

// udpCounter counts the datagrams a socket receives.
type udpCounter struct{ n atomic.Int64 }

// countUDP reads c in a goroutine until the test ends, counting datagrams.
func countUDP(t *testing.T, c *net.UDPConn) *udpCounter {
	u := &udpCounter{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				return // closed
			}
			u.n.Add(1)
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return u
}

// wait waits up to 5s for want datagrams and returns how many came.
func (u *udpCounter) wait(want int64) int64 {
	for deadline := time.Now().Add(5 * time.Second); u.n.Load() < want && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return u.n.Load()
}

// pathLab is the path-change lab: src has 10.200.0.1 on its lo and two
// links to rtr (l1 <-> r1, l2 <-> r2); rtr forwards to dst (rd <-> d0).
// via(n) routes src -> dst and rtr's return route over link n (link 1 at
// the start).
type pathLab struct {
	src, rtr, dst *netlab.Netns
	via           func(link int)
}

func newPathLab(t *testing.T) *pathLab {
	src, rtr, dst := netlab.NewNetns(t, "src"), netlab.NewNetns(t, "rtr"), netlab.NewNetns(t, "dst")
	for _, ns := range []*netlab.Netns{src, rtr, dst} {
		netlab.Quiet(t, ns)
		// No reverse-path filtering (a namespace may inherit the host's):
		// rtr receives 10.200.0.1 on r2 a moment before its own return
		// route follows src's change.
		for _, k := range []string{"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"} {
			if err := netlab.Sysctl(ns, k, "0"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := netlab.Sysctl(rtr, "net.ipv4.ip_forward", "1"); err != nil {
		t.Fatal(err)
	}
	l1, r1 := netlab.Veth(t, src, "l1", rtr, "r1")
	l2, r2 := netlab.Veth(t, src, "l2", rtr, "r2")
	rd, d0 := netlab.Veth(t, rtr, "rd", dst, "d0")
	netlab.AddAddr(t, src, "lo", "10.200.0.1/32")
	netlab.AddAddr(t, src, "l1", "10.201.1.1/30")
	netlab.AddAddr(t, rtr, "r1", "10.201.1.2/30")
	netlab.AddAddr(t, src, "l2", "10.201.2.1/30")
	netlab.AddAddr(t, rtr, "r2", "10.201.2.2/30")
	netlab.AddAddr(t, rtr, "rd", "10.201.3.1/30")
	netlab.AddAddr(t, dst, "d0", "10.201.3.2/30")
	// Static neighbours: no ARP on any link, so the veth counters and the
	// flows hold only the test's datagrams.
	netlab.Neigh(t, src, "l1", "10.201.1.2", r1.Attrs().HardwareAddr)
	netlab.Neigh(t, rtr, "r1", "10.201.1.1", l1.Attrs().HardwareAddr)
	netlab.Neigh(t, src, "l2", "10.201.2.2", r2.Attrs().HardwareAddr)
	netlab.Neigh(t, rtr, "r2", "10.201.2.1", l2.Attrs().HardwareAddr)
	netlab.Neigh(t, rtr, "rd", "10.201.3.2", d0.Attrs().HardwareAddr)
	netlab.Neigh(t, dst, "d0", "10.201.3.1", rd.Attrs().HardwareAddr)
	netlab.Route(t, dst, "10.200.0.1/32", "10.201.3.1", "d0")
	via := func(link int) {
		netlab.Route(t, src, "10.201.3.0/30", fmt.Sprintf("10.201.%d.2", link), fmt.Sprintf("l%d", link))
		netlab.Route(t, rtr, "10.200.0.1/32", fmt.Sprintf("10.201.%d.1", link), fmt.Sprintf("r%d", link))
	}
	via(1)
	return &pathLab{src: src, rtr: rtr, dst: dst, via: via}
}
