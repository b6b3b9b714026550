package datapath

import (
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// The datapath's Prometheus metrics (registered by internal/agent beside
// the evictor's and the exporters'): its per-CPU counters, flow map fill,
// hooks, filter rule counts, and the kernel's BPF program and map info,
// all read at scrape time. They take their sources as plain funcs, so they
// are testable without a kernel; MetricPrograms, MetricHooks and
// MetricMaps adapt a real Datapath.

// MetricSources are where the datapath's metrics are read from at scrape
// time. Every field is optional: a nil one leaves its metrics out.
type MetricSources struct {
	// Counters reads the datapath's counters (Datapath.ReadCounters).
	Counters func() (Counters, error)
	// FlowMapCapacity is the entries of one flow map (--cache-max-flows).
	FlowMapCapacity uint64
	// FlowMapEntries returns the active flow map's entries. When nil they
	// are the flows created since the last eviction (the new-flows counter
	// minus its value at the last ObserveEviction: then make *Metrics the
	// evictor's Observer), the fill the evictor's pressure check uses.
	FlowMapEntries func() (uint64, error)
	// Attached returns how many interfaces are attached (Datapath.Attached).
	Attached func() int
	// Hooks returns, per hook name, whether it runs (true) or is
	// unavailable (false): e.g. {"tc": true, "drops": false}.
	Hooks func() map[string]bool
	// Programs lists the agent's BPF programs (MetricPrograms).
	Programs func() []Program
	// Maps lists the agent's BPF maps (MetricMaps).
	Maps func() []Map
	// BPFStatsEnabled reports whether the kernel collects program run
	// time statistics (EnableBPFStats succeeded).
	BPFStatsEnabled func() bool
	// EnrichmentLost reads the enrichment events lost because their entry
	// could not be inserted (Datapath.ReadEnrichmentLost).
	EnrichmentLost func() (uint64, error)
	// EnrichmentUnwatched reads the socket-side hooks' events of flows no
	// watched interface carried (Datapath.ReadEnrichmentUnwatched).
	EnrichmentUnwatched func() (uint64, error)
	// FilterRules reads the packets each flow filter rule matched (nil:
	// no rules).
	FilterRules func() ([]RuleCount, error)
}

// RuleCount is the packets one flow filter rule (or the default action)
// matched.
type RuleCount struct {
	Rule    string // its name, else its index in the list; "default" for the default action
	Action  string // accept or reject
	Packets uint64
}

// ProgramStatter is what the metrics need of a BPF program; *ebpf.Program
// implements it. Implementations must be comparable (pointers): the value
// identifies one program instance across scrapes.
type ProgramStatter interface {
	Stats() (*ebpf.ProgramStats, error)
}

// Program is one loaded BPF program instance. Instances with the same Name
// and Attach (the per-namespace copies of one program) are summed into one
// series, so the labels' cardinality is that of the agent's program set.
type Program struct {
	Name   string // e.g. "flowlens_ingress"
	Attach string // attach point, e.g. "tc_ingress"
	Prog   ProgramStatter
}

// Map is one BPF map.
type Map struct {
	Name string
	// Memory returns the map's memory in bytes (memlock).
	Memory func() (uint64, error)
}

// MapMemory reads a map's memlock from the kernel (map info / fdinfo).
func MapMemory(m *ebpf.Map) func() (uint64, error) {
	return func() (uint64, error) {
		info, err := m.Info()
		if err != nil {
			return 0, err
		}
		// Zero is a reading, not a gap: an LPM trie's memlock counts its
		// entries, so an empty filter_addr reports 0 (cilium/ebpf's "ok"
		// is only memlock > 0). Every kernel the agent loads on reports
		// memlock in fdinfo (since 4.10).
		v, _ := info.Memlock()
		return v, nil
	}
}

// MetricPrograms lists the agent's BPF programs from the datapath's
// program table (Programs): the TC programs (one set for every
// namespace, or one per namespace in the datapath's fallback),
// "flowlens_ingress" on "tc_ingress" and
// "flowlens_egress" on "tc_egress", and each running hook by program name
// with its section as the attach point (e.g. "rtt_fentry" on
// "fentry/tcp_rcv_established").
func MetricPrograms(dp interface {
	Programs() []LoadedProgram
}) func() []Program {
	return func() []Program {
		loaded := dp.Programs()
		out := make([]Program, 0, len(loaded))
		for _, p := range loaded {
			if p.Prog != nil {
				out = append(out, Program{Name: p.Name, Attach: p.Attach, Prog: p.Prog})
			}
		}
		return out
	}
}

// MetricHooks reports the hooks' status: "tc" (the flow programs, running
// once the datapath is loaded) and each enrichment hook the agent started
// (HookStatus: "drops", "rtt", "retransmits").
func MetricHooks(dp interface{ Hooks() []HookStatus }) func() map[string]bool {
	return func() map[string]bool {
		out := map[string]bool{"tc": true}
		for _, h := range dp.Hooks() {
			out[h.Name] = h.Running
		}
		return out
	}
}

// MetricMaps lists the datapath's maps by their BPF names (its map table).
func MetricMaps(m *Maps) func() []Map {
	var out []Map
	for _, e := range m.All() {
		out = append(out, Map{Name: e.Name, Memory: MapMemory(e.Map)})
	}
	return func() []Map { return out }
}

// EnableBPFStats makes the kernel collect run time and run count of every
// BPF program (BPF_ENABLE_STATS with BPF_STATS_RUN_TIME) until the returned
// Closer is closed: hold it for the agent's lifetime. Unlike the
// kernel.bpf_stats_enabled sysctl, the collection stops by itself when the
// agent exits. Collection costs two clock reads per program run.
func EnableBPFStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}

