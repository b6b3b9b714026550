package datapath_test

import (
	"errors"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// A metrics scrape may come while the agent shuts down: the counters'
// readers then say the datapath is closed, and nothing panics.
func TestReadersAfterClose(t *testing.T) {
	netlab.Require(t)
	dp, err := datapath.Load(datapath.Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := &dp.Maps
	if _, err := m.ReadDNSPendingFull(); err != nil {
		t.Fatalf("before Close: %v", err)
	}
	if err := dp.Close(); err != nil {
		t.Fatal(err)
	}
	_, errCounters := m.ReadCounters()
	_, errCounter := m.ReadCounter(0)
	_, errLost := m.ReadEnrichmentLost()
	_, errUnwatched := m.ReadEnrichmentUnwatched()
	_, errAnswers := m.ReadDNSAnswersLost()
	_, errPending := m.ReadDNSPendingFull()
	for i, err := range []error{errCounters, errCounter, errLost, errUnwatched, errAnswers, errPending} {
		if !errors.Is(err, datapath.ErrClosed) {
			t.Errorf("reader %d after Close: %v, want %v", i, err, datapath.ErrClosed)
		}
	}
}
