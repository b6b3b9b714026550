// Package promtest reads Prometheus metrics in tests: a stage's collectors
// gathered in a registry of their own, and one series' value by its exact
// labels, so that each stage's test asserts the values its collectors
// report without an HTTP server; Scrape reads a running binary's
// /metrics the same way.
package promtest

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is gathered metrics by family name.
type Families map[string]*dto.MetricFamily

// Gather registers cs in a new registry and gathers it.
func Gather(t testing.TB, cs ...prometheus.Collector) Families {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	return GatherFrom(t, reg)
}

// GatherFrom gathers g: a registry a program built.
func GatherFrom(t testing.TB, g prometheus.Gatherer) Families {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := Families{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// Scrape reads the Prometheus text endpoint at url (plain HTTP); a
// status other than 200 or text that does not parse fails the test.
func Scrape(t testing.TB, url string) Families {
	t.Helper()
	fams, err := scrape(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return fams
}

func scrape(url string) (Families, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	return Families(fams), err
}

// Value returns the value of the series of family name whose labels are
// exactly labels ("k=v" pairs, sorted); ok is false when there is none. A
// histogram's value is its sample count.
func Value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	want := strings.Join(labels, ",")
	for _, m := range f.Metric {
		var ls []string
		for _, l := range m.Label {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(ls)
		if strings.Join(ls, ",") != want {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// Expect fails t unless the series exists with the value want.
func Expect(t testing.TB, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := Value(fams, name, labels...)
	if !ok {
		t.Errorf("%s{%s}: missing", name, strings.Join(labels, ","))
		return
	}
	if got != want {
		t.Errorf("%s{%s} = %v, want %v", name, strings.Join(labels, ","), got, want)
	}
}

// Absent fails t when the series exists.
func Absent(t testing.TB, fams map[string]*dto.MetricFamily, name string, labels ...string) {
	t.Helper()
	if _, ok := Value(fams, name, labels...); ok {
		t.Errorf("%s{%s} reported, want none", name, strings.Join(labels, ","))
	}
}

// Sum is the sum of the series of family name whose labels include
// labels ("k=v" pairs), whatever their other labels: a label added to a
// family later (a reason) does not hide its series. ok is false when no
// series matches. A histogram counts its sample count.
func Sum(fams map[string]*dto.MetricFamily, name string, labels ...string) (sum float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
series:
	for _, m := range f.Metric {
		for _, want := range labels {
			k, v, _ := strings.Cut(want, "=")
			if !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
				continue series
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, ok
}
