package agent

import (
	"context"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/agent/capturectl"
)

// newCapture builds packet capture's engine over the datapath (issue #32,
// docs/capture.md): nothing of it is loaded until a capture runs. With
// --capture=false there is none, and the control stream says so to the
// collector.
func (a *Agent) newCapture() {
	if !a.cfg.Capture {
		return
	}
	// Ring and queue sized from the memory budget, the rings charged to it
	// while captures run (docs/design/faults.md).
	a.Capture = capture.New(a.Memory.CaptureConfig(capture.ConfigFrom(a.cfg, a.DP, a.log), os.Getenv))
}

// captureMetrics are the engine's (running, packets, lost by reason).
func (a *Agent) captureMetrics() []prometheus.Collector {
	if a.Capture == nil {
		return nil
	}
	return []prometheus.Collector{a.Capture}
}

// runCapture keeps the control stream to the collector open, on the gRPC
// exporter's connection (without the grpc exporter there is no collector
// to take requests from), until ctx ends or the returned stop is called;
// stop returns once every capture has ended.
func (a *Agent) runCapture(ctx context.Context) (stop func()) {
	if a.grpc == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	cfg := capturectl.Config{Conn: a.grpc.Conn(), Node: a.cfg.NodeName, MaxSnaplen: uint32(a.cfg.CaptureMaxSnaplen), Logger: a.log}
	if a.Capture != nil {
		cfg.Engine = a.Capture
	}
	go func() {
		defer close(done)
		capturectl.Run(ctx, cfg)
	}()
	return func() { cancel(); <-done }
}
