package stdout_test

import (
	"os"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
)

// TestNoAllocationsPerFlow: JSON lines to a file allocate nothing per flow
// (exportertest.MarginalAllocs).
func TestNoAllocationsPerFlow(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e := stdout.New(f)
	defer e.Close()
	exportertest.NoAllocsPerFlow(t, e, nil)
}
