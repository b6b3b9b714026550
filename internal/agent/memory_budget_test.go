package agent

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/agent/evictor"
)

// The limit is the lowest memory.max on the way from the process's cgroup
// up to the root; "max" everywhere, no cgroup v2 line, or no file: the
// default.
func TestReadMemoryLimit(t *testing.T) {
	root := t.TempDir()
	var writeFile func(rel, file, content string)
	write := func(rel, content string) { writeFile(rel, "memory.max", content) }
	writeFile = func(rel, file, content string) {
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kubepods", "1073741824\n")
	write("kubepods/pod1", "max\n")
	write("kubepods/pod1/agent", "536870912\n")
	write("kubepods/pod2", "268435456\n")
	write("kubepods/pod2/agent", "max\n")
	write("free", "max\n")
	writeFile("memory/process_api/x", "memory.limit_in_bytes", "9223372036854771712\n") // cgroup v1: no limit
	writeFile("memory/process_api", "memory.limit_in_bytes", "536870912\n")
	for _, c := range []struct {
		proc   string
		limit  int64
		source string
	}{
		{"0::/kubepods/pod1/agent\n", 536870912, "kubepods/pod1/agent/memory.max"},
		{"0::/kubepods/pod2/agent\n", 268435456, "kubepods/pod2/memory.max"},
		{"12:memory:/x\n0::/kubepods\n", 1073741824, "kubepods/memory.max"},
		{"0::/free\n", DefaultMemoryLimit, "default"},
		{"0::/gone\n", DefaultMemoryLimit, "default"},
		{"0::/\n", DefaultMemoryLimit, "default"},
		{"4:memory:/kubepods\n", DefaultMemoryLimit, "default"}, // cgroup v1, no file
		{"4:cpu,memory:/process_api/x\n0::/\n", 536870912, "memory/process_api/memory.limit_in_bytes"},
		{"4:memory:/process_api\n", 536870912, "memory/process_api/memory.limit_in_bytes"},
	} {
		limit, source := readMemoryLimit(root, c.proc)
		want := c.source
		if want != "default" {
			want = filepath.Join(root, want)
		}
		if limit != c.limit || source != want {
			t.Errorf("%q: %d from %s, want %d from %s", c.proc, limit, source, c.limit, want)
		}
	}
}

// The bounds follow the flow map's size (--cache-max-flows), within the
// limit less the BPF maps (which follow --cache-max-flows too), exactly.
func TestMemoryBudget(t *testing.T) {
	const limit, kernel = 512 << 20, 32 << 20
	b := newMemoryBudget(limit, "default", kernel, 100_000, 1000)
	goLimit := int64(0.75 * float64(limit-kernel))
	if b.GoLimit != goLimit {
		t.Fatalf("GoLimit %d, want %d", b.GoLimit, goLimit)
	}
	// The flow map's share: 100,000 / 16 flows, 100,000 / 100 records
	// queued (500 a queue for two exporters); the export queues' batches
	// a quarter of the Go limit.
	if b.OverflowMaxFlows != 6250 || b.ExportFlows != 1000 || b.QueueFlows(2) != 500 || b.QueueFlows(0) != 1000 {
		t.Fatalf("OverflowMaxFlows %d ExportFlows %d (%d a queue of two), want 6250 and 1000 (by the flow map)",
			b.OverflowMaxFlows, b.ExportFlows, b.QueueFlows(2))
	}
	if want := int(0.25 * float64(goLimit) / float64(recordBytes*1000)); b.ExportBatches != want {
		t.Fatalf("ExportBatches %d, want %d", b.ExportBatches, want)
	}
	// A limit smaller than the flow map's share: a quarter of the Go limit.
	// 60 MiB - 57 MiB of maps: Go limit 2,359,296 bytes, 589,824 for the
	// aggregation: 1675 flows of 352 bytes; as much for the queues: 877
	// records of 672 bytes.
	s := newMemoryBudget(60<<20, "cgroup", 57<<20, 100_000, 1000)
	if s.GoLimit != 2359296 || 589824/evictor.OverflowEntryBytes != 1675 || s.OverflowMaxFlows != 1675 {
		t.Fatalf("small limit: GoLimit %d OverflowMaxFlows %d, want 2359296 and 1675", s.GoLimit, s.OverflowMaxFlows)
	}
	if recordBytes != 672 || s.ExportFlows != 877 {
		t.Fatalf("small limit: ExportFlows %d (records of %d bytes), want 877 of 672", s.ExportFlows, recordBytes)
	}
	if want := int64(0.125 * float64(goLimit)); b.ExporterBytes != want {
		t.Fatalf("ExporterBytes %d, want %d", b.ExporterBytes, want)
	}
	// A bigger flow map, a bigger aggregation (its BPF maps lower the Go
	// limit).
	if c := newMemoryBudget(limit, "default", 4*kernel, 1_000_000, 1000); c.OverflowMaxFlows != 62500 || c.GoLimit >= b.GoLimit {
		t.Fatalf("a 1,000,000-flow map: %v, want 62500 flows", c)
	}
	// Maps over the limit: the floors.
	f := newMemoryBudget(limit, "default", 2*limit, 100_000, 1000)
	if f.GoLimit != 0 || f.OverflowMaxFlows != minOverflowFlows || f.ExportBatches != 1 {
		t.Fatalf("floors: %v", f)
	}
	// The queues share ExportBatches; --export-buffer below it is kept.
	b.ExportBatches = 50
	for _, c := range []struct{ want, n, got int }{{8, 2, 8}, {100, 2, 25}, {100, 3, 16}, {100, 200, 1}} {
		if q := b.QueueBatches(c.want, c.n); q != c.got {
			t.Errorf("QueueBatches(%d, %d) = %d, want %d", c.want, c.n, q, c.got)
		}
	}
}

// A running capture's ring comes off the limit like the BPF maps, for the
// Go limit only; the bounds taken at start stay, and with no ring the
// budget is the one without capture.
func TestMemoryBudgetWithCapture(t *testing.T) {
	const limit, kernel, ring = 512 << 20, 32 << 20, 8 << 20
	b := newMemoryBudget(limit, "default", kernel, 100_000, 1000)
	c := b.WithCapture(ring)
	if want := int64(0.75 * float64(limit-kernel-ring)); c.GoLimit != want || c.Kernel != kernel+ring {
		t.Fatalf("with an 8 MiB ring: GoLimit %d, Kernel %d; want %d, %d", c.GoLimit, c.Kernel, want, kernel+ring)
	}
	if b.GoLimit-c.GoLimit != 6<<20 {
		t.Fatalf("an 8 MiB ring lowered the Go limit by %d, want 6 MiB", b.GoLimit-c.GoLimit)
	}
	if c.OverflowMaxFlows != b.OverflowMaxFlows || c.ExportBatches != b.ExportBatches || c.ExporterBytes != b.ExporterBytes {
		t.Fatalf("the capture moved the bounds taken at start: %v, was %v", c, b)
	}
	if b.WithCapture(0) != b || b.WithCapture(-1) != b {
		t.Fatalf("no ring: %v, want %v", b.WithCapture(0), b)
	}
	if f := b.WithCapture(limit); f.GoLimit != 0 {
		t.Fatalf("a ring over the limit: GoLimit %d, want 0", f.GoLimit)
	}
}

// A capture's bounds: its queue is an eighth of the Go limit shared by
// the captures that may run at once, its ring half of that rounded down to
// a power of two (64 KiB at least); CaptureConfig hands them to the
// capture and lowers the Go limit by the kernel bytes while captures run.
func TestMemoryBudgetCapture(t *testing.T) {
	const limit, kernel = 512 << 20, 32 << 20
	b := newMemoryBudget(limit, "default", kernel, 100_000, 1000)
	// Go limit 360 MiB: 45 MiB for 8 queues.
	if b.CaptureQueueBytes != 45<<20/8 || b.CaptureRingBytes != 2<<20 {
		t.Fatalf("queue %d ring %d, want %d and 2 MiB", b.CaptureQueueBytes, b.CaptureRingBytes, 45<<20/8)
	}
	// Go limit 6 MiB: 96 KiB a queue, and the smallest ring.
	if s := newMemoryBudget(40<<20, "default", kernel, 100_000, 1000); s.CaptureRingBytes != 64<<10 || s.CaptureQueueBytes != 96<<10 {
		t.Fatalf("small limit: queue %d ring %d, want 96 KiB and 64 KiB", s.CaptureQueueBytes, s.CaptureRingBytes)
	}
	c := b.CaptureConfig(capture.Config{Enabled: true, MaxSnaplen: 128}, func(string) string { return "" })
	if c.RingBytes != 2<<20 || c.QueueBytes != b.CaptureQueueBytes || !c.Enabled || c.MaxSnaplen != 128 {
		t.Fatalf("config %+v", c)
	}
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	c.OnKernelBytes(8 << 20)
	if got := debug.SetMemoryLimit(-1); got != b.WithCapture(8<<20).GoLimit || got != b.GoLimit-6<<20 {
		t.Fatalf("Go limit %d while 8 MiB of rings run, want %d", got, b.GoLimit-6<<20)
	}
	c.OnKernelBytes(0)
	if got := debug.SetMemoryLimit(-1); got != b.GoLimit {
		t.Fatalf("Go limit %d after the captures, want %d", got, b.GoLimit)
	}
	debug.SetMemoryLimit(123 << 20)
	b.CaptureConfig(capture.Config{}, func(k string) string { return map[string]string{"GOMEMLIMIT": "123MiB"}[k] }).OnKernelBytes(8 << 20)
	if got := debug.SetMemoryLimit(-1); got != 123<<20 {
		t.Fatalf("GOMEMLIMIT set: Go limit %d, want it kept (123 MiB)", got)
	}
}

// GOMEMLIMIT, when set, wins; else the Go runtime's limit is the budget's.
func TestSetGoMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	b := newMemoryBudget(512<<20, "default", 0, 100_000, 1000)
	if SetGoMemoryLimit(b, func(k string) string { return map[string]string{"GOMEMLIMIT": "100MiB"}[k] }) {
		t.Fatal("set the limit although GOMEMLIMIT is set")
	}
	if got := debug.SetMemoryLimit(-1); got != old {
		t.Fatalf("limit changed to %d", got)
	}
	if !SetGoMemoryLimit(b, func(string) string { return "" }) {
		t.Fatal("did not set the limit")
	}
	if got := debug.SetMemoryLimit(-1); got != b.GoLimit {
		t.Fatalf("limit %d, want %d", got, b.GoLimit)
	}
}

// GOGC, when set, wins; else the agent starts at StartGCPercent, and the
// function returned sets the runtime's target back.
func TestSetStartGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	SetStartGCPercent(func(k string) string { return map[string]string{"GOGC": "200"}[k] })()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC set: GC percent changed to %d", got)
	}
	started := SetStartGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(StartGCPercent); got != StartGCPercent {
		t.Fatalf("starting: GC percent %d, want %d", got, StartGCPercent)
	}
	started()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("started: GC percent %d, want 100 back", got)
	}
}