// Metrics is the datapath's Prometheus metrics, read at scrape time from
// src.
type Metrics struct {
	log *slog.Logger
	src MetricSources
	col *metricsCollector

	// newFlowsAtEviction is CNT_NEW_FLOWS after the last eviction.
	newFlowsAtEviction atomic.Uint64
}

// NewMetrics is the metrics over src, named <namespace>_*
// (docs/metrics-agent.md); a source that cannot be read leaves its metrics
// out, is counted in <namespace>_metrics_read_errors_total and logged on
// log at most once a minute.
func NewMetrics(namespace string, src MetricSources, log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.Default()
	}
	m := &Metrics{log: log, src: src}
	m.col = newMetricsCollector(namespace, m)
	return m
}

// Collectors are the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector { return []prometheus.Collector{m.col} }

// ObserveEviction notes where the new-flows counter stood at an eviction,
// for flow_map_entries without MetricSources.FlowMapEntries: *Metrics is then an
// evictor.Observer (the eviction's own metrics are evictor.Metrics').
func (m *Metrics) ObserveEviction(string, int, time.Duration) {
	if m.src.Counters != nil && m.src.FlowMapEntries == nil {
		if c, err := m.src.Counters(); err == nil {
			m.newFlowsAtEviction.Store(c[CounterNewFlows])
		}
	}
}

// metricsCollector reads the datapath's metrics at scrape time.
type metricsCollector struct {
	m *Metrics

	mapEntries, mapCapacity                     *prometheus.Desc
	flowsCreated, overflowRecords, overflowLost *prometheus.Desc
	ifacesOverflow, nonIP, malformed            *prometheus.Desc
	fragUnmatched                               *prometheus.Desc
	filterRejected, sampledOut, samplingSplit   *prometheus.Desc
	filterRule                                  *prometheus.Desc
	attached, hookUp, enrichLost                *prometheus.Desc
	enrichUnwatched                             *prometheus.Desc
	progRunTime, progRuns, progMisses, progInst *prometheus.Desc
	mapMemory, statsEnabled, readErrors         *prometheus.Desc

	mu        sync.Mutex
	progs     map[ProgramStatter]progSample // last reading per live instance
	retired   map[progLabels]progSample     // totals of instances gone
	readErrs  map[string]uint64             // per source
	lastWarnd map[string]time.Time
}

type progLabels struct{ name, attach string }

type progSample struct {
	labels       progLabels
	runtime      time.Duration
	runs, misses uint64
}

func (s *progSample) add(o progSample) {
	s.runtime += o.runtime
	s.runs += o.runs
	s.misses += o.misses
}

