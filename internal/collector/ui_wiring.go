package collector

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowlens/flowlens/internal/collector/ui"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
)

// uiServer is the service map's HTTP server (package ui) on --ui-listen.
type uiServer struct {
	lis net.Listener
	srv *http.Server
}

// listenUI binds --ui-listen and serves the service map from the history,
// over TLS with --tls-cert, authorized as GetFlows. Without a history
// (--history-size 0) there is nothing to serve: it says so and binds
// nothing.
func (c *Collector) listenUI() error {
	cfg := &c.cfg
	if cfg.UI.Listen == "" {
		return nil
	}
	if c.hist == nil {
		c.log.Info("serving no service map (--ui-listen) without a flow history (--history-size 0)")
		return nil
	}
	lis, err := net.Listen("tcp", cfg.UI.Listen)
	if err != nil {
		return err
	}
	o := ui.Options{History: c.hist, MaxNodes: cfg.UI.MaxNodes, MaxEdges: cfg.UI.MaxEdges, Logger: c.log}
	if c.auth != nil {
		o.Authorize = c.auth.authorizeHTTP
	}
	srv := &http.Server{Handler: ui.Handler(o), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10, ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelWarn)}
	if t := cfg.Limits.TLS; t != nil {
		t = t.Clone()
		t.NextProtos = []string{"h2", "http/1.1"}
		lis = tls.NewListener(lis, t)
	}
	c.ui = &uiServer{lis: lis, srv: srv}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("service map server stopped", "error", err)
		}
	}()
	c.log.Info("serving the service map", "address", lis.Addr().String(), "tls", cfg.Limits.TLS != nil)
	return nil
}

func (u *uiServer) shutdown(ctx context.Context, log *slog.Logger) {
	if err := u.srv.Shutdown(ctx); err != nil {
		log.Warn("service map server shutdown", "error", err)
		u.srv.Close()
	}
}

// authorizeHTTP is the service map's ui.Options.Authorize: a request is
// reviewed as a GetFlows call is (authorize), its bearer token's user must
// get flowcollectors/flows. Unauthenticated is 401, PermissionDenied 403,
// an API server that cannot answer 503.
func (a *authorizer) authorizeHTTP(r *http.Request) error {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return &ui.StatusError{Code: http.StatusUnauthorized, Msg: "collector: reading flows needs a bearer token whose user may " +
			kubeauth.Permission(kubeauth.VerbRead) + " (flowlens ui sends the kubeconfig's)"}
	}
	if _, err := a.review(r.Context(), token, "", kubeauth.VerbRead); err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.Unauthenticated:
			return &ui.StatusError{Code: http.StatusUnauthorized, Msg: st.Message()}
		case codes.PermissionDenied:
			return &ui.StatusError{Code: http.StatusForbidden, Msg: st.Message()}
		}
		return &ui.StatusError{Code: http.StatusServiceUnavailable, Msg: st.Message()}
	}
	return nil
}
