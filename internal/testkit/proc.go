package testkit

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// StartOwned starts cmd so that the kernel kills it (SIGKILL) when the test
// binary dies, even by a crash that skips every cleanup. Pdeathsig fires
// when the thread that forked the child exits, and tests that enter
// network namespaces end their locked threads, so every such child is
// forked from one thread kept for the life of the process.
func StartOwned(cmd *exec.Cmd) error {
	spawnOnce.Do(func() { go spawner() })
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error)
	spawns <- spawn{cmd, done}
	return <-done
}

type spawn struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawns    = make(chan spawn)
)

// spawner forks the owned children from its own thread, which it never
// gives back (its goroutine never returns).
func spawner() {
	runtime.LockOSThread()
	for s := range spawns {
		s.done <- s.cmd.Start()
	}
}
