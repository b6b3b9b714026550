package netlab

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

var swept sync.Map // dir -> struct{}

// sweepOnce removes, once per directory and process, the namespaces left by
// test processes that died before their cleanups ran (go test -timeout
// panics, SIGKILL). Without it they would pile up in `ip netns list` and keep
// their kernel memory forever. Only names of our own format whose creating
// pid no longer exists are touched.
func sweepOnce(dir string) {
	if _, loaded := swept.LoadOrStore(dir, struct{}{}); loaded {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, ok := ownerPid(e.Name())
		if !ok || pid == os.Getpid() || alive(pid) {
			continue
		}
		_ = unmountRemove(filepath.Join(dir, e.Name()))
	}
}

// ownerPid parses "fltest-<hint>-<pid>-<random>".
func ownerPid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return 0, false
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 {
		return 0, false
	}
	pid, err := strconv.Atoi(parts[1])
	return pid, err == nil && pid > 0
}

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return !errors.Is(err, unix.ESRCH)
}
