package agent

// The agent's memory budget: its memory limit, read from its cgroup (v2
// memory.max: the lowest of its own cgroup's and its ancestors'), the Go
// runtime's soft limit set from it (unless GOMEMLIMIT is set), and the
// bounds of the agent's structures that grow with traffic or with a stuck
// exporter, derived from it. docs/design/faults.md ("Memory under any
// traffic") states each bound and what happens at it.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/agent/evictor"
	"github.com/flowlens/flowlens/pkg/flow"
)

// DefaultMemoryLimit is the memory limit the agent assumes when its cgroup sets
// none (memory.max "max", cgroup v1, no cgroup file system): the
// operator's default limit for the agent's container, so that an agent
// run by hand behaves as it would in its DaemonSet.
const DefaultMemoryLimit = 512 << 20

// The budget's shares, in the order they are taken:
//   - the BPF maps are charged to the agent's cgroup (they follow
//     --cache-max-flows), and come off the limit first;
//   - the Go runtime's soft limit is goShare of the rest (the remainder is
//     what the runtime does not count: the binary's text, thread stacks,
//     kernel buffers of its sockets and pipes);
//   - the overflow aggregation holds at most one flow per overflowPerMap
//     flows of the flow map, and the export queues one record per
//     exportPerMap, each within its share of the Go limit (overflowShare,
//     exportShare) when the limit is the smaller bound; the queues'
//     batches (--export-buffer) are bounded by exportShare too; what an
//     exporter's library buffers on its own (Kafka's produce buffer) may use
//     libraryShare;
//   - the packet captures that may run at once (capture.MaxConcurrent)
//     may queue captureShare of the Go limit together, and each has a ring
//     of half its queue's bytes (rounded down to a power of two), in the
//     kernel: charged only while a capture runs (WithCapture).
//
// The overflow aggregation's flows wait for the next eviction: it asks for
// one at half its bound (evictor), so it needs to hold what overflows
// while an eviction runs, which follows the flow map's size (an eviction
// reads at most one map), not the limit; beyond its bound it refuses
// flows, counted, which it would only have delayed when evictions cannot
// keep up (a stuck exporter holds up one eviction, not each:
// exporter.Queue; docs/design/faults.md).
// The export queues' batches are the --export-buffer an operator sets to
// ride out a collector's outage (across evictions, in the small batches of
// light traffic): the limit lowers it only when it does not fit. Unset,
// their records are bounded by the flow map too: a flood's full batches
// wait in the flow map, not in the queues, which need only keep the
// exporter busy.
const (
	goShare       = 0.75
	overflowShare = 0.25
	exportShare   = 0.25
	libraryShare  = 0.125
	captureShare  = 0.125
	// overflowPerMap: the overflow aggregation holds --cache-max-flows /
	// overflowPerMap flows (6,250 for the default 100,000).
	overflowPerMap = 16
	// exportPerMap: the export queues hold --cache-max-flows / exportPerMap
	// records together (1,000 for the default 100,000), at least a batch
	// each.
	exportPerMap = 100
	// minOverflowFlows is the overflow aggregation's bound however small
	// the budget: below it, the limit is too small for the flow maps anyway
	// (logged at start).
	minOverflowFlows = 1024
)

// recordBytes is what one flow record costs in an export batch: the record
// and its two interfaces on average (flow.Pool).
const recordBytes = int64(unsafe.Sizeof(flow.Record{}) + 2*unsafe.Sizeof(flow.Interface{}))

// MemoryBudget is the agent's memory budget and the bounds derived from it.
type MemoryBudget struct {
	Limit  int64  // bytes: the cgroup's memory.max, or DefaultMemoryLimit
	Source string // the memory.max file read, or "default"
	Kernel int64  // bytes of the agent's BPF maps (charged to its cgroup)
	// GoLimit is the Go runtime's soft memory limit the agent sets when
	// GOMEMLIMIT is not set.
	GoLimit int64
	// OverflowMaxFlows bounds the flows the evictor aggregates from the
	// overflow ring buffer in one period (evictor.Config.OverflowMaxFlows).
	OverflowMaxFlows int
	// ExportBatches bounds the batches queued in all the export queues
	// together (exporter.NewQueue's capacity times the exporters), and
	// ExportFlows their records (exporter.Queue.LimitFlows).
	ExportBatches, ExportFlows int
	// ExporterBytes bounds what an exporter's client library buffers
	// beyond the queue's batch, in bytes (kafka.Config.MaxBufferedBytes).
	ExporterBytes int64
	// CaptureQueueBytes and CaptureRingBytes are one packet capture's
	// queue (Go heap) and ring (kernel) bounds (capture.Config.QueueBytes
	// and RingBytes; CaptureConfig).
	CaptureQueueBytes, CaptureRingBytes int64
}

