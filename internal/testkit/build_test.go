package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// processBinDir removes the directories of test processes that are gone
// and keeps those of live ones (this process's, and its parent's).
func TestProcessBinDirSweepsDeadProcesses(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(os.TempDir(), binDirName)
	dead := filepath.Join(parent, strconv.Itoa(gone.Process.Pid))
	live := filepath.Join(parent, strconv.Itoa(os.Getppid()))
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "bin"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(live) })
	dir, err := processBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(parent, strconv.Itoa(os.Getpid())); dir != want {
		t.Errorf("dir %s, want %s", dir, want)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the directory of exited pid %d is still there (%v)", gone.Process.Pid, err)
	}
	if _, err := os.Stat(filepath.Join(live, "bin")); err != nil {
		t.Errorf("a live process's binary was removed: %v", err)
	}
}
