package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/shared/version"
)

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &out); err != nil {
		t.Errorf("--version: %v", err)
	}
	want := "flowlens-operator " + version.Version + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
	if err := run(context.Background(), []string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp (main exits 0 on it)", err)
	}
	var ue usageError
	if err := run(context.Background(), []string{"--no-such-flag"}, io.Discard); !errors.As(err, &ue) {
		t.Errorf("an unknown flag: %v, want a usage error (exit 2)", err)
	}
	if err := run(context.Background(), []string{"extra"}, io.Discard); !errors.As(err, &ue) {
		t.Errorf("a positional argument: %v, want a usage error (exit 2)", err)
	}
}

func TestDefaultAgentImage(t *testing.T) {
	old := version.Version
	defer func() { version.Version = old }()
	for v, want := range map[string]string{
		"v0.2.0":           "ghcr.io/flowlens/flowlens-agent:v0.2.0",
		"v1.0.0-rc.1":      "ghcr.io/flowlens/flowlens-agent:v1.0.0-rc.1",
		"dev":              "ghcr.io/flowlens/flowlens-agent:" + fallbackAgentTag,
		"v0.1.0-3-gabcdef": "ghcr.io/flowlens/flowlens-agent:" + fallbackAgentTag,
	} {
		version.Version = v
		if got := defaultAgentImage(); got != want {
			t.Errorf("version %s: %s, want %s", v, got, want)
		}
		// The Kafka collector's image is the same release's collector.
		if got, want := defaultCollectorImage(), strings.Replace(want, "flowlens-agent:", "flowlens-collector:", 1); got != want {
			t.Errorf("version %s: collector %s, want %s", v, got, want)
		}
	}
}
