package testkit

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// Chromium is Debian's headless browser for the browser tests, gated as
// every tool the tests drive (Need: skipped in short mode or when missing
// outside CI, failing in CI); make deps-test installs it.
func Chromium(t *testing.T) string {
	t.Helper()
	var missing error = errors.New("no chromium in PATH: make deps-test installs Debian's chromium package")
	var exe string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe, missing = p, nil
			break
		}
	}
	Need(t, "Chromium (the service map's browser test)", missing)
	return exe
}

// ChromiumTempDir is a directory to give Chromium as its TMPDIR
// (chromedp.Env("TMPDIR="+dir)), removed when the test ends. A browser
// that is killed, as chromedp ends it, leaves its process-singleton
// directory (org.chromium.Chromium.*) in its temporary directory: without
// this, one per browser test piled up in /tmp.
//
// Call it before starting the browser, so that its removal runs after the
// browser is stopped (cleanups run last first). The removal is retried for
// a child process still exiting, and a failure is logged, not failed: it
// is not what the test checks.
func ChromiumTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "flowlens-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; ; i++ {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if i == 20 {
				t.Logf("Chromium's temporary directory not removed: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return dir
}
