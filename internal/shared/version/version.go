// Package version holds the release and source revision every flowlens
// binary reports, with --version and as its <binary>_build_info metric.
// Version (and optionally Revision) are set at build time:
//
//	go build -ldflags "-X github.com/flowlens/flowlens/internal/shared/version.Version=v0.1.0" ./cmd/...
//
// (the Makefile's LDFLAGS and the Containerfile do this, with
// -X ...version.Revision=<commit> too); a plain go build leaves Version
// "dev" and Revision to the commit the Go toolchain stamps into binaries
// built inside a git checkout (vcs.revision; none with -buildvcs=false).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the release, e.g. "v0.1.0"; "dev" when not set at build time.
var Version = "dev"

// Revision is the source commit; "" means: read the toolchain's
// vcs.revision stamp (see Rev).
var Revision = ""

// String is what --version prints for program, e.g.
// "flowlens-agent v0.1.0 (go1.26.8 linux/amd64)": the release, the Go
// toolchain and the platform the binary was built for.
func String(program string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Rev is the source commit the binary was built from: Revision when set at
// build time, else the toolchain's vcs.revision stamp (with "-dirty" when
// the tree had local changes), else "unknown" (go test binaries, builds
// outside a git checkout or with -buildvcs=false).
func Rev() string {
	if Revision != "" {
		return Revision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// NewCollector is the <namespace>_build_info gauge, always 1, whose labels
// say what is running: version, revision and goversion (e.g.
// flowlens_agent_build_info{version="v0.1.0",revision="2451713…",goversion="go1.26.8"} 1).
// Each binary registers it once with its own namespace.
func NewCollector(namespace string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "build_info",
		Help:      "Always 1; its labels are the release (version), source commit (revision) and Go toolchain (goversion) of the running binary.",
		ConstLabels: prometheus.Labels{
			"version":   Version,
			"revision":  Rev(),
			"goversion": runtime.Version(),
		},
	})
	g.Set(1)
	return g
}
