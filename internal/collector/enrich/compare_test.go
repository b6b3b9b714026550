package enrich_test

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// gatherAndCompare checks that the families of reg named in names (all of
// those in want when names is empty) are exactly want (text exposition
// format, any family order). It returns the difference as an error.
func gatherAndCompare(t *testing.T, reg prometheus.Gatherer, want io.Reader, names ...string) error {
	t.Helper()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	wantFams, err := tp.TextToMetricFamilies(want)
	if err != nil {
		t.Fatalf("parsing the expected metrics: %v", err)
	}
	if len(names) == 0 {
		for n := range wantFams {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var g, w bytes.Buffer
	for _, n := range names {
		if mf, ok := wantFams[n]; ok {
			// Re-encode after a round trip so both sides use one format.
			if _, err := expfmt.MetricFamilyToText(&w, mf); err != nil {
				t.Fatal(err)
			}
		}
		for _, mf := range got {
			if mf.GetName() == n {
				if _, err := expfmt.MetricFamilyToText(&g, mf); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if g.String() == w.String() {
		return nil
	}
	return &diffError{got: g.String(), want: w.String()}
}

type diffError struct{ got, want string }

func (d *diffError) Error() string {
	gl, wl := strings.Split(d.got, "\n"), strings.Split(d.want, "\n")
	var b strings.Builder
	b.WriteString("metrics differ (- want, + got):\n")
	for _, l := range wl {
		if !slices.Contains(gl, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range gl {
		if !slices.Contains(wl, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
