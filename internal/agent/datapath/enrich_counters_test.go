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
// The drops are of a flow no watched interface carried (nothing is
// attached), so the datapath records them only with EnrichUnwatched.
func TestEnrichmentLostCounted(t *testing.T) {
	netlab.Require(t)
	// Enrichment off: the enrichment maps hold one entry each.
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1, EnrichUnwatched: true})
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
	countsExactly(t, dp.ReadEnrichmentLost, "lost", 40)
}

// Without EnrichUnwatched, the drops of a flow no watched interface
// carried are not recorded: each is counted once as unwatched, and none
// is lost (no entry is tried).
func TestEnrichmentUnwatchedCounted(t *testing.T) {
	netlab.Require(t)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	hooks, err := registry.Plans("drops")
	if err != nil {
		t.Fatal(err)
	}
	if st := dp.StartHooks(hooks); !st[0].Running {
		t.Fatalf("drops hook: %v", st[0].Err)
	}
	countsExactly(t, dp.ReadEnrichmentUnwatched, "unwatched", 40)
	if lost, err := dp.ReadEnrichmentLost(); err != nil || lost != 0 {
		t.Fatalf("lost = %d (%v), want 0", lost, err)
	}
}

// countsExactly sends n UDP datagrams to a closed port on a new namespace's
// loopback (each dropped, NO_SOCKET, in the sending syscall) and checks
// that read moved by n, retrying when other drops on this machine made it
// move more.
func countsExactly(t *testing.T, read func() (uint64, error), what string, n uint64) {
	t.Helper()
	ns := netlab.NewNetns(t, what)
	for attempt := range 50 { // other packages' tests drop packets too (go test runs them in parallel)
		before, err := read()
		if err != nil {
			t.Fatal(err)
		}
		if err := netlab.UDPSend(ns, "127.0.0.1:4000", "127.0.0.1:9999", make([]byte, 10), int(n)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		after, err := read()
		if err != nil {
			t.Fatal(err)
		}
		switch got := after - before; {
		case got == n:
			t.Logf("%s = %d", what, got)
			return
		case got < n:
			t.Fatalf("%s = %d, want %d", what, got, n)
		default:
			t.Logf("attempt %d: %s = %d, want %d: other drops on this machine, retrying", attempt, what, got, n)
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Fatal("never an exact count: other drops on this machine in every attempt")
}
