// Package stdout exports flows as JSON lines, one object per flow, to
// standard output or any io.Writer.
package stdout

import (
	"bufio"
	"context"
	"io"
	"sync"

	"github.com/flowlens/flowlens/pkg/flow"
)

// Exporter writes one JSON object per flow per line.
type Exporter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	buf []byte
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
	for i := range batch {
		e.buf = batch[i].AppendJSON(e.buf[:0])
		e.buf = append(e.buf, '\n')
		if _, err := e.w.Write(e.buf); err != nil {
			return err
		}
	}
	return e.w.Flush()
}

// Close flushes.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.Flush()
}