func newMetricsCollector(namespace string, m *Metrics) *metricsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	return &metricsCollector{
		m:               m,
		mapEntries:      d("flow_map_entries", "Flows in the active in-kernel flow map."),
		mapCapacity:     d("flow_map_capacity", "Capacity of the in-kernel flow map (--cache-max-flows)."),
		flowsCreated:    d("flows_created_total", "Flow entries created in the in-kernel flow maps."),
		overflowRecords: d("overflow_records_total", "Packets sent to the overflow ring buffer because the flow map was full."),
		overflowLost:    d("overflow_lost_total", "Packets lost because the flow map and the overflow ring buffer were both full."),
		ifacesOverflow:  d("interfaces_overflow_flows_total", "Flows that crossed more interfaces than the kernel records (six); the extra ones are not listed."),
		filterRejected:  d("filter_rejected_packets_total", "Packets a flow filter rule, or the default action, rejected (not accounted), once per hook that saw them."),
		sampledOut:      d("sampled_out_packets_total", "Packets the flow filter accepted that their rule's sampling rate left out, once per hook."),
		samplingSplit:   d("sampling_split_packets_total", "Packets counted under another sampling rate than their flow's (a rule on TCP flags with its own rate): exported in a record of their own, with their rate."),
		filterRule:      d("filter_rule_packets_total", "Packets each flow filter rule matched (rule: its name, else its index; default: no rule matched), with the rule's action, once per hook that saw them.", "rule", "action"),
		fragUnmatched:   d("frag_unmatched_packets_total", "Sightings of IP fragments whose first fragment (with the ports) was not seen, once per hook that saw one; counted in their flow under port 0."),
		nonIP:           d("non_ip_packets_total", "Frames that are not IPv4 or IPv6 (ignored)."),
		malformed:       d("malformed_packets_total", "Packets in no flow because their addresses could not be read, by reason: truncated (the Ethernet, VLAN or fixed IP header), invalid (IP version, IPv4 IHL < 5). Packets whose later headers are unreadable are counted in flows (l4_unread, ext_unread).", "reason"),
		enrichUnwatched: d("enrichment_unwatched_total", "Events of the socket-side hooks (drops, RTT samples, retransmits) not recorded because no watched interface carried their flow (--enrich-unwatched records them)."),
		attached:        d("attached_interfaces", "Interfaces the datapath is attached to."),
		hookUp:          d("hook_up", "1 if the hook is running, 0 if it is unavailable.", "hook"),
		enrichLost:      d("enrichment_lost_total", "Enrichment events (drops, RTT samples, retransmits) lost because their entry could not be inserted into the enrichment map (full, or the kernel's allocator failed)."),
		progRunTime:     d("bpf_program_run_time_seconds_total", "Cumulative run time of the agent's BPF program in the kernel (run_time_ns), summed over its instances.", "program", "attach"),
		progRuns:        d("bpf_program_runs_total", "Times the agent's BPF program ran (run_cnt), summed over its instances.", "program", "attach"),
		progMisses:      d("bpf_program_recursion_misses_total", "Times the kernel skipped the program because of recursion.", "program", "attach"),
		progInst:        d("bpf_program_instances", "Loaded instances of the program (one per network namespace where the kernel needs it).", "program", "attach"),
		mapMemory:       d("bpf_map_memory_bytes", "Memory of the agent's BPF map (memlock).", "map"),
		statsEnabled:    d("bpf_stats_enabled", "1 if the kernel collects BPF program run time statistics (BPF_ENABLE_STATS held by the agent)."),
		readErrors:      d("metrics_read_errors_total", "Scrapes whose reading of a source failed (its metrics were left out), by source.", "source"),
		progs:           map[ProgramStatter]progSample{},
		retired:         map[progLabels]progSample{},
		readErrs:        map[string]uint64{},
		lastWarnd:       map[string]time.Time{},
	}
}

