// Package httpserve is the metrics and health HTTP server every flowlens
// binary runs: /metrics serves a Prometheus registry (text, or OpenMetrics
// when the scraper asks), /healthz answers 200 while the process serves HTTP
// (liveness), and /readyz 200 once a readiness function returns nil, 503 with
// its error until then (readiness).
//
//	srv, err := httpserve.Listen(":9401", httpserve.Handler(httpserve.Options{Gatherer: reg, Ready: ready}), log)
//	...
//	srv.Shutdown(ctx)
//
// Over TLS (a web configuration file, exporter-toolkit's), a server whose
// client_auth_type is VerifyClientCertIfGiven, the operator's default,
// asks every client for a certificate and verifies the one given: the
// kubelet's probes, which have none, get /healthz and /readyz, and every
// other path (/metrics) answers 403 naming what it needs unless the
// client's certificate verified (a chain to client_ca_file, ExtKeyUsage
// ClientAuth): Prometheus' scrape identity (docs/security.md).
//
// It links nothing of the kernel side, so the collector can use it.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
)

// Options configure Handler.
type Options struct {
	// Gatherer is served on /metrics, usually a *prometheus.Registry.
	Gatherer prometheus.Gatherer
	// Ready reports readiness on /readyz: nil when ready, else why not. A
	// nil Ready means always ready.
	Ready func() error
	// Logger gets the errors of metrics that cannot be gathered (served
	// without them); nil means slog.Default().
	Logger *slog.Logger
}

// Handler serves /metrics, /healthz and /readyz (GET only).
func Handler(o Options) http.Handler {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
		// A source that cannot be read leaves its metrics out; the rest
		// is served.
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		EnableOpenMetrics:   true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Server is a running metrics and health HTTP server.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	done chan error
}

// CheckWebConfig checks a web configuration file (its YAML, certificates,
// keys and client CA), for the validation of flag: the error names the flag
// and the file. An empty path (plain HTTP) is valid.
func CheckWebConfig(flag, path string) error {
	if _, err := readWebConfig(path); err != nil {
		return fmt.Errorf("invalid %s %q: %w", flag, path, err)
	}
	return nil
}

// VerifyIfGiven is the client_auth_type under which /metrics needs a
// verified client certificate (see the package doc).
const VerifyIfGiven = "VerifyClientCertIfGiven"

// readWebConfig validates the web configuration file path (exporter-toolkit
// reads it again on every handshake) and returns its client_auth_type, read
// into exporter-toolkit's own type ("" for no file). It refuses
// client_allowed_sans unless every client must present a verified
// certificate: exporter-toolkit checks the SANs in a VerifyPeerCertificate
// that indexes the first certificate, which Go calls with none when the
// client sent none (TestAllowedSANsPanicWithoutCertificate).
func readWebConfig(path string) (string, error) {
	if err := web.Validate(path); err != nil || path == "" {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var c web.Config
	if err := yaml.Unmarshal(b, &c); err != nil {
		return "", err
	}
	auth := c.TLSConfig.ClientAuth
	if c.TLSConfig.ClientAllowedSans != nil && auth != "RequireAndVerifyClientCert" {
		return "", fmt.Errorf("client_allowed_sans needs client_auth_type RequireAndVerifyClientCert, not %q: exporter-toolkit fails the handshake of a client without a certificate", auth)
	}
	return auth, nil
}

// needClientCert wraps h so that every path but /healthz and /readyz
// answers 403 unless the client presented a certificate that verified.
func needClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || (r.TLS != nil && len(r.TLS.VerifiedChains) > 0) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "forbidden: %s needs a client certificate of the flowlens CA (the web configuration's client_ca_file), "+
			"e.g. Prometheus' scrape identity, the Secret flowlens-metrics-client (docs/security.md)\n", r.URL.Path)
	})
}

// Listen binds addr (so a bad or busy address fails here, at startup) and
// serves h on it in the background until Shutdown: plain HTTP when
// webConfigFile is "", else as the file says (see the package doc; a bad
// file fails here; with VerifyClientCertIfGiven, only /healthz and /readyz
// without a verified client certificate). log (nil: slog.Default()) gets the server's errors.
func Listen(addr, webConfigFile string, h http.Handler, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	auth, err := readWebConfig(webConfigFile)
	if err != nil {
		return nil, fmt.Errorf("metrics: web config %s: %w", webConfigFile, err)
	}
	if auth == VerifyIfGiven {
		h = needClientCert(h)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	s := &Server{lis: lis, done: make(chan error, 1), srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() {
		err := web.Serve(lis, s.srv, &web.FlagConfig{WebConfigFile: &webConfigFile}, log)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			log.Error("metrics server stopped", "error", err)
		}
		s.done <- err
	}()
	return s, nil
}

// Addr is the address the server listens on (with the port chosen when addr
// asked for port 0).
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Shutdown stops the server, letting requests in progress finish until ctx
// ends (then closing their connections).
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	return errors.Join(err, <-s.done)
}

// ReadyWhenClosed adapts a channel closed on readiness to Options.Ready;
// until then Ready returns notYet.
func ReadyWhenClosed(ch <-chan struct{}, notYet error) func() error {
	return func() error {
		select {
		case <-ch:
			return nil
		default:
			return notYet
		}
	}
}
