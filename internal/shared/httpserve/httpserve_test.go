package httpserve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	ready := make(chan struct{})
	srv, err := Listen("127.0.0.1:0", "", Handler(Options{Gatherer: reg, Ready: ReadyWhenClosed(ready, errors.New("starting"))}), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr().String()
	if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "test_things_total 3") {
		t.Errorf("/metrics: %d %s", code, body)
	}
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || body != "not ready: starting\n" {
		t.Errorf("/readyz before: %d %q", code, body)
	}
	close(ready)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz after: %d %q", code, body)
	}
	if code, _ := get(t, base+"/other"); code != 404 {
		t.Errorf("/other: %d", code)
	}
	// A busy address fails at Listen.
	if _, err := Listen(srv.Addr().String(), "", http.NotFoundHandler(), nil); err == nil {
		t.Error("listening twice on one address succeeded")
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("served after Shutdown")
	}
}
