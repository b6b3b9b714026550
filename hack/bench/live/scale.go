package main

// The scale runs (runScale) over several exports and rounds
// (-scale-exports, -scale-rounds), and their report: each run as it ends,
// then per export the medians over the rounds with their min..max, and
// each export's CPU per flow against the first export's of the same round.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// scaleExportList is -scale-exports, checked.
func (o options) scaleExportList() ([]string, error) {
	if o.scaleRounds < 1 {
		return nil, fmt.Errorf("-scale-rounds %d: want at least 1", o.scaleRounds)
	}
	if o.scaleExports == "" {
		return []string{o.export}, nil
	}
	var list []string
	for _, e := range strings.Split(o.scaleExports, ",") {
		switch e {
		case "grpc":
			if o.collBin == "" {
				return nil, fmt.Errorf("-scale-exports grpc needs -collector")
			}
		case "stdout":
		case "kafka-batch", "kafka-flow":
			if err := kafkaMissing(); err != nil {
				return nil, fmt.Errorf("-scale-exports %s: %w", e, err)
			}
		default:
			return nil, fmt.Errorf("-scale-exports %q: want a list of grpc, stdout, kafka-batch, kafka-flow", e)
		}
		if slices.Contains(list, e) {
			return nil, fmt.Errorf("-scale-exports %q: %s twice", o.scaleExports, e)
		}
		list = append(list, e)
	}
	return list, nil
}

// runScales runs -scale-rounds rounds of one scale run per export, the
// exports in turn, each round starting one further along the list, so a
// drift of the host's load spreads over all of them. The Kafka broker, if
// an export needs one, runs from the first round to the lab's end.
func (o options) runScales(l *lab) ([]scaleResult, error) {
	exports, err := o.scaleExportList()
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(exports, func(e string) bool { return kafkaMessage(e) != "" }) {
		fmt.Fprintln(os.Stderr, "starting the Kafka broker")
		if o.kafka, err = startKafka(); err != nil {
			return nil, err
		}
		l.atClose = append(l.atClose, o.kafka.close)
	}
	var all []scaleResult
	for round := 1; round <= o.scaleRounds; round++ {
		for i := range exports {
			so := o
			so.export = exports[(round-1+i)%len(exports)]
			sr, err := so.runScale(l)
			if err != nil {
				return all, fmt.Errorf("round %d, %s: %w", round, so.export, err)
			}
			sr.Export, sr.Round = so.export, round
			so.printScale(sr)
			all = append(all, sr)
		}
	}
	if len(all) > 1 {
		reportScales(exports, all)
	}
	return all, nil
}

// perfRecord starts perf record on the agent's pid (-scale-perf); it ends
// when the agent exits. perf report -i the file --children --sort sym
// shows each function's share of the agent's CPU, callees included.
func (o options) perfRecord(pid int) (*exec.Cmd, error) {
	file := filepath.Join(o.out, fmt.Sprintf("perf-%s-%d.data", o.export, pid))
	cmd := exec.Command("perf", "record", "-q", "-F", "999", "-g", "-p", strconv.Itoa(pid), "-o", file)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("-scale-perf: %w", err)
	}
	return cmd, nil
}

// printScale prints one scale run.
func (o options) printScale(sr scaleResult) {
	verdict := "EXACT"
	if !sr.Exact {
		verdict = "MISMATCH"
	}
	buf := "default"
	if o.exportBuffer > 0 {
		buf = strconv.Itoa(o.exportBuffer)
	}
	fmt.Println()
	fmt.Printf("Scale run (round %d, export %s): %d new UDP flows over %s (-scale-sink %s), --cache-max-flows %d, --export-buffer %s\n",
		sr.Round, sr.Export, sr.Flows, 2*o.period, sr.Sink, max(o.cacheFlows, o.scaleFlows*2), buf)
	fmt.Printf("  evictions %.0f (%.0f flows per eviction on average; the middle one holds about %d)\n", sr.Evictions, sr.PerEviction, o.scaleFlows)
	fmt.Printf("  flows delivered                     %8d  (dropped by the export queue: %.0f; overflow packets: %.0f)\n", sr.Records, sr.DroppedFlows, sr.Overflow)
	fmt.Printf("  agent's counters after the traffic  %8.0f flows exported (acked %.0f, failed %.0f; the rest, its shutdown flush's)\n",
		sr.AgentExported, sr.AgentAcked, sr.AgentFailed)
	if k := sr.Kafka; k != nil {
		fmt.Printf("  broker                              %8d records (agent: %.0f acked), consumed %d (%d malformed), %d flows\n",
			k.Records, sr.AgentRecords, k.Consumed, k.Malformed, k.Flows)
	}
	fmt.Printf("  agent CPU user+system               %8.3f s  (%.2f µs per delivered flow)\n", sr.AgentCPUS, sr.CPUPerFlowUS)
	fmt.Printf("  heap allocations                    %8.3f per exported flow (%.1f bytes)\n", sr.MallocsPerFlow, sr.AllocBytesPerFlow)
	fmt.Printf("  peak RSS (VmHWM)                    %8.1f MB  (GOMEMLIMIT %s)\n", sr.MaxRSSMB, map[bool]string{true: "unset", false: sr.GoMemLimit}[sr.GoMemLimit == ""])
	fmt.Printf("  exact count: delivered %d packets, interfaces %d: %s\n", sr.ExportedPkts, sr.IfacePkts, verdict)
}

// reportScales prints, per export, the medians over the rounds and their
// min..max, and the ratio of its CPU per flow to the first export's in the
// same round.
func reportScales(exports []string, all []scaleResult) {
	byRound := map[int]map[string]scaleResult{}
	for _, r := range all {
		if byRound[r.Round] == nil {
			byRound[r.Round] = map[string]scaleResult{}
		}
		byRound[r.Round][r.Export] = r
	}
	spread := func(v []float64, format string) string {
		return fmt.Sprintf(format+" ["+format+".."+format+"]", med(v), slices.Min(v), slices.Max(v))
	}
	fmt.Println()
	fmt.Printf("Scale runs, medians over %d rounds [min..max]; ratio: CPU per flow ÷ %s's in the same round\n", len(byRound), exports[0])
	fmt.Printf("%-12s %-24s %-24s %-24s %-24s %-26s %s\n", "export", "agent CPU µs/flow", "ratio", "peak RSS MB", "allocations/flow", "delivered flows", "exact runs, flows lost")
	for _, e := range exports {
		var cpu, ratio, rss, allocs, flows []float64
		exact, lost := 0, 0.0
		for _, rs := range byRound {
			r := rs[e]
			cpu, rss, flows = append(cpu, r.CPUPerFlowUS), append(rss, r.MaxRSSMB), append(flows, float64(r.Records))
			allocs = append(allocs, r.MallocsPerFlow)
			ratio = append(ratio, r.CPUPerFlowUS/rs[exports[0]].CPUPerFlowUS)
			if r.Exact {
				exact++
			}
			lost += r.AgentFailed + r.DroppedFlows
		}
		fmt.Printf("%-12s %-24s %-24s %-24s %-24s %-26s %d/%d, %.0f\n", e, spread(cpu, "%.2f"), spread(ratio, "%.2f"),
			spread(rss, "%.1f"), spread(allocs, "%.3f"), spread(flows, "%.0f"), exact, len(cpu), lost)
	}
}
