// Package ui is the collector's service map (docs/ui.md): an HTTP server
// on its own listener (--ui-listen) answering GET /api/v1/graph and GET
// /api/v1/flows from the flow history (history.Service.Snapshot; the
// graph is package servicemap's Build, computed on the request's
// goroutine from the snapshot's pointers, never on the ingest path), and
// the page itself at "/" (Page, embedded from dist/).
//
// The seam between the API and the page: everything under dist/ is the
// built page (`make ui` writes it from the page's sources and lockfile,
// which live beside it, e.g. internal/collector/ui/web/ with package.json
// and package-lock.json, outside the embed; until then dist/index.html is
// a placeholder). The page makes no request outside the collector, and
// only relative ones: "api/v1/graph", "api/v1/flows" and its own assets,
// so that it works at flowlens ui's local port and behind any path
// prefix. The API's JSON is package servicemap's (docs/ui.md). This
// package's Go files other than the page's own tests are the API's; the
// page owns dist/ and its sources.
//
// Every request is authorized as a GetFlows call is (Options.Authorize:
// the collector's --auth kubernetes reviews the bearer token for get on
// flowcollectors/flows), refused with 401 or 403 and the reason; the
// listener follows --listen's rules (collector options).
package ui

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
)

// Paths of the API.
const (
	PathGraph = "/api/v1/graph"
	PathFlows = "/api/v1/flows"
)

// StatusError is an Authorize refusal: the HTTP status and why.
type StatusError struct {
	Code int
	Msg  string
}

func (e *StatusError) Error() string { return e.Msg }

// Options configure a Handler.
type Options struct {
	History *history.Service
	// Authorize checks a request (nil: everyone); a *StatusError says
	// how to refuse it, any other error is 503.
	Authorize func(*http.Request) error
	// MaxNodes and MaxEdges cap every graph (a request may ask fewer).
	MaxNodes, MaxEdges int
	// Assets is the page (nil: Page).
	Assets fs.FS
	Logger *slog.Logger
	// now is the clock (tests); nil: time.Now.
	now func() time.Time
}

// Handler serves the API and the page.
func Handler(o Options) http.Handler {
	if o.MaxNodes <= 0 {
		o.MaxNodes = servicemap.DefaultMaxNodes
	}
	if o.MaxEdges <= 0 {
		o.MaxEdges = servicemap.DefaultMaxEdges
	}
	if o.Assets == nil {
		o.Assets = Page
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.now == nil {
		o.now = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathGraph, o.graph)
	mux.HandleFunc("GET "+PathFlows, o.flows)
	mux.Handle("GET /", http.FileServerFS(o.Assets))
	return o.authorized(mux)
}

func (o *Options) authorized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")
		if o.Authorize != nil {
			if err := o.Authorize(r); err != nil {
				var se *StatusError
				if errors.As(err, &se) {
					if se.Code == http.StatusUnauthorized {
						w.Header().Set("WWW-Authenticate", `Bearer realm="flowlens-collector"`)
					}
					httpError(w, se.Code, se.Msg)
					return
				}
				httpError(w, http.StatusServiceUnavailable, err.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// snapshot parses the query and takes the history's flows.
func (o *Options) snapshot(w http.ResponseWriter, r *http.Request) (servicemap.Query, []*enriched.Flow, func(), bool) {
	q, err := servicemap.ParseQuery(r.URL.Query(), o.now(), o.MaxNodes, o.MaxEdges)
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return q, nil, nil, false
	}
	flows, release, err := o.History.Snapshot()
	if err != nil {
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusTooManyRequests, err.Error())
		return q, nil, nil, false
	}
	return q, flows, release, true
}

func (o *Options) graph(w http.ResponseWriter, r *http.Request) {
	q, flows, release, ok := o.snapshot(w, r)
	if !ok {
		return
	}
	g := servicemap.Build(flows, q)
	release()
	writeJSON(w, g)
}

func (o *Options) flows(w http.ResponseWriter, r *http.Request) {
	q, flows, release, ok := o.snapshot(w, r)
	if !ok {
		return
	}
	defer release()
	if q.Source == "" || q.Target == "" {
		httpError(w, http.StatusBadRequest, "source and target are required: the ids of the edge's nodes (GET "+PathGraph+")")
		return
	}
	sel, matched := servicemap.EdgeFlows(flows, q)
	out := servicemap.Flows{Source: q.Source, Target: q.Target, Flows: make([]json.RawMessage, 0, len(sel)), Matched: matched,
		Truncated: matched > len(sel), Window: servicemap.Window{Since: q.Since.UTC(), Until: q.Until.UTC()}}
	for _, f := range sel {
		out.Flows = append(out.Flows, f.AppendJSON(nil))
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return // the client went away
	}
}

// httpError answers {"error": msg} with code.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	fmt.Fprintf(w, "%s\n", b)
}
