package collector

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/collector/enrich"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// config is a collector on free local ports, printing JSON, with a
// history, without enrichment.
func config() Config {
	return Config{Listen: "127.0.0.1:0", Output: "json", ShutdownGrace: 5 * time.Second, MetricsAddress: "127.0.0.1:0",
		Limits: receiver.Options{MaxMessageBytes: receiver.DefaultMaxMessageBytes, MaxFlowsPerBatch: receiver.DefaultMaxFlowsPerBatch,
			MaxStreams: receiver.DefaultMaxStreams},
		History: History{Size: 10, MaxAge: time.Minute}}
}

// When New fails after binding the gRPC address (the metrics address is
// busy), the one shutdown path releases what was built: the gRPC address
// is free again, and nothing logs totals of a collector that never ran.
// Run's shutdown releases both addresses.
func TestShutdownReleasesWhatWasBuilt(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := config()
	cfg.Listen, cfg.MetricsAddress = testkit.FreeAddr(t), busy.Addr().String()
	var logs bytes.Buffer
	c, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || c != nil {
		t.Fatalf("New with a busy metrics address: %v, %v; want an error", c, err)
	}
	if strings.Contains(logs.String(), "msg=stopped") {
		t.Errorf("a collector that never ran logged its totals:\n%s", logs.String())
	}
	cfg.MetricsAddress = testkit.FreeAddr(t)
	c, err = New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New on the released gRPC address: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run, cancelled: %v", err)
	}
	for _, a := range []string{cfg.Listen, cfg.MetricsAddress} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s still bound after Run: %v", a, err)
		}
		l.Close()
	}
}

// A metric name the enrichment does not know is the Config's fault.
func TestUnknownMetricIsConfigError(t *testing.T) {
	cfg := config()
	cfg.Metrics = enrich.MetricsOptions{Enabled: []string{"no_such_metric"}}
	if _, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown metric: %v, want ErrConfig", err)
	}
}

// --listen "": no gRPC at all (a collector that only consumes Kafka), no
// address bound, no authorization asked for; it runs and stops cleanly.
func TestNoGRPC(t *testing.T) {
	cfg := config()
	cfg.Listen, cfg.Auth = "", AuthKubernetes
	var got Addrs
	c, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Ready: func(a Addrs) { got = a }})
	if err != nil {
		t.Fatal(err)
	}
	if got.GRPC != nil || got.Metrics == nil {
		t.Errorf("addresses %+v, want metrics only", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// --auth: kubernetes without a cluster to ask is an error at start; auto
// without one serves without authorization, and says so.
func TestAuthChoice(t *testing.T) {
	t.Setenv("KUBECONFIG", t.TempDir()+"/missing")
	t.Setenv("HOME", t.TempDir())
	notInCluster := func() (*rest.Config, error) { return nil, rest.ErrNotInCluster }
	cfg := config()
	cfg.Auth = AuthKubernetes
	if _, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), InCluster: notInCluster}); err == nil ||
		!strings.HasPrefix(err.Error(), "--auth kubernetes: ") {
		t.Errorf("--auth kubernetes outside a cluster: %v", err)
	}
	var logs bytes.Buffer
	cfg.Auth = AuthAuto
	c, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), InCluster: notInCluster})
	if err != nil {
		t.Fatal(err)
	}
	if c.auth != nil || !strings.Contains(logs.String(), "no per-call authorization (--auth none, or auto without a cluster)") {
		t.Errorf("--auth auto outside a cluster: authorizer %v, logs:\n%s", c.auth, logs.String())
	}
	c.shutdown(context.Background())
	// In a cluster (here one that is never asked): kubernetes.
	cfg.Listen = "127.0.0.1:0"
	c, err = New(cfg, Options{Logger: slog.New(slog.DiscardHandler), InCluster: func() (*rest.Config, error) {
		return &rest.Config{Host: "https://127.0.0.1:1"}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c.auth == nil {
		t.Error("--auth auto in a cluster: no authorizer")
	}
	c.shutdown(context.Background())
}
