package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/shared/version"
)

// --version prints the version on stdout and exits 0, whatever else is
// given, without loading anything; --help prints the help.
func TestVersionAndHelp(t *testing.T) {
	want := "flowlens-agent " + version.Version + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"--version"}, {"-version"}, {"--sampling=0", "--version"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 0 || out.String() != want || errOut.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0, %q", args, code, out.String(), errOut.String(), want)
		}
	}
	var out bytes.Buffer
	if code := run([]string{"--help"}, &out, &bytes.Buffer{}); code != 0 || !strings.HasPrefix(out.String(), "Usage: flowlens-agent [flags]") ||
		!strings.Contains(out.String(), "--version") {
		t.Errorf("--help: exit %d, stdout:\n%s", code, out.String())
	}
}
