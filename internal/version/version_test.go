package version

import (
	"runtime"
	"testing"
)

func TestString(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version = "v0.1.0"
	want := "flowlens-agent v0.1.0 (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := String("flowlens-agent"); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
