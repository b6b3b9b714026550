package stdout_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
	"github.com/flowlens/flowlens/pkg/flow"
)

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("stdout closed") }

// The delivery statistics count what was written, once per batch: one
// message per batch, its flows and exact bytes; a failed write is a send
// error and counts nothing written.
func TestDeliveryStats(t *testing.T) {
	var out bytes.Buffer
	e := stdout.New(&out)
	for _, n := range []int{3, 2} {
		if err := e.Export(context.Background(), make([]flow.Record, n)); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := e.Delivery()
	if lines := strings.Count(out.String(), "\n"); st.Messages.Load() != 2 || st.Records.Load() != 5 || lines != 5 ||
		st.Bytes.Load() != uint64(out.Len()) || st.SendErrors.Load() != 0 {
		t.Errorf("messages %d records %d bytes %d send errors %d; want 2, 5 (lines %d), %d, 0",
			st.Messages.Load(), st.Records.Load(), st.Bytes.Load(), st.SendErrors.Load(), lines, out.Len())
	}

	f := stdout.New(failingWriter{})
	if err := f.Export(context.Background(), make([]flow.Record, 1)); err == nil {
		t.Fatal("Export to a failing writer succeeded")
	}
	if st, _ := f.Delivery(); st.SendErrors.Load() != 1 || st.Messages.Load() != 0 || st.Records.Load() != 0 {
		t.Errorf("failing writer: send errors %d messages %d records %d; want 1, 0, 0", st.SendErrors.Load(), st.Messages.Load(), st.Records.Load())
	}
}
