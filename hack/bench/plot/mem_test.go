package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestMemSummaries: mem.json's light loads and mem-flood.json's flood
// beside it are summarised per workload and agent, the flood told apart
// from cycled UDP by its traffic line, the peak after the drain when
// there is one, the origins at that reading; and the plot is drawn.
func TestMemSummaries(t *testing.T) {
	const light = `[
	 {"Agent": "/x/base/flowlens-agent", "Workload": "tcp", "Round": 0, "Load": {"RSS": 20, "HWM": 25, "BinText": 8, "BinRO": 5, "BinData": 1, "Anon": 6, "BPFMaps": 0.5, "Other": 0.5}},
	 {"Agent": "/x/head/flowlens-agent", "Workload": "tcp", "Round": 0, "Load": {"RSS": 18, "HWM": 20, "BinText": 6, "BinRO": 4, "BinData": 1, "Anon": 6, "BPFMaps": 0.5, "Other": 0.5}},
	 {"Agent": "/x/base/flowlens-agent", "Workload": "tcp", "Round": 1, "Load": {"RSS": 20, "HWM": 27, "BinText": 8, "BinRO": 5, "BinData": 1, "Anon": 7, "BPFMaps": 0.5, "Other": 0.5}},
	 {"Agent": "/x/head/flowlens-agent", "Workload": "tcp", "Round": 1, "Load": {"RSS": 18, "HWM": 21, "BinText": 6, "BinRO": 4, "BinData": 1, "Anon": 8, "BPFMaps": 0.5, "Other": 0.5}},
	 {"Agent": "/x/base/flowlens-agent", "Workload": "tcp", "Round": 2, "Load": {"RSS": 20, "HWM": 26, "BinText": 9, "BinRO": 5, "BinData": 1, "Anon": 6, "BPFMaps": 1, "Other": 0.5}},
	 {"Agent": "/x/head/flowlens-agent", "Workload": "idle", "Round": 0, "Load": {"RSS": 17, "HWM": 19, "BinText": 6, "BinRO": 4, "BinData": 1, "Anon": 5}},
	 {"Agent": "/x/head/flowlens-agent", "Workload": "udp", "Round": 0, "Traffic": "1500000 frames (300000/s, 2 senders, 50000 flows cycled)", "Load": {"RSS": 30, "HWM": 32, "Anon": 20}}]`
	const flood = `[
	 {"Agent": "/x/head/flowlens-agent", "Workload": "udp", "Round": 0, "Traffic": "1500160 frames (300032/s, 2 senders, every frame a new flow)",
	  "Load": {"RSS": 26, "HWM": 26.8, "Anon": 12}, "Drained": {"RSS": 27, "HWM": 27.6, "BinText": 7, "BinRO": 4, "BinData": 0.4, "Anon": 12.6, "BPFMaps": 1}},
	 {"Agent": "/x/head/flowlens-agent", "Workload": "udp", "Round": 1, "Traffic": "1500160 frames (300032/s, 2 senders, every frame a new flow)",
	  "Load": {"RSS": 26, "HWM": 27.4, "Anon": 12}, "Drained": {"RSS": 27, "HWM": 28.1, "BinText": 7, "BinRO": 4, "BinData": 0.4, "Anon": 13.1, "BPFMaps": 1}}]`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mem.json"), []byte(light), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, memFloodFile), []byte(flood), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, err := readMemRuns(filepath.Join(dir, "mem.json"))
	if err != nil {
		t.Fatal(err)
	}
	sums := memSummaries(runs)
	type row struct{ w, a string }
	var got []row
	for _, s := range sums {
		got = append(got, row{s.Workload, s.Agent})
	}
	want := []row{{"idle", "/x/head/flowlens-agent"}, {"tcp", "/x/base/flowlens-agent"}, {"tcp", "/x/head/flowlens-agent"},
		{"udp", "/x/head/flowlens-agent"}, {"flood", "/x/head/flowlens-agent"}}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("rows %v, want %v", got, want)
		}
	}
	base, head, fl := sums[1], sums[2], sums[4]
	if base.Peak != (spread{26, 25, 27, 3}) || base.File != 14 || base.Anon != 6 || base.Rest != 1 {
		t.Errorf("tcp base: %+v", base)
	}
	if head.Peak != (spread{20.5, 20, 21, 2}) || head.File != 11 || head.Anon != 7 || head.Rest != 1 {
		t.Errorf("tcp head: %+v", head)
	}
	// The flood's peak is the drained reading's, not the load's.
	if fl.Peak != (spread{(27.6 + 28.1) / 2, 27.6, 28.1, 2}) || fl.Anon != (12.6+13.1)/2 || fl.Rest != 1 {
		t.Errorf("flood: %+v", fl)
	}
	if n := agentNames([]string{"/x/base/flowlens-agent", "/x/head/flowlens-agent"}); n["/x/base/flowlens-agent"] != "base" || n["/x/head/flowlens-agent"] != "head" {
		t.Errorf("agent names: %v", n)
	}
	if n := agentNames([]string{"bin/flowlens-agent", "bin/flowlens-agent+GOGC=50"}); n["bin/flowlens-agent"] != "flowlens-agent" || n["bin/flowlens-agent+GOGC=50"] != "flowlens-agent+GOGC=50" {
		t.Errorf("agent names: %v", n)
	}
	if err := plotMem(filepath.Join(dir, "mem.json"), dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, "bench-mem.png")); err != nil || st.Size() == 0 {
		t.Errorf("plot: %v", err)
	}
}

// TestMemNoData: a mem.json without runs (and no flood beside it) is
// errNoData, so bench-plots skips the plot instead of failing.
func TestMemNoData(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mem.json"), []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := plotMem(filepath.Join(dir, "mem.json"), dir); !errors.Is(err, errNoData) {
		t.Errorf("empty mem.json: %v, want errNoData", err)
	}
}
