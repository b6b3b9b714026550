package testkit

import (
	"errors"
	"os/exec"
	"testing"
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
