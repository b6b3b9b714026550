package config

import "time"

// The agent's shutdown budgets, written once: the agent spends them
// (internal/agent, Run) and the operator renders the DaemonSet's
// terminationGracePeriodSeconds from ShutdownWorstCase with a margin
// (internal/operator/render), so that the kubelet never kills an agent
// that is still flushing (docs/design/faults.md, "Shutdown within the grace
// period").
const (
	// ShutdownQueueWait is each export queue's budget, from the signal, for
	// making the last evictions (the one in progress and the final one)
	// wait for room: spent only while they wait for that queue, so a dead
	// consumer spends it once and a healthy one only its real work; past
	// it the full queue drops its oldest batch, counted.
	ShutdownQueueWait = 2 * time.Second
	// ShutdownPushWait is how long, from the signal, the last evictions may
	// wait for room at all, whatever the queues' budgets have left.
	ShutdownPushWait = 5 * time.Second
	// ExportShutdownBudget is each exporter's budget, from the end of the
	// final eviction, to deliver what is queued and close: the exporters
	// flush in parallel, each within its own budget, so a dead one costs
	// the others nothing. What is still queued then is counted lost
	// (flowlens_agent_export_dropped_flows_total{reason="shutdown"}).
	ExportShutdownBudget = 10 * time.Second
	// ExportCloseGrace is how long an exporter's Close may still take once
	// its budget has run out (exporter.Queue.Close: closing aborts an Export
	// in progress; an exporter stuck past it is left behind): the gRPC
	// exporter's Close waits this long for the acknowledgements of what it
	// sent (grpc.CloseTimeout).
	ExportCloseGrace = 5 * time.Second
	// MetricsShutdownWait bounds the metrics server's graceful stop.
	MetricsShutdownWait = 2 * time.Second
	// ShutdownKernelAllowance is the part no timer bounds: detaching the
	// programs, the final read of at most --cache-max-flows entries and
	// closing the BPF objects (well under a second on the benchmark host
	// for 100,000 flows; five allowed).
	ShutdownKernelAllowance = 5 * time.Second
)

// ShutdownWorstCase is the longest the agent takes from SIGTERM to exit
// with every bound reached at once: the last evictions waiting their
// longest, every exporter flushing its whole budget and its close grace,
// the metrics server's stop and the kernel side's allowance.
func ShutdownWorstCase() time.Duration {
	return ShutdownPushWait + ExportShutdownBudget + ExportCloseGrace + MetricsShutdownWait + ShutdownKernelAllowance
}
