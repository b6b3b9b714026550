package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestStartupSummaries: startup.json's runs (hack/bench/startup's field
// names) are summarised per agent in
// the order they first appear, medians with min..max, and the plot is
// drawn.
func TestStartupSummaries(t *testing.T) {
	const src = `[
	 {"agent": "/x/base/flowlens-agent", "round": 0, "wall_s": 0.164, "cpu_s": 0.15},
	 {"agent": "/x/head/flowlens-agent", "round": 0, "wall_s": 0.158, "cpu_s": 0.13},
	 {"agent": "/x/head/flowlens-agent", "round": 1, "wall_s": 0.146, "cpu_s": 0.14},
	 {"agent": "/x/base/flowlens-agent", "round": 1, "wall_s": 0.146, "cpu_s": 0.13},
	 {"agent": "/x/base/flowlens-agent", "round": 2, "wall_s": 0.154, "cpu_s": 0.14},
	 {"agent": "/x/head/flowlens-agent", "round": 2, "wall_s": 0.154, "cpu_s": 0.13}]`
	dir := t.TempDir()
	in := filepath.Join(dir, "startup.json")
	if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var runs []startupRun
	if err := json.Unmarshal([]byte(src), &runs); err != nil {
		t.Fatal(err)
	}
	sums := startupSummaries(runs)
	if len(sums) != 2 || sums[0].Agent != "/x/base/flowlens-agent" || sums[1].Agent != "/x/head/flowlens-agent" {
		t.Fatalf("summaries %+v, want base then head", sums)
	}
	if sums[0].Wall != (spread{0.154, 0.146, 0.164, 3}) || sums[0].CPU != (spread{0.14, 0.13, 0.15, 3}) {
		t.Errorf("base: %+v", sums[0])
	}
	if sums[1].Wall != (spread{0.154, 0.146, 0.158, 3}) || sums[1].CPU != (spread{0.13, 0.13, 0.14, 3}) {
		t.Errorf("head: %+v", sums[1])
	}
	if err := plotStartup(in, dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "bench-startup.png")); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

// TestStartupNoData: an empty startup.json is errNoData (the plot is
// skipped, bench-plots goes on).
func TestStartupNoData(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "startup.json")
	if err := os.WriteFile(in, []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := plotStartup(in, dir); !errors.Is(err, errNoData) {
		t.Errorf("empty startup.json: %v, want errNoData", err)
	}
}
