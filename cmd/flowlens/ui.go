package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/shared/cliconf"
	"github.com/flowlens/flowlens/internal/shared/servicemap"
	"github.com/flowlens/flowlens/internal/shared/textfmt"
	"github.com/flowlens/flowlens/pkg/tlsclient"
)

// defaultUIPort is the collector's service map port (--ui-listen) that the
// operator and the chart set (collectoropt.DefaultUIPort, which flowlens
// may not link: TestUIPortIsTheCollectors keeps them equal).
const defaultUIPort = 9402

// defaultUIListen is where flowlens ui serves the page.
const defaultUIListen = "127.0.0.1:9494"

// uiPort is the pod's container port named ui, or the default.
func uiPort(pod corev1.Pod) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "ui" {
				return int(p.ContainerPort)
			}
		}
	}
	return defaultUIPort
}

// observeRow is a copy of observe's row name, for ui's table: the same
// option, written once.
func observeRow(name string) *cliconf.Option[options] {
	for _, o := range observeFlags {
		if o.Name == name {
			c := *o
			return &c
		}
	}
	panic("no observe option " + name)
}

// uiSpec is flowlens ui's configuration (docs/ui.md).
var uiSpec = &cliconf.Spec[options]{
	Program: "flowlens ui",
	Summary: "Serves the service map of flowlens collectors on a local port and opens it in the browser: every collector " +
		"(--server, or every collector pod through a port-forward to its --ui-listen port) is asked, their graphs merged. See docs/ui.md.",
	EnvPrefix: "FLOWLENS_UI_",
	Options: slices.Concat(
		cliconf.InSection("Collectors", []*cliconf.Option[options]{
			setting(&cliconf.Option[options]{Name: "server", Arg: "host:port", Usage: "a collector's service map address (its --ui-listen; repeatable or comma list: several are merged); without it, every collector pod of the cluster through a port-forward to its port " + fmt.Sprint(defaultUIPort),
				Set: func(o *options, v string) error {
					for _, s := range cliconf.SplitList(v) {
						if err := cliconf.CheckListenAddress("--server", s); err != nil || strings.HasPrefix(s, ":") {
							return cliconf.ItemError(s, errors.New("must be host:port, such as 127.0.0.1:9402"))
						}
						o.servers = append(o.servers, s)
					}
					return nil
				}}),
			observeRow("kubeconfig"), observeRow("context"), observeRow("collector-namespace"),
		}, settings(collectorTLS.Options()), []*cliconf.Option[options]{observeRow("token"), observeRow("tls-server-name")}),
		cliconf.InSection("Page", []*cliconf.Option[options]{
			setting(&cliconf.Option[options]{Name: "listen", Arg: "host:port", Default: defaultUIListen, Usage: "local address serving the page (keep it on loopback: whoever reaches it reads the flows with your credentials)",
				Set: func(o *options, v string) error {
					if err := cliconf.CheckListenAddress("--listen", v); err != nil {
						return err
					}
					o.uiListen = v
					return nil
				}}),
			setting(&cliconf.Option[options]{Name: "no-browser", Arg: "bool", Default: "false", Bool: true, Usage: "print the page's URL instead of opening the browser",
				Set: func(o *options, v string) (err error) { o.noBrowser, err = parseBool(v); return err }}),
		})),
	Validate: func(o *options) error {
		return errors.Join(collectorTLS.Check(o), cliconf.CheckFile("--kubeconfig", o.kubeconfig))
	},
}

