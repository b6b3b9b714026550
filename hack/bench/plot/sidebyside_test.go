package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSideBySideSummaries: a file without summaries (runs only) is
// summarised per harness and workload, the two agents paired by round,
// and the plot of both harnesses is drawn.
func TestSideBySideSummaries(t *testing.T) {
	const src = `{"machine": "test", "options": {"workloads": ["tcp"]}, "runs": [
	 {"harness": "fixed", "workload": "tcp", "round": 1, "agent": "flowlens", "tc_ns_per_packet": 270},
	 {"harness": "fixed", "workload": "tcp", "round": 1, "agent": "netobserv", "tc_ns_per_packet": 540},
	 {"harness": "fixed", "workload": "tcp", "round": 2, "agent": "flowlens", "tc_ns_per_packet": 280},
	 {"harness": "fixed", "workload": "tcp", "round": 2, "agent": "netobserv", "tc_ns_per_packet": 500},
	 {"harness": "saturating", "workload": "tcp", "round": 1, "agent": "none", "tc_ns_per_packet": 0},
	 {"harness": "saturating", "workload": "tcp", "round": 1, "agent": "flowlens", "tc_ns_per_packet": 300},
	 {"harness": "saturating", "workload": "tcp", "round": 1, "agent": "netobserv", "tc_ns_per_packet": 400}]}`
	var res sbsResults
	if err := json.Unmarshal([]byte(src), &res); err != nil {
		t.Fatal(err)
	}
	sums := res.summaries()
	if len(sums) != 2 {
		t.Fatalf("%d summaries, want 2 (fixed and saturating tcp): %+v", len(sums), sums)
	}
	fixed, sat := sums[0], sums[1]
	if fixed.Harness != "fixed" || fixed.FlowlensNs != (spread{275, 270, 280, 2}) || fixed.PeerNs != (spread{520, 500, 540, 2}) ||
		fixed.Ratio != (spread{(0.5 + 0.56) / 2, 0.5, 0.56, 2}) {
		t.Errorf("fixed: %+v", fixed)
	}
	if sat.Harness != "saturating" || sat.Ratio != (spread{0.75, 0.75, 0.75, 1}) {
		t.Errorf("saturating: %+v", sat)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "in.json"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := plotSideBySide(filepath.Join(dir, "in.json"), dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "bench-live-sidebyside.png")); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}
