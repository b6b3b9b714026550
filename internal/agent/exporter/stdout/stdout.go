// Package stdout exports flows as JSON lines, one object per flow, to
// standard output or any io.Writer.
package stdout

import (
	"bufio"
	"context"
	"io"
	"slices"
	"sync"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Exporter writes one JSON object per flow per line.
type Exporter struct {
	// Stats are the delivery statistics every exporter keeps: Messages
	// are the batches written and flushed, Bytes the bytes written,
	// Records the flows whose line was written whole, SendErrors the
	// writes that failed, FailedFlows the flows whose line was not
	// written whole (lost: with Records, every flow handed to Export).
	Stats exporter.DeliveryStats

	mu   sync.Mutex
	out  counted // the destination, counting what it took
	w    *bufio.Writer
	buf  []byte
	ends []int // per flow of the Export in progress, where its line ends (reused)
	torn bool  // a failed write may have left a line cut: the next starts on a new line
}

// counted is a writer that counts the bytes its destination took, so that
// a failed write says which lines reached it whole.
type counted struct {
	w io.Writer
	n int
}

func (c *counted) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

// stdoutCounts are the delivery counts a writer learns: what it wrote,
// and so what it could not.
const stdoutCounts = exporter.CountMessages | exporter.CountSendErrors | exporter.CountFailed

// The metrics read the exporter through it (exporter.NewCollector).
var _ exporter.Delivering = (*Exporter)(nil)

// Delivery is the exporter's delivery statistics (exporter.Delivering).
func (e *Exporter) Delivery() (*exporter.DeliveryStats, exporter.Counts) {
	return &e.Stats, stdoutCounts
}

// New returns an Exporter writing to w.
func New(w io.Writer) *Exporter {
	e := &Exporter{out: counted{w: w}, buf: make([]byte, 0, 1024)}
	e.w = bufio.NewWriterSize(&e.out, 64<<10)
	return e
}

// Name implements exporter.Exporter.
func (e *Exporter) Name() string { return "stdout" }

// Export writes the batch and flushes, so each batch is visible at once.
// When a write fails, the flows whose line reached the destination whole
// are counted written (Records), the others failed (FailedFlows), and the
// exporter starts the next batch afresh on a new line: a destination that
// recovers (a full disk freed) gets the next batches.
func (e *Exporter) Export(_ context.Context, batch []flow.Record) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := e.out.n
	e.ends = e.ends[:0]
	if e.torn {
		if err := e.w.WriteByte('\n'); err != nil {
			return e.failed(batch, start, err)
		}
	}
	for i := range batch {
		e.buf = batch[i].AppendJSON(e.buf[:0])
		e.buf = append(e.buf, '\n')
		// Where this line ends once written, noted before writing: a
		// write that fails may still have taken it whole.
		e.ends = append(e.ends, e.out.n+e.w.Buffered()+len(e.buf)-start)
		if _, err := e.w.Write(e.buf); err != nil {
			return e.failed(batch, start, err)
		}
	}
	if err := e.w.Flush(); err != nil {
		return e.failed(batch, start, err)
	}
	e.torn = false
	// Counted once per batch, not per flow.
	e.Stats.Messages.Add(1)
	e.Stats.Bytes.Add(uint64(e.out.n - start))
	e.Stats.Records.Add(uint64(len(batch)))
	return nil
}

// failed counts a failed write of batch, started when the destination had
// taken start bytes: the flows whose line it took whole were written, the
// others failed. The buffer, with its sticky error, is reset.
func (e *Exporter) failed(batch []flow.Record, start int, err error) error {
	written := e.out.n - start
	whole, _ := slices.BinarySearch(e.ends, written+1) // lines ending within what was taken
	e.torn = written > 0 && (whole == 0 || e.ends[whole-1] != written)
	e.w.Reset(&e.out)
	e.Stats.SendErrors.Add(1)
	e.Stats.Bytes.Add(uint64(written))
	e.Stats.Records.Add(uint64(whole))
	e.Stats.FailedFlows.Add(uint64(len(batch) - whole))
	return err
}

// Close flushes.
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.w.Flush()
}