// ui runs flowlens ui until ctx ends.
func ui(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	o, code, done := loadOptions(uiSpec, "ui", args, env, stdout, stderr)
	if done {
		return code
	}
	p, err := newUIProxy(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "flowlens ui: %v\n", err)
		return 1
	}
	defer p.close()
	lis, err := net.Listen("tcp", o.uiListen)
	if err != nil {
		fmt.Fprintf(stderr, "flowlens ui: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	u := "http://" + lis.Addr().String() + "/"
	fmt.Fprintf(stdout, "flowlens ui: the service map of %d collector(s) at %s (Ctrl-C to stop)\n", len(p.servers), u)
	if !o.noBrowser {
		if err := openBrowser(u); err != nil {
			fmt.Fprintf(stderr, "flowlens ui: cannot open a browser (%v): open %s\n", err, u)
		}
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "flowlens ui: %v\n", err)
		return 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	return 0
}

// openBrowser opens u in the desktop's browser.
func openBrowser(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	return nil
}

// uiProxy answers the page's requests: the API by asking every collector
// and merging (servicemap.Merge), the page's files from the first one.
type uiProxy struct {
	servers []string
	names   map[string]string // server → pod, for messages
	scheme  string
	client  *http.Client
	token   string
	fwd     *forwards // nil with --server
	// caFromCluster: the TLS is the flowlens-ca ConfigMap's, found
	// through the kubeconfig, not asked for: a collector that serves its
	// map in plain HTTP on its loopback (a Kafka collector without
	// serveGRPC has no certificate) is then asked in HTTP, through the
	// port-forward's tunnel (plainHTTP remembers which).
	caFromCluster bool
	mu            sync.Mutex
	plainHTTP     map[string]bool
}

func (p *uiProxy) close() {
	if p.fwd != nil {
		p.fwd.close()
	}
}

// newUIProxy finds the collectors (--server, or the pods through
// port-forwards) and how to talk to them: HTTPS with --tls-ca or the
// flowlens-ca ConfigMap, else HTTP; the bearer token (--token, else the
// kubeconfig's) over TLS, or in plaintext only through a port-forward
// (the API server's tunnel to the pod's own loopback) or to a loopback
// --server.
func newUIProxy(ctx context.Context, o *options, stderr io.Writer) (*uiProxy, error) {
	p := &uiProxy{servers: o.servers, scheme: "http"}
	serverName := o.serverName
	var kube *rest.Config
	if len(p.servers) == 0 {
		fwd, err := forwardCollectors(ctx, o, uiPort, stderr)
		if err != nil {
			return nil, err
		}
		p.fwd, p.servers, p.names, kube = fwd, fwd.addrs, fwd.pods, fwd.kube
		if serverName == "" {
			serverName = "flowlens-collector." + o.namespace + ".svc"
		}
	}
	var tc *tls.Config
	switch {
	case o.tlsCA != "" || o.tlsCert != "":
		var err error
		if tc, err = tlsclient.Config(o.tlsCA, o.tlsCert, o.tlsKey, serverName); err != nil {
			p.close()
			return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
		}
	case kube != nil:
		pool, err := collectorCA(ctx, kube, o.namespace)
		if err != nil {
			p.close()
			return nil, err
		}
		if pool != nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
			p.caFromCluster, p.plainHTTP = true, map[string]bool{}
		}
	}
	tr := &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 4}
	if tc != nil {
		p.scheme = "https"
	}
	p.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	p.token = o.token
	if p.token == "" && kube != nil {
		var err error
		if p.token, err = kubeconfigToken(kube); err != nil {
			p.close()
			return nil, fmt.Errorf("the kubeconfig's credentials: %w", err)
		}
	}
	if p.token != "" && tc == nil && kube == nil {
		for _, s := range p.servers {
			if !cliconf.Loopback(s) {
				p.close()
				return nil, fmt.Errorf("--server %s: a token is sent only over TLS (--tls-ca) or to a loopback address", s)
			}
		}
	}
	return p, nil
}

func (p *uiProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		uiError(w, http.StatusMethodNotAllowed, "only GET")
		return
	}
	switch r.URL.Path {
	case "/api/v1/graph":
		p.graph(w, r)
	case "/api/v1/flows":
		p.flows(w, r)
	default:
		p.page(w, r)
	}
}

