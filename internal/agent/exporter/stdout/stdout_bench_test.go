package stdout_test

import (
	"os"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/exporter/exportertest"
	"github.com/flowlens/flowlens/internal/agent/exporter/stdout"
)

// BenchmarkEviction is the stdout exporter's cost per flow at 100k flows
// per eviction (exportertest.Run): JSON lines written to /dev/null, a real
// file, so the write system calls are paid as they are on a pipe.
func BenchmarkEviction(b *testing.B) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	e := stdout.New(f)
	defer e.Close()
	exportertest.Run(b, e, nil)
}
