package metrics

import (
	"errors"
	"net/http"

	"github.com/flowlens/flowlens/internal/shared/httpserve"
)

// Handler serves /metrics (Prometheus text or OpenMetrics), /healthz (200
// while the process serves HTTP) and /readyz (200 once Options.Ready
// returns nil, 503 with its error until then): package httpserve's handler,
// shared with the collector.
func (m *Metrics) Handler() http.Handler {
	// A source that cannot be read leaves its metrics out (and counts in
	// flowlens_agent_metrics_read_errors_total); the rest is served.
	return httpserve.Handler(httpserve.Options{Gatherer: m.reg, Ready: m.opts.Ready, Logger: m.log})
}

// ReadyWhenClosed adapts a channel closed on readiness (agent.Ready()) to
// Options.Ready.
func ReadyWhenClosed(ch <-chan struct{}) func() error {
	return httpserve.ReadyWhenClosed(ch, errors.New("starting: interfaces not attached yet"))
}

// Server is the metrics HTTP server (package httpserve's).
type Server = httpserve.Server

// Listen binds addr (so a bad or busy address fails here, at startup) and
// serves Handler on it in the background until Shutdown: over plain HTTP,
// or as the exporter-toolkit web configuration file webConfig says (TLS,
// mTLS; --web-config-file).
func (m *Metrics) Listen(addr, webConfig string) (*Server, error) {
	return httpserve.Listen(addr, webConfig, m.Handler(), m.log)
}
