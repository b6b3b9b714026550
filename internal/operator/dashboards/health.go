package dashboards

// agentSel selects the agents of the instance variable.
const agentSel = `{instance=~"$instance"}`

// agentRate is rate(metric{agentSel}[$__rate_interval]).
func agentRate(metric string) string { return "rate(" + metric + agentSel + "[$__rate_interval])" }

// Process metrics (process_*, go_*) carry no flowlens prefix: these keep the
// series of the targets that also expose a metric only the agent (or only
// the collector) has, whatever the scrape job is called.
const (
	ofAgents     = " and on (job, instance) flowlens_agent_flow_map_capacity" + agentSel
	ofCollectors = " and on (job, instance) " + receivedFlows
)

func agentHealth() spec {
	return spec{
		File: "flowlens-agent-health.json", UID: "flowlens-agent-health", Title: "flowlens / Agent health",
		Description: "The flowlens pipeline itself: the agents' in-kernel flow maps, evictions, overflow, export, the kernel-side cost of their BPF programs and their CPU and memory; the collector's intake.",
		Tags:        []string{"flowlens", "health"},
		Variables: []variable{
			{Name: "instance", Label: "Agent", Multi: true,
				Query:       "label_values(flowlens_agent_flow_map_capacity, instance)",
				Description: "Agents (scrape targets) to show."},
		},
		Rows: []row{
			{Title: "Overview", Panels: []panel{
				{Title: "Agents", Kind: statValue, Unit: "short", Width: 4, Height: 5,
					Description: "Agents scraped.",
					Queries:     []query{{Legend: "agents", Expr: "count(flowlens_agent_flow_map_capacity" + agentSel + ")"}}},
				{Title: "Attached interfaces", Kind: statValue, Unit: "short", Width: 4, Height: 5,
					Description: "Interfaces the agents' TC programs are attached to.",
					Queries:     []query{{Legend: "interfaces", Expr: "sum(flowlens_agent_attached_interfaces" + agentSel + ")"}}},
				{Title: "Hooks running", Kind: statValue, Unit: "percentunit", Width: 4, Height: 5,
					Description: "Share of the requested hooks (tc, drops, rtt, retransmits) that run; below 100 % a kernel refused one (see the agent's log).",
					Queries:     []query{{Legend: "running", Expr: "sum(flowlens_agent_hook_up" + agentSel + ") / count(flowlens_agent_hook_up" + agentSel + ")"}}},
				{Title: "Max flow map fill", Kind: statValue, Unit: "percentunit", Width: 4, Height: 5,
					Description: "Fullest active flow map of any agent; eviction starts early at 80 %.",
					Queries:     []query{{Legend: "fill", Expr: "max(flowlens_agent_flow_map_entries" + agentSel + " / flowlens_agent_flow_map_capacity" + agentSel + ")"}}},
				{Title: "Exported flows", Kind: statValue, Unit: "short", Width: 4, Height: 5,
					Description: "Flow records per second the agents export (all exporters).",
					Queries:     []query{{Legend: "flows/s", Expr: "sum(" + agentRate("flowlens_agent_export_flows_total") + ")"}}},
				{Title: "Kernel CPU of BPF programs", Kind: statValue, Unit: "short", Width: 4, Height: 5,
					Description: "CPU cores the agents' BPF programs use in the kernel, all agents together.",
					Queries:     []query{{Legend: "cores", Expr: "sum(" + agentRate("flowlens_agent_bpf_program_run_time_seconds_total") + ")"}}},
			}},
			{Title: "Flow map and evictions", Panels: []panel{
				{Title: "Evictions by reason", Kind: stacked, Unit: "short", Min: &zero,
					Description: "Evictions per second: timer (every --cache-active-timeout), pressure (new flows reached 80 % of the map), shutdown.",
					Queries:     []query{{Legend: "{{reason}}", Expr: "sum by (reason) (" + agentRate("flowlens_agent_evictions_total") + ")"}}},
				{Title: "Flow map fill", Kind: timeSeries, Unit: "percentunit", Min: &zero,
					Description: "Entries of each agent's active flow map over its capacity (--cache-max-flows).",
					Queries:     []query{{Legend: "{{instance}}", Expr: "flowlens_agent_flow_map_entries" + agentSel + " / flowlens_agent_flow_map_capacity" + agentSel}}},
				{Title: "Map overflow", Kind: timeSeries, Unit: "pps", Min: &zero,
					Description: "Packets per second that found the flow map full: sent as single-packet records through the ring buffer, or lost when it was full too. Non-zero: raise --cache-max-flows or shorten --cache-active-timeout.",
					Queries: []query{
						{Legend: "{{instance}} to ring buffer", Expr: "sum by (instance) (" + agentRate("flowlens_agent_overflow_records_total") + ")"},
						{Legend: "{{instance}} lost", Expr: "sum by (instance) (" + agentRate("flowlens_agent_overflow_lost_total") + ")"},
					}},
				{Title: "Eviction duration p99", Kind: timeSeries, Unit: "s", Min: &zero,
					Description: "99th percentile of one eviction's duration (flip, RCU grace period, read, convert, hand to the exporters), by reason.",
					Queries: []query{{Legend: "{{reason}}",
						Expr: "histogram_quantile(0.99, sum by (le, reason) (" + agentRate("flowlens_agent_eviction_duration_seconds_bucket") + "))"}}},
				{Title: "Evicted flows by source", Kind: stacked, Unit: "short", Min: &zero, Width: 24, Height: 7,
					Description: "Flow records per second produced by evictions: from the flow map, aggregated from overflow records, and enrichment-only (partial) records.",
					Queries:     []query{{Legend: "{{source}}", Expr: "sum by (source) (" + agentRate("flowlens_agent_evicted_flows_total") + ")"}}},
			}},
			{Title: "Export", Panels: []panel{
				{Title: "Exported flows by exporter", Kind: timeSeries, Unit: "short", Min: &zero, Width: 8,
					Description: "Flow records per second handed to each exporter.",
					Queries:     []query{{Legend: "{{exporter}}", Expr: "sum by (exporter) (" + agentRate("flowlens_agent_export_flows_total") + ")"}}},
				{Title: "Export errors and dropped flows", Kind: timeSeries, Unit: "short", Min: &zero, Width: 8,
					Description: "Failed export calls per second (their batch is lost), and flows per second dropped because an exporter's queue was full.",
					Queries: []query{
						{Legend: "{{exporter}} errors", Expr: "sum by (exporter) (" + agentRate("flowlens_agent_export_errors_total") + ")"},
						{Legend: "{{exporter}} dropped flows", Expr: "sum by (exporter) (" + agentRate("flowlens_agent_export_dropped_flows_total") + ")"},
					}},
				{Title: "Export queue", Kind: timeSeries, Unit: "short", Min: &zero, Width: 8,
					Description: "Batches waiting in each exporter's queue (at most --export-buffer).",
					Queries:     []query{{Legend: "{{exporter}}", Expr: "sum by (exporter) (flowlens_agent_export_queue_batches" + agentSel + ")"}}},
			}},
			{Title: "Kernel cost of the agent's BPF programs", Panels: []panel{
				{Title: "Kernel ns per packet, per program", Kind: timeSeries, Unit: "ns", Min: &zero,
					Description: "Average time one run of each program takes in the kernel (run time over run count, from the kernel's BPF statistics). For the TC programs one run is one packet. A program that did not run in the interval (the _l3 pair where no tun, WireGuard or IP tunnel device exists) draws no line.",
					Queries: []query{{Legend: "{{program}} ({{attach}})",
						Expr: "1e9 * sum by (program, attach) (" + agentRate("flowlens_agent_bpf_program_run_time_seconds_total") + ") / (sum by (program, attach) (" + agentRate("flowlens_agent_bpf_program_runs_total") + ") > 0)"}}},
				{Title: "Program runs", Kind: timeSeries, Unit: "short", Min: &zero,
					Description: "Runs per second of each program: packets for the TC programs, events for the drop, RTT and retransmit hooks.",
					Queries:     []query{{Legend: "{{program}} ({{attach}})", Expr: "sum by (program, attach) (" + agentRate("flowlens_agent_bpf_program_runs_total") + ")"}}},
				{Title: "Kernel CPU by program", Kind: stacked, Unit: "short", Min: &zero,
					Description: "CPU cores each program uses in the kernel (run time per second).",
					Queries:     []query{{Legend: "{{program}}", Expr: "sum by (program) (" + agentRate("flowlens_agent_bpf_program_run_time_seconds_total") + ")"}}},
				{Title: "BPF map memory", Kind: stacked, Unit: "bytes", Min: &zero,
					Description: "Kernel memory of each of the agents' BPF maps.",
					Queries:     []query{{Legend: "{{map}}", Expr: "sum by (map) (flowlens_agent_bpf_map_memory_bytes" + agentSel + ")"}}},
			}},
			{Title: "Agent process", Panels: []panel{
				{Title: "Agent CPU", Kind: timeSeries, Unit: "short", Min: &zero,
					Description: "CPU cores each agent process uses in user space and system calls (the BPF programs' kernel time is above).",
					Queries:     []query{{Legend: "{{instance}}", Expr: "rate(process_cpu_seconds_total[$__rate_interval])" + ofAgents}}},
				{Title: "Agent memory", Kind: timeSeries, Unit: "bytes", Min: &zero,
					Description: "Resident memory of each agent process, and its Go heap in use.",
					Queries: []query{
						{Legend: "{{instance}} resident", Expr: "process_resident_memory_bytes" + ofAgents},
						{Legend: "{{instance}} Go heap", Expr: "go_memstats_heap_inuse_bytes" + ofAgents},
					}},
			}},
			{Title: "Collector", Panels: []panel{
				{Title: "Flows received", Kind: timeSeries, Unit: "short", Min: &zero, Width: 6,
					Description: "Flow records per second each collector receives from the agents.",
					Queries:     []query{{Legend: "{{instance}}", Expr: "sum by (instance) (rate(" + receivedFlows + "[$__rate_interval]))"}}},
				{Title: "Decode errors and enrichment misses", Kind: timeSeries, Unit: "short", Min: &zero, Width: 6,
					Description: "Messages per second the collector could not decode, and flow endpoints per second it could not resolve to Kubernetes objects (by side; they are labelled external).",
					Queries: []query{
						{Legend: "decode errors", Expr: "sum(rate(" + decodeErrors + "[$__rate_interval]))"},
						{Legend: "enrichment misses ({{side}})", Expr: "sum by (side) (rate(" + enrichMisses + "[$__rate_interval]))"},
					}},
				{Title: "Collector CPU", Kind: timeSeries, Unit: "short", Min: &zero, Width: 6,
					Description: "CPU cores each collector process uses.",
					Queries:     []query{{Legend: "{{instance}}", Expr: "rate(process_cpu_seconds_total[$__rate_interval])" + ofCollectors}}},
				{Title: "Collector memory", Kind: timeSeries, Unit: "bytes", Min: &zero, Width: 6,
					Description: "Resident memory of each collector process: with enrichment on it holds the stripped-down informer caches, so it grows with the cluster's pods, not with traffic.",
					Queries:     []query{{Legend: "{{instance}}", Expr: "process_resident_memory_bytes" + ofCollectors}}},
			}},
		},
	}
}
