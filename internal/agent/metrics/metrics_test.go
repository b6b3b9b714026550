package metrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/metrics"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// scrape GETs /metrics from a running server and parses it.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

var (
	value  = promtest.Value
	expect = promtest.Expect
)

func serve(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv, err := m.Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return "http://" + srv.Addr().String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The registry serves the stages' collectors it is given, the build info
// and the Go runtime's metrics, with health and readiness.
func TestServes(t *testing.T) {
	ready := errors.New("attaching")
	dp := datapath.NewMetrics(metrics.Namespace, datapath.MetricSources{Attached: func() int { return 4 }}, nil)
	m, err := metrics.New(metrics.Options{Ready: func() error { return ready }}, dp.Collectors()...)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, m)

	f := scrape(t, base)
	expect(t, f, 4, "flowlens_agent_attached_interfaces")
	if _, ok := value(f, "go_goroutines"); !ok {
		t.Error("go runtime metrics missing")
	}
	if f["flowlens_agent_build_info"] == nil {
		t.Error("flowlens_agent_build_info missing")
	}

	// Health and readiness.
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "attaching") {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready = nil
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz when ready: %d", code)
	}
}

func TestReadyWhenClosed(t *testing.T) {
	ch := make(chan struct{})
	r := metrics.ReadyWhenClosed(ch)
	if r() == nil {
		t.Fatal("ready before the channel closed")
	}
	close(ch)
	if err := r(); err != nil {
		t.Fatal(err)
	}
}

func TestListenBusyAddressFails(t *testing.T) {
	m, err := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := m.Listen("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	if _, err := m.Listen(srv.Addr().String(), ""); err == nil {
		t.Fatal("second Listen on a busy address succeeded")
	}
}
