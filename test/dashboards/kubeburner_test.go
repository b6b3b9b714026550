package dashboardslab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// kubeBurnerProfile is hack/kube-burner/metrics-profile.yml, the queries
// kube-burner runs against a cluster's Prometheus during its job.
const kubeBurnerProfile = "hack/kube-burner/metrics-profile.yml"

type kubeBurnerQuery struct {
	Query      string `yaml:"query"`
	MetricName string `yaml:"metricName"`
	Instant    bool   `yaml:"instant"`
}

// kubeBurnerFailures runs every query of the kube-burner metrics profile
// that this lab can answer against p and returns one line per query with no
// data. The lab has no kubelet, so the cAdvisor queries (container_*) are
// left out; its agent is scraped as job "flowlens-agent", which stands in
// for the profile's namespace="flowlens" selector; kube-burner's
// {{.elapsed}} becomes the traffic time so far.
func kubeBurnerFailures(ctx context.Context, p *prometheus, start, end time.Time) ([]string, int, error) {
	raw, err := os.ReadFile(filepath.Join(repoRoot, kubeBurnerProfile))
	if err != nil {
		return nil, 0, err
	}
	var qs []kubeBurnerQuery
	if err := yaml.Unmarshal(raw, &qs); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", kubeBurnerProfile, err)
	}
	elapsed := fmt.Sprintf("%ds", int(end.Sub(start).Seconds()))
	var failures []string
	run := 0
	for _, q := range qs {
		if strings.Contains(q.Query, "container_") {
			continue
		}
		expr := strings.ReplaceAll(q.Query, `namespace="flowlens"`, `job="flowlens-agent"`)
		expr = strings.ReplaceAll(expr, "{{.elapsed}}", elapsed)
		run++
		res, err := p.query(ctx, expr, start, end, 0)
		if err != nil {
			failures = append(failures, fmt.Sprintf("kube-burner %s: %v", q.MetricName, err))
			continue
		}
		points := 0
		for _, s := range res {
			points += s.finite()
		}
		if points == 0 {
			failures = append(failures, fmt.Sprintf("kube-burner %s: no data for %s", q.MetricName, expr))
		}
	}
	if run == 0 {
		return nil, 0, fmt.Errorf("%s: no query this lab can run", kubeBurnerProfile)
	}
	return failures, run, nil
}
