// Package exporter defines the interface every flow exporter implements and
// the bounded queue that sits between the eviction loop and each exporter.
//
// The evictor never waits on an exporter: it pushes each batch into every
// exporter's Queue, which holds at most a configured number of batches and
// drops the oldest (counting them) when a slow or absent consumer lets it
// fill. Each exporter runs in its own goroutine, so one slow exporter does
// not hold up another.
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
