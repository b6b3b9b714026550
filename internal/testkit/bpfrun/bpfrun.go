// Package bpfrun runs a BPF program through BPF_PROG_TEST_RUN an exact
// number of times, for tests that count what the program did.
//
// cilium/ebpf's Program.Run with Repeat > 1 restarts the whole run when the
// syscall is interrupted (EINTR: a signal, such as the Go runtime's
// preemption signal, arrived mid-loop), so the program may run more times
// than asked and a test counting packets sees extra ones now and then. With
// Repeat 1 the kernel never reports EINTR after the run (it checks "done"
// before "signal"), so a loop of single runs is exact.
package bpfrun

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Exactly runs prog on data n times and returns the last return value.
func Exactly(prog *ebpf.Program, data []byte, n int) (uint32, error) {
	var ret uint32
	for i := 0; i < n; i++ {
		r, err := prog.Run(&ebpf.RunOptions{Data: data, Repeat: 1})
		if err != nil {
			return r, fmt.Errorf("run %d of %d: %w", i+1, n, err)
		}
		ret = r
	}
	return ret, nil
}