// ask GETs path?v of every collector at once; bodies in p.servers' order.
func (p *uiProxy) ask(ctx context.Context, path string, v url.Values) ([][]byte, error) {
	out := make([][]byte, len(p.servers))
	errs := make([]error, len(p.servers))
	var wg sync.WaitGroup
	for i, s := range p.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, err := p.get(ctx, s, path+"?"+v.Encode())
			switch {
			case err != nil:
				errs[i] = fmt.Errorf("%s: %w", p.name(s), err)
			case code != http.StatusOK:
				var e struct{ Error string }
				json.Unmarshal(body, &e)
				errs[i] = fmt.Errorf("%s: %d %s", p.name(s), code, textfmt.Safe(e.Error))
			default:
				out[i] = body
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (p *uiProxy) name(s string) string {
	if n, ok := p.names[s]; ok {
		return n
	}
	return "collector " + s
}

func (p *uiProxy) get(ctx context.Context, server, pathQuery string) (int, []byte, error) {
	scheme := p.scheme
	if p.caFromCluster {
		p.mu.Lock()
		if p.plainHTTP[server] {
			scheme = "http"
		}
		p.mu.Unlock()
	}
	code, body, err := p.getScheme(ctx, scheme, server, pathQuery)
	if err != nil && p.caFromCluster && scheme == "https" && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		p.mu.Lock()
		p.plainHTTP[server] = true
		p.mu.Unlock()
		return p.getScheme(ctx, "http", server, pathQuery)
	}
	return code, body, err
}

func (p *uiProxy) getScheme(ctx context.Context, scheme, server, pathQuery string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+server+pathQuery, nil)
	if err != nil {
		return 0, nil, err
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, body, err
}

// query parses the page's request with no caps of flowlens' own (each
// collector applies its own) and sends it on with absolute times, so that
// every collector answers for the same window.
func (p *uiProxy) query(w http.ResponseWriter, r *http.Request) (servicemap.Query, bool) {
	q, err := servicemap.ParseQuery(r.URL.Query(), time.Now(), 1<<30, 1<<30)
	if err != nil {
		uiError(w, http.StatusBadRequest, err.Error())
		return q, false
	}
	if !r.URL.Query().Has("max_nodes") {
		q.MaxNodes = servicemap.DefaultMaxNodes
	}
	if !r.URL.Query().Has("max_edges") {
		q.MaxEdges = servicemap.DefaultMaxEdges
	}
	return q, true
}

func (p *uiProxy) graph(w http.ResponseWriter, r *http.Request) {
	q, ok := p.query(w, r)
	if !ok {
		return
	}
	v := q.Values()
	if r.URL.Query().Has("max_nodes") {
		v.Set("max_nodes", fmt.Sprint(q.MaxNodes))
	}
	if r.URL.Query().Has("max_edges") {
		v.Set("max_edges", fmt.Sprint(q.MaxEdges))
	}
	bodies, err := p.ask(r.Context(), "/api/v1/graph", v)
	if err != nil {
		uiError(w, http.StatusBadGateway, err.Error())
		return
	}
	gs := make([]servicemap.Graph, len(bodies))
	for i, b := range bodies {
		if err := json.Unmarshal(b, &gs[i]); err != nil {
			uiError(w, http.StatusBadGateway, fmt.Sprintf("%s: %v", p.name(p.servers[i]), err))
			return
		}
	}
	uiJSON(w, servicemap.Merge(gs, q))
}

func (p *uiProxy) flows(w http.ResponseWriter, r *http.Request) {
	q, ok := p.query(w, r)
	if !ok {
		return
	}
	bodies, err := p.ask(r.Context(), "/api/v1/flows", q.Values())
	if err != nil {
		uiError(w, http.StatusBadGateway, err.Error())
		return
	}
	out := servicemap.Flows{Source: q.Source, Target: q.Target, Flows: []json.RawMessage{},
		Window: servicemap.Window{Since: q.Since.UTC(), Until: q.Until.UTC()}}
	type timed struct {
		end time.Time
		raw json.RawMessage
	}
	var all []timed
	for i, b := range bodies {
		var f servicemap.Flows
		if err := json.Unmarshal(b, &f); err != nil {
			uiError(w, http.StatusBadGateway, fmt.Sprintf("%s: %v", p.name(p.servers[i]), err))
			return
		}
		out.Matched += f.Matched
		for _, raw := range f.Flows {
			var e struct {
				EndTime time.Time `json:"end_time"`
			}
			json.Unmarshal(raw, &e)
			all = append(all, timed{e.EndTime, raw})
		}
	}
	slices.SortStableFunc(all, func(a, b timed) int { return b.end.Compare(a.end) })
	if len(all) > q.Last {
		all = all[:q.Last]
	}
	for _, t := range all {
		out.Flows = append(out.Flows, t.raw)
	}
	out.Truncated = out.Matched > len(out.Flows)
	uiJSON(w, out)
}

// page serves the page's files from the first collector that answers
// (every collector embeds the same page).
func (p *uiProxy) page(w http.ResponseWriter, r *http.Request) {
	var last error
	for _, s := range p.servers {
		code, body, err := p.get(r.Context(), s, r.URL.RequestURI())
		if err != nil {
			last = fmt.Errorf("%s: %w", p.name(s), err)
			continue
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", pageCSP)
		if code >= 400 && isDocument(r.URL.Path) {
			refused(w, code, p.name(s), body)
			return
		}
		if ct := contentType(r.URL.Path, body); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(code)
		w.Write(body)
		return
	}
	uiError(w, http.StatusBadGateway, last.Error())
}

// pageCSP is the collector's Content-Security-Policy for its page
// (internal/collector/ui), kept on the page flowlens ui serves.
const pageCSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:"

// isDocument says whether path is the page itself rather than one of its
// files.
func isDocument(path string) bool {
	return strings.HasSuffix(path, "/") || strings.HasSuffix(path, ".html")
}

// refused answers the browser's request for the page, which the collector
// refused (401: no or a bad token, 403: no read permission), with a page
// saying so in the collector's words, rather than its JSON: a person
// opening flowlens ui with the wrong credentials reads why, and no data.
func refused(w http.ResponseWriter, code int, collector string, body []byte) {
	var e struct{ Error string }
	msg := http.StatusText(code)
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintf(w, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>flowlens service map: refused</title><link rel="icon" href="data:,"></head>
<body><h1>The collector refused to show the service map</h1>
<p id="refusal">%s: %d %s</p>
<p>flowlens ui sends the token of your kubeconfig (or --token): its user needs get on flowcollectors/flows (the ClusterRole flowlens-flows-reader). See docs/ui.md.</p>
</body></html>
`, html.EscapeString(collector), code, html.EscapeString(textfmt.Safe(msg)))
}

// contentType is the type of a page file by its name, else sniffed.
func contentType(path string, body []byte) string {
	switch {
	case isDocument(path):
		return "text/html; charset=utf-8"
	case strings.HasSuffix(path, ".js"):
		return "text/javascript; charset=utf-8"
	case strings.HasSuffix(path, ".css"):
		return "text/css; charset=utf-8"
	case bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")):
		return "application/json"
	}
	return http.DetectContentType(body)
}

func uiJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func uiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Write(append(b, '\n'))
}
