package capture

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Instance is one capture program loaded outside Run and attached nowhere,
// with its own ring and counters: for BPF_PROG_TEST_RUN (make bench-bpf,
// the filter's tests). It is an ingress program for Ethernet devices, its
// namespace index 0.
type Instance struct {
	Prog *ebpf.Program
	// Ring reads what the program copies (records: a cap_meta, then the
	// packet's first bytes). It wakes at a watermark (an eighth of the
	// ring): read it with a deadline.
	Ring *ringbuf.Reader
	s    *session
}

// LoadInstance loads an Instance with filter f and snaplen, its ring of
// ringBytes (ringSize).
func LoadInstance(f Filter, snaplen uint32, ringBytes int) (_ *Instance, err error) {
	conf, err := compile(f)
	if err != nil {
		return nil, err
	}
	spec, err := loadCapture()
	if err != nil {
		return nil, err
	}
	s, err := newSession(spec, ringSize(ringBytes, snaplen), snaplen)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	k := instanceKey{}
	if s.progs[k], err = loadInstance(spec, k, conf, snaplen, s); err != nil {
		return nil, err
	}
	if s.rd, err = ringbuf.NewReader(s.ring); err != nil {
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
