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
	if err := run(context.Background(), []string{"--version"}, nil, &out); err != nil {
		t.Errorf("--version: %v", err)
	}
	want := "flowlens-operator " + version.Version + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
	if err := run(context.Background(), []string{"--help"}, nil, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v, want flag.ErrHelp (main exits 0 on it)", err)
	}
	var ue usageError
	if err := run(context.Background(), []string{"--no-such-flag"}, nil, io.Discard); !errors.As(err, &ue) {
		t.Errorf("an unknown flag: %v, want a usage error (exit 2)", err)
	}
	if err := run(context.Background(), []string{"extra"}, nil, io.Discard); !errors.As(err, &ue) {
		t.Errorf("a positional argument: %v, want a usage error (exit 2)", err)
	}
	// The settings come from flags, FLOWLENS_OPERATOR_* variables and a
	// YAML file alike, and a bad value names where it came from.
	env := map[string]string{"FLOWLENS_OPERATOR_LOG_LEVEL": "loud"}
	err := run(context.Background(), nil, func(k string) string { return env[k] }, io.Discard)
	if want := `invalid FLOWLENS_OPERATOR_LOG_LEVEL "loud": must be one of debug, info, warn, error`; !errors.As(err, &ue) || err.Error() != want {
		t.Errorf("a bad variable: %v, want usage error %q", err, want)
	}
	var help bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, nil, &help); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(help.String(), "\nImages:\n  --agent-image image ") ||
		!strings.Contains(help.String(), "\nMetrics and health:\n  --metrics-bind-address host:port ") {
		t.Errorf("-h: %v, help without its sections:\n%s", err, help.String())
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