func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.mapEntries, c.mapCapacity,
		c.flowsCreated, c.overflowRecords, c.overflowLost, c.ifacesOverflow, c.nonIP, c.malformed, c.fragUnmatched,
		c.attached, c.hookUp, c.enrichLost, c.enrichUnwatched, c.progRunTime, c.progRuns, c.progMisses,
		c.progInst, c.mapMemory, c.statsEnabled, c.readErrors} {
		ch <- d
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// readError counts a failed source read (the metric) and logs it at most
// once a minute per source. Called with c.mu held.
func (c *metricsCollector) readError(source string, err error) {
	c.readErrs[source]++
	if time.Since(c.lastWarnd[source]) > time.Minute {
		c.lastWarnd[source] = time.Now()
		c.m.log.Warn("metrics: cannot read source", "source", source, "error", err)
	}
}

func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src := &c.m.src

	if src.Counters != nil {
		if cnt, err := src.Counters(); err != nil {
			c.readError("datapath_counters", err)
		} else {
			counter(ch, c.flowsCreated, cnt[CounterNewFlows])
			counter(ch, c.overflowRecords, cnt[CounterOverflowRecords])
			counter(ch, c.overflowLost, cnt[CounterOverflowLost])
			counter(ch, c.ifacesOverflow, cnt[CounterIfacesOverflow])
			counter(ch, c.nonIP, cnt[CounterNonIP])
			counter(ch, c.malformed, cnt[CounterTruncated], "truncated")
			counter(ch, c.malformed, cnt[CounterMalformed], "invalid")
			counter(ch, c.fragUnmatched, cnt[CounterFragUnmatched])
			counter(ch, c.filterRejected, cnt[CounterFilterRejected])
			counter(ch, c.sampledOut, cnt[CounterSampledOut])
			counter(ch, c.samplingSplit, cnt[CounterSamplingSplit])
			if src.FlowMapEntries == nil {
				created := cnt[CounterNewFlows]
				base := c.m.newFlowsAtEviction.Load()
				entries := uint64(0)
				if created > base {
					entries = created - base
				}
				if src.FlowMapCapacity > 0 {
					entries = min(entries, src.FlowMapCapacity)
				}
				gauge(ch, c.mapEntries, float64(entries))
			}
		}
	}
	if src.FlowMapEntries != nil {
		if n, err := src.FlowMapEntries(); err != nil {
			c.readError("flow_map_entries", err)
		} else {
			gauge(ch, c.mapEntries, float64(n))
		}
	}
	if src.FlowMapCapacity > 0 {
		gauge(ch, c.mapCapacity, float64(src.FlowMapCapacity))
	}

	if src.Attached != nil {
		gauge(ch, c.attached, float64(src.Attached()))
	}
	if src.Hooks != nil {
		for h, up := range src.Hooks() {
			gauge(ch, c.hookUp, b2f(up), h)
		}
	}
	if src.EnrichmentLost != nil {
		if n, err := src.EnrichmentLost(); err != nil {
			c.readError("enrichment_counters", err)
		} else {
			counter(ch, c.enrichLost, n)
		}
	}
	if src.EnrichmentUnwatched != nil {
		if n, err := src.EnrichmentUnwatched(); err != nil {
			c.readError("enrichment_counters", err)
		} else {
			counter(ch, c.enrichUnwatched, n)
		}
	}
	if src.FilterRules != nil {
		if rules, err := src.FilterRules(); err != nil {
			c.readError("filter_counters", err)
		} else {
			for _, r := range rules {
				counter(ch, c.filterRule, r.Packets, r.Rule, r.Action)
			}
		}
	}
	if src.Programs != nil {
		c.collectPrograms(ch, src.Programs())
	}
	if src.Maps != nil {
		for _, mp := range src.Maps() {
			v, err := mp.Memory()
			if err != nil {
				c.readError("bpf_map_memory", err)
				continue
			}
			gauge(ch, c.mapMemory, float64(v), mp.Name)
		}
	}
	if src.BPFStatsEnabled != nil {
		gauge(ch, c.statsEnabled, b2f(src.BPFStatsEnabled()))
	}
	for s, n := range c.readErrs {
		counter(ch, c.readErrors, n, s)
	}
}

// collectPrograms sums program stats per (name, attach). An instance that
// went away keeps contributing its last reading, so the sums never go
// down (they are counters). Called with c.mu held.
func (c *metricsCollector) collectPrograms(ch chan<- prometheus.Metric, progs []Program) {
	current := make(map[ProgramStatter]progSample, len(progs))
	instances := map[progLabels]int{}
	for _, p := range progs {
		if p.Prog == nil {
			continue
		}
		if _, dup := current[p.Prog]; dup {
			continue
		}
		l := progLabels{p.Name, p.Attach}
		instances[l]++
		s := c.progs[p.Prog] // the last reading, kept if this one fails
		s.labels = l
		if st, err := p.Prog.Stats(); err != nil {
			c.readError("bpf_program_stats", err)
		} else {
			s.runtime, s.runs, s.misses = st.Runtime, st.RunCount, st.RecursionMisses
		}
		current[p.Prog] = s
	}
	for p, s := range c.progs {
		if _, ok := current[p]; !ok { // unloaded: keep its share in the sums
			r := c.retired[s.labels]
			r.labels = s.labels
			r.add(s)
			c.retired[s.labels] = r
		}
	}
	c.progs = current

	totals := map[progLabels]progSample{}
	for l, r := range c.retired {
		totals[l] = r
	}
	for _, s := range current {
		t := totals[s.labels]
		t.add(s)
		totals[s.labels] = t
	}
	for l, s := range totals {
		ch <- prometheus.MustNewConstMetric(c.progRunTime, prometheus.CounterValue, s.runtime.Seconds(), l.name, l.attach)
		counter(ch, c.progRuns, s.runs, l.name, l.attach)
		counter(ch, c.progMisses, s.misses, l.name, l.attach)
		gauge(ch, c.progInst, float64(instances[l]), l.name, l.attach)
	}
}
