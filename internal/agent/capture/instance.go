package capture

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
)

// Instance is one capture program loaded outside Run and attached nowhere,
// with its own ring and counters: for BPF_PROG_TEST_RUN (make bench-bpf,
// the filter's tests). It is an ingress program for Ethernet devices, its
// namespace index 0.
type Instance struct {
	Prog *ebpf.Program
	// Ring reads what the program copies (perf records: a cap_meta, then
	// the packet's first bytes). It wakes at a watermark: read it with a
	// deadline.
	Ring *perf.Reader
	s    *session
}

// LoadInstance loads an Instance with filter f and snaplen, its ring
// ringBytes per CPU.
func LoadInstance(f Filter, snaplen uint32, ringBytes int) (_ *Instance, err error) {
	conf, err := compile(f)
	if err != nil {
		return nil, err
	}
	spec, err := loadCapture()
	if err != nil {
		return nil, err
	}
	s := &session{progs: map[instanceKey]*ebpf.Program{}}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.events, err = ebpf.NewMap(spec.Maps[captureMapCapEvents]); err != nil {
		return nil, fmt.Errorf("capture: ring: %w", err)
	}
	if s.counts, err = ebpf.NewMap(spec.Maps[captureMapCapCounts]); err != nil {
		return nil, fmt.Errorf("capture: counters: %w", err)
	}
	k := instanceKey{}
	if s.progs[k], err = loadInstance(spec, k, conf, snaplen, s); err != nil {
		return nil, err
	}
	if s.rd, err = newReader(s.events, ringBytes); err != nil {
		return nil, err
	}
	return &Instance{Prog: s.progs[k], Ring: s.rd, s: s}, nil
}

// Counts sums the program's per-CPU counters: packets matched, and those
// the ring could not take.
func (i *Instance) Counts() (matched, ringFull uint64, err error) { return i.s.kernelCounts() }

// MetaSize is the size of the metadata before each copied packet.
const MetaSize = metaSize

// Close releases the program, its ring and its maps.
func (i *Instance) Close() { i.s.close() }