// newMemoryBudget derives the bounds from a memory limit, the BPF maps'
// size and the flow map's entries (--cache-max-flows), for export batches
// of batchSize records.
func newMemoryBudget(limit int64, source string, kernel int64, mapFlows, batchSize int) MemoryBudget {
	b := MemoryBudget{Limit: limit, Source: source, Kernel: kernel}
	b.GoLimit = int64(goShare * float64(max(limit-kernel, 0)))
	byLimit := int(overflowShare*float64(b.GoLimit)) / evictor.OverflowEntryBytes
	b.OverflowMaxFlows = max(min(mapFlows/overflowPerMap, byLimit), minOverflowFlows)
	b.ExportBatches = max(int(exportShare*float64(b.GoLimit)/float64(recordBytes*int64(max(batchSize, 1)))), 1)
	b.ExportFlows = max(min(mapFlows/exportPerMap, int(exportShare*float64(b.GoLimit)/float64(recordBytes))), 1)
	b.ExporterBytes = int64(libraryShare * float64(b.GoLimit))
	b.CaptureQueueBytes = int64(captureShare*float64(b.GoLimit)) / capture.MaxConcurrent
	b.CaptureRingBytes = minCaptureRing
	for b.CaptureRingBytes*2 <= b.CaptureQueueBytes/2 {
		b.CaptureRingBytes *= 2
	}
	return b
}

// minCaptureRing is a capture's smallest ring however small the budget.
const minCaptureRing = 64 << 10

// CaptureConfig is c with the capture bounds of b (CaptureQueueBytes,
// CaptureRingBytes), and the Go memory limit lowered by the kernel bytes
// of the running captures while they run (WithCapture, SetGoMemoryLimit
// with getenv: GOMEMLIMIT, when set, wins).
func (b MemoryBudget) CaptureConfig(c capture.Config, getenv func(string) string) capture.Config {
	c.RingBytes, c.QueueBytes = int(b.CaptureRingBytes), b.CaptureQueueBytes
	c.OnKernelBytes = func(total int64) { SetGoMemoryLimit(b.WithCapture(total), getenv) }
	return c
}

// WithCapture is the budget while packet captures run (issue #32) whose
// kernel rings and scratch maps take ring bytes in all. A capture loads them when
// it starts and closes them when it ends, and like the flow maps they are
// charged to the agent's cgroup: while it runs they come off the limit
// first, so the Go runtime's soft limit is ¾ of (limit − maps − ring);
// with no capture running, nothing is counted. The caller sets the Go
// limit from it when a capture starts and back from b when the last one
// ends (SetGoMemoryLimit; CaptureConfig does). The bounds derived at start
// (overflow aggregation, export queues, exporter buffer, capture queues)
// stay; the capture queues are Go heap, inside the Go limit.
func (b MemoryBudget) WithCapture(ring int64) MemoryBudget {
	c := b
	c.Kernel += max(ring, 0)
	c.GoLimit = int64(goShare * float64(max(c.Limit-c.Kernel, 0)))
	return c
}

// QueueBatches is each of n export queues' capacity: want (--export-buffer),
// lowered so that the n queues hold at most ExportBatches batches in all
// (at least 1 each).
func (b MemoryBudget) QueueBatches(want, n int) int {
	if n <= 0 {
		return want
	}
	return max(min(want, b.ExportBatches/n), 1)
}

// QueueFlows is each of n export queues' bound in records: ExportFlows
// shared (a queue takes one batch whatever its size).
func (b MemoryBudget) QueueFlows(n int) int {
	return max(b.ExportFlows/max(n, 1), 1)
}

// String is the budget for the agent's start-up log line.
func (b MemoryBudget) String() string {
	return fmt.Sprintf("limit=%dMiB (%s) bpf_maps=%dMiB go_limit=%dMiB overflow_max_flows=%d export_batches=%d export_flows=%d exporter_buffer=%dMiB capture_ring=%dKiB capture_queue=%dKiB",
		b.Limit>>20, b.Source, b.Kernel>>20, b.GoLimit>>20, b.OverflowMaxFlows, b.ExportBatches, b.ExportFlows, b.ExporterBytes>>20,
		b.CaptureRingBytes>>10, b.CaptureQueueBytes>>10)
}

