package dashboardslab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
)

// findPrometheus returns the prometheus binary: $FLOWLENS_PROMETHEUS, then
// PATH, then Debian's /usr/bin/prometheus. Missing, the test skips with the
// way to install it, unless CI is set: CI must run it (internal/testkit's
// gate, which also skips it in short mode).
func findPrometheus(t *testing.T) string {
	t.Helper()
	p, missing := lookPrometheus()
	testkit.Need(t, "prometheus", missing)
	return p
}

func lookPrometheus() (string, error) {
	if p := os.Getenv("FLOWLENS_PROMETHEUS"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/prometheus"); err == nil {
		return "/usr/bin/prometheus", nil
	}
	return "", errors.New("not found (Debian's prometheus package): run `make deps-prometheus` (hack/dashboards/install-deps.sh prometheus)")
}

// prometheus is a Prometheus server started by the test.
type prometheus struct {
	URL string
	cmd *exec.Cmd
	log *testkit.SyncBuffer
}

// startPrometheus runs Prometheus on a free loopback port with its storage
// in a temporary directory, scraping each job's targets every second. It is
// killed when the test ends.
func startPrometheus(t *testing.T, bin string, jobs map[string]string) *prometheus {
	t.Helper()
	var cfg strings.Builder
	for job, target := range jobs {
		fmt.Fprintf(&cfg, "  - job_name: %s\n    static_configs:\n      - targets: [%q]\n", job, target)
	}
	return startPrometheusWith(t, bin, cfg.String())
}

// startPrometheusWith is startPrometheus with the scrape_configs list
// given as YAML (its items, indented by two spaces).
func startPrometheusWith(t *testing.T, bin, scrapeConfigs string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\nscrape_configs:\n" + scrapeConfigs
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testkit.FreeAddr(t)
	p := &prometheus{URL: "http://" + addr, log: &testkit.SyncBuffer{}}
	p.cmd = exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--storage.tsdb.retention.time=1h",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20s: %v\n%s", err, p.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// series is one series of a query result.
type series struct {
	Labels map[string]string `json:"labels"`
	Points [][2]float64      `json:"points"` // [unix seconds, value]
}

// finite is how many of the series' points are numbers (not NaN or ±Inf).
func (s series) finite() int {
	n := 0
	for _, p := range s.Points {
		if !math.IsNaN(p[1]) && !math.IsInf(p[1], 0) {
			n++
		}
	}
	return n
}

// api calls a Prometheus HTTP API endpoint and decodes its data.
func (p *prometheus) api(ctx context.Context, path string, params url.Values, data any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", p.URL+path+"?"+params.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("%s: HTTP %d: %.200s", path, resp.StatusCode, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, data)
}

// query runs an instant query at ts, or a range query from start to ts
// with step when step > 0, and returns the series.
func (p *prometheus) query(ctx context.Context, expr string, start, ts time.Time, step time.Duration) ([]series, error) {
	params := url.Values{"query": {expr}}
	path := "/api/v1/query"
	if step > 0 {
		path = "/api/v1/query_range"
		params.Set("start", unix(start))
		params.Set("end", unix(ts))
		params.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	} else {
		params.Set("time", unix(ts))
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.api(ctx, path, params, &data); err != nil {
		return nil, err
	}
	var out []series
	switch data.ResultType {
	case "matrix", "vector":
		var rs []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
			Values [][]any           `json:"values"`
		}
		if err := json.Unmarshal(data.Result, &rs); err != nil {
			return nil, err
		}
		for _, r := range rs {
			s := series{Labels: r.Metric}
			if r.Value != nil {
				r.Values = append(r.Values, r.Value)
			}
			for _, v := range r.Values {
				pt, err := point(v)
				if err != nil {
					return nil, err
				}
				s.Points = append(s.Points, pt)
			}
			out = append(out, s)
		}
	case "scalar":
		var v []any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			return nil, err
		}
		pt, err := point(v)
		if err != nil {
			return nil, err
		}
		out = append(out, series{Labels: map[string]string{}, Points: [][2]float64{pt}})
	default:
		return nil, fmt.Errorf("result type %q", data.ResultType)
	}
	return out, nil
}

// labelValues is what Grafana's label_values(metric, label) asks for.
func (p *prometheus) labelValues(ctx context.Context, metric, label string, start, end time.Time) ([]string, error) {
	var vals []string
	err := p.api(ctx, "/api/v1/label/"+label+"/values", url.Values{"match[]": {metric}, "start": {unix(start)}, "end": {unix(end)}}, &vals)
	return vals, err
}

func point(v []any) ([2]float64, error) {
	if len(v) != 2 {
		return [2]float64{}, fmt.Errorf("bad sample %v", v)
	}
	ts, ok1 := v[0].(float64)
	s, ok2 := v[1].(string)
	if !ok1 || !ok2 {
		return [2]float64{}, fmt.Errorf("bad sample %v", v)
	}
	f, err := strconv.ParseFloat(s, 64)
	return [2]float64{ts, f}, err
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

func httpGet(u string) (string, error) {
	resp, err := http.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("%s: %s", u, resp.Status)
	}
	return string(b), err
}
