package version

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

func TestCollector(t *testing.T) {
	old := Version
	defer func() { Version = old }()
	Version, Revision = "v0.1.0", "abc123"
	defer func() { Revision = "" }()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector("flowlens_agent"))
	want := `# HELP flowlens_agent_build_info Always 1; its labels are the release (version), source commit (revision) and Go toolchain (goversion) of the running binary.
# TYPE flowlens_agent_build_info gauge
flowlens_agent_build_info{goversion="` + runtime.Version() + `",revision="abc123",version="v0.1.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestRevUnstamped(t *testing.T) {
	// Test binaries carry no vcs stamp.
	if got := Rev(); got != "unknown" {
		t.Errorf("Rev() in a test binary = %q, want unknown", got)
	}
}