// StartGCPercent is the Go garbage collector's target (GOGC) while the
// agent starts, unless the GOGC environment variable is set: a new
// collection starts when the heap has grown by StartGCPercent % of what the
// last one left live. Start-up allocates ~19 MiB (the BPF objects' ELF and
// BTF decoded, their programs copied and loaded) around a live heap of ~5
// MiB; at the runtime's default, 100, the heap grew to ~20 MiB and kept ~6
// MiB of it idle and resident long after (docs/benchmarks.md, "The agent's
// memory by origin"). At 25 the start-up heap stays within ~1.25 times its
// live bytes for ~15 ms more CPU; the steady state runs at the default
// again, where a lower target would cost CPU per flow (0.5 µs a flow at 50,
// 1 µs at 25, measured).
const StartGCPercent = 25

// SetStartGCPercent sets the Go garbage collector's target to
// StartGCPercent unless the GOGC environment variable is set (getenv),
// which wins, and returns the function that sets it back (a no-op when
// GOGC is set): the agent calls it first thing, and the function once it
// is ready (every interface there at start attached).
func SetStartGCPercent(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	old := debug.SetGCPercent(StartGCPercent)
	return func() { debug.SetGCPercent(old) }
}

// SetGoMemoryLimit sets the Go runtime's soft memory limit to b.GoLimit unless
// the GOMEMLIMIT environment variable is set (getenv), which wins. It
// reports whether it set it.
func SetGoMemoryLimit(b MemoryBudget, getenv func(string) string) bool {
	if getenv("GOMEMLIMIT") != "" || b.GoLimit <= 0 {
		return false
	}
	debug.SetMemoryLimit(b.GoLimit)
	return true
}

// readMemoryLimit returns the memory limit of the calling process's cgroup, with the
// file it came from: the lowest memory.max of its cgroup v2 and its
// ancestors under root (normally /sys/fs/cgroup); on a host whose memory
// controller is on cgroup v1, the lowest memory.limit_in_bytes under
// root/memory. DefaultMemoryLimit and "default" when none sets one. procCgroup
// is /proc/self/cgroup's content.
func readMemoryLimit(root, procCgroup string) (int64, string) {
	if p, ok := cgroupPath(procCgroup, ""); ok {
		if n, src, ok := lowestLimit(root, p, "memory.max"); ok {
			return n, src
		}
	}
	if p, ok := cgroupPath(procCgroup, "memory"); ok {
		if n, src, ok := lowestLimit(filepath.Join(root, "memory"), p, "memory.limit_in_bytes"); ok {
			return n, src
		}
	}
	return DefaultMemoryLimit, "default"
}

// readOwnMemoryLimit is readMemoryLimit for this process, on /sys/fs/cgroup.
func readOwnMemoryLimit() (int64, string) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return DefaultMemoryLimit, "default"
	}
	return readMemoryLimit("/sys/fs/cgroup", string(b))
}

// cgroupPath is the path in /proc/self/cgroup of the hierarchy with
// controller ("": cgroup v2's "0::/path").
func cgroupPath(procCgroup, controller string) (string, bool) {
	for line := range strings.Lines(procCgroup) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if controller == "" && f[0] == "0" && f[1] == "" {
			return f[2], true
		}
		if controller != "" && slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2], true
		}
	}
	return "", false
}

// lowestLimit is the lowest limit in file from root/path up to root.
func lowestLimit(root, path, file string) (int64, string, bool) {
	limit, source := int64(-1), ""
	for dir := filepath.Join(root, path); strings.HasPrefix(dir, root); dir = filepath.Dir(dir) {
		if n, err := readMemoryMax(filepath.Join(dir, file)); err == nil && n >= 0 && (limit < 0 || n < limit) {
			limit, source = n, filepath.Join(dir, file)
		}
		if dir == root {
			break
		}
	}
	return limit, source, limit >= 0
}

// readMemoryMax reads a memory.max or memory.limit_in_bytes file: bytes, or -1
// for no limit ("max"; cgroup v1's near-2^63 page-rounded maximum).
func readMemoryMax(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New(path + ": " + err.Error())
	}
	if n >= 1<<62 {
		return -1, nil
	}
	return n, nil
}
