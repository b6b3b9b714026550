package datapath_test

import (
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature/registry"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// With the enrichment maps full, every drop's event is lost and counted
// once. UDP to a closed port is dropped (NO_SOCKET) in the sending syscall.
// kfree_skb is system-wide, so another drop on this machine in the same
// window makes the count larger: that attempt is retried; a smaller count,
// or a double count, fails.
func TestEnrichmentLostCounted(t *testing.T) {
	netlab.Require(t)
	// Enrichment off: the enrichment maps hold one entry each.
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	// Fill both generations with a key no packet has (protocol 253).
	for _, m := range dp.Maps.Enrich {
		if err := m.Put(&datapath.FlowKey{Proto: 253}, &datapath.EnrichValue{}); err != nil {
			t.Fatal(err)
		}
	}
	hooks, err := registry.Plans("drops")
	if err != nil {
		t.Fatal(err)
	}
	if st := dp.StartHooks(hooks); !st[0].Running {
		t.Fatalf("drops hook: %v", st[0].Err)
	}
	ns := netlab.NewNetns(t, "lost")
	const n = 40
	for attempt := range 10 {
		before, err := dp.ReadEnrichmentLost()
		if err != nil {
			t.Fatal(err)
		}
		if err := netlab.UDPSend(ns, "127.0.0.1:4000", "127.0.0.1:9999", make([]byte, 10), n); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		after, err := dp.ReadEnrichmentLost()
		if err != nil {
			t.Fatal(err)
		}
		switch lost := after - before; {
		case lost == n:
			return
		case lost < n:
			t.Fatalf("lost = %d, want %d", lost, n)
		default:
			t.Logf("attempt %d: lost = %d, want %d: other drops on this machine, retrying", attempt, lost, n)
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Fatal("never an exact count: other drops on this machine in every attempt")
}
