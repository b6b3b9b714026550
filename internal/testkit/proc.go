package testkit

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
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

// Proc is a child process a test started with Start.
type Proc struct {
	Cmd *exec.Cmd
	// Log holds what the process wrote to stderr (unless the caller set
	// Cmd.Stderr), logged when the test fails.
	Log  *SyncBuffer
	done chan struct{}
	err  error
}

// Done is closed once the process has exited; Err is then its exit error.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Proc) Err() error { return p.err }

// stopWait is how long Start's cleanup waits for the process to stop
// after SIGINT before it kills it (and fails the test).
const stopWait = 15 * time.Second

// Start starts cmd owned (StartOwned), its stderr in p.Log unless set, and
// stops it when t ends: SIGINT, then SIGKILL and a test error if it has
// not stopped within 15 s; with the test failed, what logs the process's
// stderr names it as what.
func Start(t testing.TB, what string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Log: &SyncBuffer{}, done: make(chan struct{})}
	if cmd.Stderr == nil {
		cmd.Stderr = p.Log
	}
	if err := StartOwned(cmd); err != nil {
		t.Fatalf("starting %s: %v", what, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(stopWait):
			cmd.Process.Kill()
			<-p.done
			t.Errorf("%s did not stop within %v of SIGINT", what, stopWait)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", what, p.Log.String())
		}
	})
	return p
}
