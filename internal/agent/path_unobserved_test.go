package agent_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
)

// A path change whose new path is entered through a hook that is not
// certainly the packet's first: src's link2 is not observed
// (--exclude-interfaces=l2), so the new path's first observed hook is rtr's
// r2 ingress, a veth's (never certainly first, docs/design/counting.md).
// The rule bounds what is lost: the rest of the generation of the change,
// and the next one, which inherits the old counting hook; the
// one after inherits nothing (the old hook counted nothing) and counts on
// r2. Checked exactly: every record that starts two eviction periods after
// the change counts exactly the datagrams sent in its time span, what is
// lost was sent within those two periods, and nothing is counted twice.
func TestPathChangeUnobservedEntry(t *testing.T) {
	lab := newPathLab(t)
	const period = 300 * time.Millisecond
	h := agenttest.Start(t, 1+3+1, agent.Options{}, "--netns="+lab.src.Name+","+lab.rtr.Name+","+lab.dst.Name,
		"--cache-active-timeout="+period.String(), "--exclude-interfaces=lo,l2")
	received := countUDP(t, agenttest.MustListen(t, lab.dst, "10.201.3.2:6000"))

	// One datagram every 10 ms, each with the wall time its send returned
	// (the egress hook ran before): 10 ms apart, a record's coarse first and
	// last times (one 4 ms tick) say which datagrams it holds.
	var c *net.UDPConn
	if err := lab.src.Do(func() (err error) {
		c, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("10.200.0.1"), Port: 5000})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var sends []time.Time
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		to := &net.UDPAddr{IP: net.ParseIP("10.201.3.2"), Port: 6000}
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := c.WriteToUDP(make([]byte, 64), to); err == nil {
				mu.Lock()
				sends = append(sends, time.Now())
				mu.Unlock()
			}
		}
	}()
	time.Sleep(3 * period)
	lab.via(2)
	changed := time.Now()
	time.Sleep(8 * period)
	close(stop)
	<-done
	if got := received.wait(int64(len(sends))); got != int64(len(sends)) {
		t.Fatalf("sent %d datagrams, dst received %d", len(sends), got)
	}
	flows := h.Stop()

	inSpan := func(from, to time.Time) int {
		n := 0
		for _, s := range sends {
			if !s.Before(from) && !s.After(to) {
				n++
			}
		}
		return n
	}
	counted, _, recs := agenttest.Sum(flows, agenttest.Match{Src: "10.200.0.1", Dst: "10.201.3.2", Sport: 5000, Dport: 6000, Proto: 17})
	settled := changed.Add(2*period + 150*time.Millisecond) // two generations after the change, and an eviction's own time
	checked := 0
	for _, f := range recs {
		start, err1 := time.Parse(time.RFC3339Nano, f.StartTime)
		end, err2 := time.Parse(time.RFC3339Nano, f.EndTime)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if start.Before(settled) {
			continue
		}
		// The coarse clock stamps a tick at or before the packet.
		want := inSpan(start.Add(-time.Millisecond), end.Add(5*time.Millisecond))
		if int(f.Packets) != want {
			t.Errorf("record %s..%s on %s: %d packets, %d datagrams sent in its span", f.StartTime, f.EndTime, f.Ifaces(), f.Packets, want)
		}
		checked++
	}
	if checked < 3 {
		t.Fatalf("%d records after the path settled, want at least 3 (evictions every %v for %v)", checked, period, 8*period)
	}
	lost := len(sends) - int(counted)
	window := inSpan(changed.Add(-5*time.Millisecond), settled)
	t.Logf("sent %d, counted %d in %d records; lost %d, %d sent in the two periods after the change", len(sends), counted, len(recs), lost, window)
	if lost < 0 || lost > window {
		t.Fatalf("counted %d of %d sent: %d lost, want between 0 and the %d sent in the two periods after the change", counted, len(sends), lost, window)
	}
}
