// Package exporter defines the interface every flow exporter implements and
// the bounded queue that sits between the eviction loop and each exporter.
//
// The evictor pushes each batch into every exporter's Queue, which holds at
// most a configured number of batches. When a queue is full, Push waits for
// room (the evictor reads a map no program writes any more, so only the
// evictor waits, never the kernel side), which bounds the agent's memory
// whatever the size of an eviction. Each queue has its own wait budget per
// eviction, spent only by waiting for that queue, and the Fanout lets the
// full queues wait at the same time: past its budget a queue drops its
// oldest batch, counted, so a stuck consumer can neither hold up evictions
// nor make a healthy exporter drop. Each exporter runs in its own goroutine.
//
// At shutdown the same holds: the last evictions wait for each queue within
// its own budget (Queue.StopWaiting), and Fanout.Close flushes every queue
// at once, each within its own budget; what is still queued then is counted
// (reason shutdown, metrics.go) and logged, never released silently.
package exporter

import (
	"context"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Exporter sends batches of flow records somewhere.
type Exporter interface {
	// Name identifies the exporter in logs and metrics ("stdout", "grpc").
	Name() string
	// Export sends one batch. It may block (the Queue absorbs that); it must
	// not keep or modify the batch after returning: other exporters share it.
	Export(ctx context.Context, batch []flow.Record) error
	// Close flushes and releases the exporter.
	Close() error
}

// Bind returns ctx, cancelled also when life ends (an exporter's Close, so
// that it aborts an Export in progress), and the function that releases
// it, to defer.
func Bind(ctx, life context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(life, cancel)
	return ctx, func() { stop(); cancel() }
}
