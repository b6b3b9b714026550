package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// binDirName is the directory under os.TempDir() holding the binaries Build
// makes, one subdirectory per test process (its pid).
const binDirName = "flowlens-testbin"

var (
	buildMu   sync.Mutex
	builds    = map[string]*buildResult{}
	binDirErr error
	binDir    string
	binDirSet sync.Once
)

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// Build builds the module's main package pkg ("./cmd/flowlens-collector")
// once per test process and returns the binary's path; a failed build
// fails every test that asks for it. The binaries live in
// <TMPDIR>/flowlens-testbin/<pid>/: a test process has no exit hook to
// remove its own, so each one removes the directories of processes that
// are gone when it makes its own, and nothing accumulates (an ~80 MB
// binary per `go test` run had filled /tmp).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	r, ok := builds[pkg]
	if !ok {
		r = &buildResult{}
		builds[pkg] = r
	}
	buildMu.Unlock()
	r.once.Do(func() { r.path, r.err = build(pkg) })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

func build(pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	binDirSet.Do(func() { binDir, binDirErr = processBinDir() })
	if binDirErr != nil {
		return "", binDirErr
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(binDir, filepath.Base(pkg))
	cmd := exec.Command(goBin, "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// processBinDir makes this process's directory and removes those of the
// processes that no longer run.
func processBinDir() (string, error) {
	parent := filepath.Join(os.TempDir(), binDirName)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		os.RemoveAll(filepath.Join(parent, e.Name()))
	}
	dir := filepath.Join(parent, strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	return dir, nil
}

// alive says whether a process with this pid exists (signal 0: EPERM
// means it exists under another user).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
