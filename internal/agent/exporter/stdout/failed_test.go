package stdout_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// flows returns n distinct flows, told apart by their source port from
// first on.
func flows(first, n int) []flow.Record {
	out := make([]flow.Record, n)
	for i := range out {
		out[i] = flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"),
			SrcPort: uint16(first + i), DstPort: 53, Proto: 17, Packets: 1, Bytes: 80, Sampling: 1}
	}
	return out
}

// fills is a destination that takes limit bytes, then fails as a full
// disk does (a short write, then ENOSPC), until limit is raised.
type fills struct {
	out   bytes.Buffer
	limit int
}

func (f *fills) Write(p []byte) (int, error) {
	n := min(len(p), max(f.limit-f.out.Len(), 0))
	f.out.Write(p[:n])
	if n < len(p) {
		return n, syscall.ENOSPC
	}
	return n, nil
}

// A write that fails part-way: the flows whose line reached the
// destination whole are written (Records), the others failed, exactly,
// the cut line among them; once the destination takes writes again the
// next batch starts on a new line, every line of it whole.
func TestFailedWriteCountsEveryFlowNotWritten(t *testing.T) {
	var lines bytes.Buffer
	if err := stdout.New(&lines).Export(context.Background(), flows(100, 10)); err != nil {
		t.Fatal(err)
	}
	ls := strings.SplitAfter(lines.String(), "\n")
	dst := &fills{limit: len(ls[0]) + len(ls[1]) + len(ls[2])/2} // two lines whole, the third cut
	e := stdout.New(dst)
	if err := e.Export(context.Background(), flows(100, 10)); err == nil {
		t.Fatal("Export to a full destination succeeded")
	}
	st, _ := e.Delivery()
	if st.Records.Load() != 2 || st.FailedFlows.Load() != 8 || st.Messages.Load() != 0 || st.SendErrors.Load() != 1 {
		t.Fatalf("records %d failed %d messages %d send errors %d; want 2, 8, 0, 1",
			st.Records.Load(), st.FailedFlows.Load(), st.Messages.Load(), st.SendErrors.Load())
	}

	dst.limit = 1 << 30 // room again
	if err := e.Export(context.Background(), flows(200, 5)); err != nil {
		t.Fatalf("Export once the destination takes writes again: %v", err)
	}
	if st.Records.Load() != 7 || st.FailedFlows.Load() != 8 || st.Messages.Load() != 1 || st.Bytes.Load() != uint64(dst.out.Len()) {
		t.Fatalf("records %d failed %d messages %d bytes %d; want 7, 8, 1, %d",
			st.Records.Load(), st.FailedFlows.Load(), st.Messages.Load(), st.Bytes.Load(), dst.out.Len())
	}
	var ports []int
	for _, l := range strings.Split(strings.TrimSuffix(dst.out.String(), "\n"), "\n") {
		var f struct {
			SrcPort int `json:"src_port"`
		}
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			if l != strings.TrimSuffix(ls[2][:len(ls[2])/2], "\n") {
				t.Errorf("line %q is neither a flow nor the cut one", l)
			}
			continue
		}
		ports = append(ports, f.SrcPort)
	}
	if want := []int{100, 101, 200, 201, 202, 203, 204}; !equal(ports, want) {
		t.Errorf("whole lines of flows %v, want %v", ports, want)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The reader of the agent's standard output goes away (a pipe whose read
// end is closed: EPIPE), as the exporter queue runs it: the flows of the
// batches that could not be written are counted per flow in
// flowlens_agent_export_failed_flows_total{exporter="stdout"}, exactly the
// flows the reader did not get, and with the flows written they add up to
// every flow given.
func TestPipeClosedFailedFlowsMetric(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	q := exporter.NewQueue(stdout.New(w), 8, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)

	const first, later = 300, 3 * 250
	q.Push(flow.BatchOf(flows(0, first)), time.Now())
	read := 0
	sc := bufio.NewScanner(r)
	for read < first && sc.Scan() {
		read++
	}
	r.Close() // the reader is gone: every later write fails
	for i := range 3 {
		q.Push(flow.BatchOf(flows(first+i*250, 250)), time.Now().Add(time.Second))
	}
	if err := (exporter.Fanout{q}).Close(config.ExportShutdownBudget); err != nil {
		t.Fatalf("Close: %v", err)
	}

	fams := promtest.Gather(t, exporter.NewCollector("flowlens_agent", []*exporter.Queue{q}))
	failed, _ := promtest.Value(fams, "flowlens_agent_export_failed_flows_total", "exporter=stdout")
	records, _ := promtest.Value(fams, "flowlens_agent_export_records_total", "exporter=stdout")
	errs, _ := promtest.Value(fams, "flowlens_agent_export_errors_total", "exporter=stdout")
	t.Logf("given %d: read %d; records_total %v, failed_flows_total %v, errors_total %v", first+later, read, records, failed, errs)
	if read != first || records != first || failed != later || errs != 3 {
		t.Errorf("read %d, records %v, failed %v, failed exports %v; want %d, %d, %d, 3", read, records, failed, errs, first, first, later)
	}
	promtest.Expect(t, fams, 0, "flowlens_agent_export_dropped_flows_total", "exporter=stdout", "reason=shutdown")
	promtest.Expect(t, fams, 0, "flowlens_agent_export_dropped_flows_total", "exporter=stdout", "reason=queue_full")
}
