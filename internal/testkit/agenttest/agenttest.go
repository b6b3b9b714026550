// Package agenttest runs the agent's real code in-process for tests: Start
// loads a configuration from flags, runs an agent on it and waits until it
// is ready; Stop stops it mid-test or at the end, waits for the shutdown
// (the flows left in the kernel flushed to every exporter) and returns the
// flows it printed (JSON lines, decoded with the public field names, so a
// test also checks the output contract); Log is what it logged. Pair builds
// two network namespaces joined by a veth (internal/testkit/netlab) and
// Match and Sum select flows. Feature tests (internal/agent/feature/<name>),
// the agent's own tests and the tests that run it beside other programs
// (cmd/flowlens, test/otlp, test/dashboards) share it. Most uses need root
// and a kernel.
package agenttest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit"
)

// How long Start waits for the agent to be ready and attached, and Stop
// for it to shut down.
const (
	readyTimeout  = 15 * time.Second
	attachTimeout = 10 * time.Second
	stopTimeout   = 30 * time.Second
)

// Harness is a running agent.
type Harness struct {
	t      *testing.T
	A      *agent.Agent
	out    *testkit.SyncBuffer
	log    *testkit.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

// Start runs the agent's real code in-process with the given flags (after
// --metrics-address=, so no metrics server unless args ask for one), waits
// until it is ready (every interface present at start handled, Agent.Ready)
// and then until it has attached to want interfaces. Unless opts.Stdout is
// set it prints to a buffer (Output, Stop), and unless opts.Logger is set
// it logs to one (Log), shown when the test fails. The agent is stopped
// when the test ends.
func Start(t *testing.T, want int, opts agent.Options, args ...string) *Harness {
	t.Helper()
	cfg, err := config.Load(append([]string{"--metrics-address="}, args...), nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	h := &Harness{t: t, out: &testkit.SyncBuffer{}, log: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	if opts.Stdout == nil {
		opts.Stdout = h.out
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(h.log, nil))
		// Registered before Stop's cleanup, so it runs after it: the log
		// shown includes the shutdown.
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("agent log:\n%s", h.log.String())
			}
		})
	}
	h.A, err = agent.New(cfg, opts)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.A.Run(ctx) }()
	t.Cleanup(func() { h.Stop() })
	select {
	case <-h.A.Ready():
	case err := <-h.done:
		h.cancel()
		h.cancel = nil // Run has returned: nothing for Stop to wait for
		t.Fatalf("agent stopped before it was ready: %v", err)
	case <-time.After(readyTimeout):
		t.Fatalf("agent not ready in %s", readyTimeout)
	}
	deadline := time.Now().Add(attachTimeout)
	for h.A.DP.Attached() < want {
		if time.Now().After(deadline) {
			t.Fatalf("agent attached to %d interfaces, want %d", h.A.DP.Attached(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h
}

// Output is what the agent has printed so far (its JSON lines).
func (h *Harness) Output() string { return h.out.String() }

// Log is what the agent has logged so far (slog's text lines; empty when
// the test passed its own opts.Logger).
func (h *Harness) Log() string { return h.log.String() }

// Stop stops the agent, waits until Run has returned (it detaches, then
// flushes the flows left in the kernel to every exporter), failing the test
// on an error or after stopTimeout, and returns every flow it printed. It
// may be called mid-test; later calls only return the flows again.
func (h *Harness) Stop() []JSONFlow {
	h.t.Helper()
	if h.cancel == nil {
		return ParseFlows(h.t, h.out.String())
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("agent stopped with error: %v", err)
		}
	case <-time.After(stopTimeout):
		h.t.Fatalf("agent did not stop within %s", stopTimeout)
	}
	return ParseFlows(h.t, h.out.String())
}

// HookStatus is the status of the named feature's hook in the running agent
// (zero when the feature is not enabled).
func (h *Harness) HookStatus(name string) datapath.HookStatus {
	for _, st := range h.A.DP.Hooks() {
		if st.Name == name {
			return st
		}
	}
	return datapath.HookStatus{}
}
