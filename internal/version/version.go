// Package version holds the release every flowlens binary reports with
// --version. Version is set at build time:
//
//	go build -ldflags "-X github.com/flowlens/flowlens/internal/version.Version=v0.1.0" ./cmd/...
//
// (the Makefile's LDFLAGS and the Containerfile do this); a plain go build
// leaves it "dev".
package version

import (
	"fmt"
	"runtime"
)

// Version is the release, e.g. "v0.1.0"; "dev" when not set at build time.
var Version = "dev"

// String is what --version prints for program, e.g.
// "flowlens-agent v0.1.0 (go1.26.8 linux/amd64)": the release, the Go
// toolchain and the platform the binary was built for.
func String(program string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", program, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
