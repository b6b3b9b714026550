package collector

import (
	"bufio"
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/flowquery"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
)

// printer writes the flows of every agent stream to one output.
type printer struct {
	format  string
	query   flowquery.Query // nil: every flow
	table   *textfmt.Table  // with SRC_K8S and DST_K8S columns when enriched
	printed atomic.Uint64

	mu     sync.Mutex
	w      *bufio.Writer
	buf    []byte
	header bool
	err    error
}

func newPrinter(w io.Writer, format string, query flowquery.Query, withK8s bool) *printer {
	return &printer{format: format, query: query, table: textfmt.NewTable(false, withK8s), w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 2048)}
}

// write is the pipeline's Sink: prints the batch's matching flows and
// flushes, so each batch shows at once.
func (p *printer) write(_ context.Context, flows []enriched.Flow) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err // stdout is gone: refuse, the agents will retry later
	}
	n := 0
	for i := range flows {
		f := &flows[i]
		if !p.query.Match(f) {
			continue
		}
		if p.format == OutputTable {
			if !p.header {
				p.header = true
				p.w.Write(append(p.table.AppendHeader(p.buf[:0]), '\n'))
			}
			p.buf = p.table.AppendRow(p.buf[:0], f)
		} else {
			p.buf = f.AppendJSON(p.buf[:0])
		}
		p.buf = append(p.buf, '\n')
		if _, err := p.w.Write(p.buf); err != nil {
			p.err = err
			return err
		}
		n++
	}
	p.printed.Add(uint64(n))
	if err := p.w.Flush(); err != nil {
		p.err = err
		return err
	}
	return nil
}

func (p *printer) flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}
