// Command pin-images pins the Containerfile's base images by digest, for
// reproducible releases. Every line
//
//	ARG <NAME>_IMAGE<...>=<registry>/<repository>:<tag>[@sha256:<digest>]
//
// has its tag resolved in its registry (anonymously, or with the
// credentials of ~/.docker/config.json) and is rewritten as
// <repository>:<tag>@sha256:<digest>; a digest already there is replaced,
// so a rerun moves the pins to what the tags point at now. The digest of a
// multi-platform image is its index's, so builds for every platform stay
// pinned. Nothing else in the file changes.
//
//	make pin-images                                  # = go -C hack/pin-images run . ../../Containerfile
//
// It needs the registries (docker.io, gcr.io) to be reachable. It is its own
// module so that go-containerregistry stays out of flowlens's go.mod.
package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/crane"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pin-images CONTAINERFILE")
		os.Exit(2)
	}
	file := os.Args[1]
	in, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pin-images:", err)
		os.Exit(1)
	}
	out, err := pin(in, func(ref string) (string, error) { return crane.Digest(ref) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "pin-images:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "pin-images:", err)
		os.Exit(1)
	}
}

// imageArg is an ARG line holding an image reference, with or without a
// digest.
var imageArg = regexp.MustCompile(`^(ARG\s+[A-Z0-9_]*_IMAGE[A-Z0-9_]*=)([^\s@]+)(@sha256:[0-9a-f]{64})?\s*$`)

// pin rewrites every image ARG line of a Containerfile with the digest
// digest returns for its reference.
func pin(containerfile []byte, digest func(ref string) (string, error)) ([]byte, error) {
	lines := strings.SplitAfter(string(containerfile), "\n")
	pinned := 0
	for i, l := range lines {
		body, nl := strings.CutSuffix(l, "\n")
		m := imageArg.FindStringSubmatch(body)
		if m == nil {
			continue
		}
		d, err := digest(m[2])
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", m[2], err)
		}
		if !strings.HasPrefix(d, "sha256:") {
			return nil, fmt.Errorf("resolve %s: unexpected digest %q", m[2], d)
		}
		lines[i] = m[1] + m[2] + "@" + d
		if nl {
			lines[i] += "\n"
		}
		pinned++
	}
	if pinned == 0 {
		return nil, fmt.Errorf("no ARG ..._IMAGE=... line to pin")
	}
	return []byte(strings.Join(lines, "")), nil
}
