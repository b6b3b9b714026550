// Package stdout exports flows as JSON lines, one object per flow, to
// standard output or any io.Writer.
package stdout

import (
	"bufio"
	"context"
	"io"
	"sync"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Exporter writes one JSON object per flow per line.
type Exporter struct {
	// Stats are the delivery statistics every exporter keeps: Messages
	// are the batches written and flushed, Bytes their bytes, Records
	// their flows, SendErrors the writes that failed.
	Stats exporter.DeliveryStats

	mu  sync.Mutex
	w   *bufio.Writer
	buf []byte
}

// stdoutCounts are the delivery counts a writer learns: what it wrote.
const stdoutCounts = exporter.CountMessages | exporter.CountSendErrors

// The metrics read the exporter through it (exporter.NewCollector).
var _ exporter.Delivering = (*Exporter)(nil)

// Delivery is the exporter's delivery statistics (exporter.Delivering).
func (e *Exporter) Delivery() (*exporter.DeliveryStats, exporter.Counts) {
	return &e.Stats, stdoutCounts
}

// New returns an Exporter writing to w.
func New(w io.Writer) *Exporter {
	return &Exporter{w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 1024)}
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "stdout" }

// Export writes the batch and flushes, so each batch is visible at once.
func (e *Exporter) Export(_ context.Context, batch []flow.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	bytes := 0
	for i := range batch {
		e.buf = batch[i].AppendJSON(e.buf[:0])
		e.buf = append(e.buf, '\n')
		if _, err := e.w.Write(e.buf); err != nil {
			e.Stats.SendErrors.Add(1)
			return err
		}
		bytes += len(e.buf)
	}
	if err := e.w.Flush(); err != nil {
		e.Stats.SendErrors.Add(1)
		return err
	}
	// Counted once per batch, not per flow.
	e.Stats.Messages.Add(1)
	e.Stats.Bytes.Add(uint64(bytes))
	e.Stats.Records.Add(uint64(len(batch)))
	return nil
}

// Close flushes.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.Flush()
}
