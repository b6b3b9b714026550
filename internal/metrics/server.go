package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves /metrics (Prometheus text or OpenMetrics), /healthz (200
// while the process serves HTTP) and /readyz (200 once Options.Ready
// returns nil, 503 with its error until then).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		// A source that cannot be read leaves its metrics out (and counts
		// in flowlens_agent_metrics_read_errors_total); the rest is served.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if m.opts.Ready != nil {
			if err := m.opts.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// ReadyWhenClosed adapts a channel closed on readiness (agent.Ready()) to
// Options.Ready.
func ReadyWhenClosed(ch <-chan struct{}) func() error {
	return func() error {
		select {
		case <-ch:
			return nil
		default:
			return errors.New("starting: interfaces not attached yet")
		}
	}
}

// Server is the metrics HTTP server.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	done chan error
}

// Listen binds addr (so a bad or busy address fails here, at startup) and
// serves Handler on it in the background until Shutdown.
func (m *Metrics) Listen(addr string) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	s := &Server{lis: lis, done: make(chan error, 1), srv: &http.Server{
		Handler:           m.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelDebug),
	}}
	go func() {
		err := s.srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			m.log.Error("metrics server stopped", "error", err)
		}
		s.done <- err
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Shutdown stops the server, letting scrapes in progress finish until ctx
// ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	return errors.Join(err, <-s.done)
}
