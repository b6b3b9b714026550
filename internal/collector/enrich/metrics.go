package enrich

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Metric names: a contract with the dashboards (manifests/dashboards) and
// docs/metrics.md. A feature's metrics are in its own file (metrics_NAME.go):
// their names, registration and part of observe.
const (
	Prefix = "flowlens_collector_"

	// Flow metrics, derived from the flows received (selectable with
	// MetricsOptions.Enabled).
	MetricFlowBytes   = Prefix + "flow_bytes_total"
	MetricFlowPackets = Prefix + "flow_packets_total"
	MetricNodeBytes   = Prefix + "node_bytes_total"
	MetricFlows       = Prefix + "flows_total"
	MetricSampling    = Prefix + "sampling"

	// Health metrics, always served.
	MetricReceivedFlows    = Prefix + "received_flows_total"
	MetricDecodeErrors     = Prefix + "decode_errors_total"
	MetricEnrichmentMisses = Prefix + "enrichment_misses_total"
	MetricInformerSynced   = Prefix + "informer_synced"
	// MetricSeriesLimited and MetricSeriesExpired are in series.go.
)

// featureMetricNames are the features' flow metrics, in the registry's
// order.
var featureMetricNames = [][]string{
	// groupgen metricnames: generated to its end line by make generate. DO NOT EDIT.
	dropsMetricNames,
	rttMetricNames,
	retransmitsMetricNames,
	xlatMetricNames,
	tlsMetricNames,
	dnsMetricNames,
	tcpMetricNames,
	// groupgen metricnames: end.
}

// earlyFeatures is how many of the registry's first features (drops, rtt,
// retransmits, which flowlens had before the others) have their metrics
// listed before flows_total and sampling in FlowMetricNames: the order
// --metrics has always listed them in.
const earlyFeatures = 3

// FlowMetricNames are the flow metrics, the names MetricsOptions.Enabled
// chooses from (all by default): the core's traffic metrics, the early
// features' metrics, the core's flows_total and sampling, then the other
// features' metrics in the registry's order.
var FlowMetricNames = slices.Concat(
	[]string{MetricFlowBytes, MetricFlowPackets, MetricNodeBytes},
	slices.Concat(featureMetricNames[:earlyFeatures]...),
	[]string{MetricFlows, MetricSampling},
	slices.Concat(featureMetricNames[earlyFeatures:]...),
)

// HealthMetricNames are always served.
var HealthMetricNames = []string{MetricReceivedFlows, MetricDecodeErrors, MetricEnrichmentMisses, MetricInformerSynced,
	MetricSeriesLimited, MetricSeriesExpired}

// WorkloadExternal is the workload of an address outside the cluster that
// no subnet label covers.
const WorkloadExternal = "external"

// MetricsOptions configure Metrics.
type MetricsOptions struct {
	// Enabled lists the flow metrics to serve, by full name or without the
	// flowlens_collector_ prefix. Nil: all of FlowMetricNames; empty
	// (non-nil): none. Health metric names are accepted and change nothing
	// (they are always served). An unknown name is an error.
	Enabled []string
	// PodLabels adds src_pod and dst_pod (the pod's name, "" for
	// endpoints that are not pods) to flow_bytes_total and
	// flow_packets_total. Their cardinality then grows with pods, not
	// workloads: see docs/metrics.md.
	PodLabels bool
	// DecodeErrors, when set, is read at scrape time as
	// flowlens_collector_decode_errors_total, added to the conversion
	// errors the pipeline counts itself (a collector.Server's
	// Stats.Malformed).
	DecodeErrors func() uint64
	// Informers, when set, is read at scrape time as
	// flowlens_collector_informer_synced, one series per key
	// (k8smeta.Cache.Synced).
	Informers func() map[string]bool
	// SeriesTTL deletes a flow metric's series once no flow updated it for
	// that long (Expire, RunExpiry); 0 keeps every series.
	SeriesTTL time.Duration
	// MaxSeries caps the series of each flow metric (series.go: past it,
	// the overflow series and metric_series_limited_total); 0: no cap.
	MaxSeries int
	// Now is the clock of the series' last updates (nil: time.Now).
	Now func() time.Time
}

// Metrics derives Prometheus metrics from flows, with labels of bounded
// cardinality: namespaces, workloads, nodes, directions, drop causes,
// translated sides, TLS versions and cipher suites (fixed tables), DNS
// response codes (never query names), and pods only when asked. Safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	podLabels bool

	flowBytes, flowPackets *counterSeries
	nodeBytes              *counterSeries
	flows                  prometheus.Counter
	sampling               *gaugeSeries
	// groupgen metricfields: generated to its end line by make generate. DO NOT EDIT.
	drops       dropsMetrics
	rtt         rttMetrics
	retransmits retransmitsMetrics
	xlat        xlatMetrics
	tls         tlsMetrics
	dns         dnsMetrics
	tcp         tcpMetrics
	// groupgen metricfields: end.
	received         prometheus.Counter
	convertErrors    atomic.Uint64
	missSrc, missDst prometheus.Counter

	// byFeature are the flow metrics each feature registers, enabled or
	// not (FeatureMetrics).
	byFeature map[string][]string

	// The bounds of the flow metrics' series (series.go).
	ttl              time.Duration
	maxSeries        int
	now              func() time.Time
	tracked          []seriesTracker
	limited, expired *prometheus.CounterVec
}

// NewMetrics registers the enabled metrics in a new registry.
func NewMetrics(o MetricsOptions) (*Metrics, error) {
	enabled, err := enabledSet(o.Enabled)
	if err != nil {
		return nil, err
	}
	if o.SeriesTTL < 0 || o.MaxSeries < 0 {
		return nil, fmt.Errorf("series TTL %v and cap %d: must not be negative", o.SeriesTTL, o.MaxSeries)
	}
	m := &Metrics{reg: prometheus.NewRegistry(), podLabels: o.PodLabels, byFeature: map[string][]string{},
		ttl: o.SeriesTTL, maxSeries: o.MaxSeries, now: o.Now}
	if m.now == nil {
		m.now = time.Now
	}
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSeriesLimited,
		Help: "Updates of a flow metric that would have created a series beyond --metrics-max-series: counted in the metric's overflow series (labels _overflow; a gauge's value is dropped), by metric."}, []string{"metric"})
	m.expired = prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSeriesExpired,
		Help: "Series of a flow metric deleted because no flow updated them for --metrics-series-ttl (a workload, pod or node gone), by metric."}, []string{"metric"})
	m.reg.MustRegister(m.limited, m.expired)
	trafficLabels := []string{"src_namespace", "src_workload", "dst_namespace", "dst_workload", "direction"}
	if o.PodLabels {
		trafficLabels = append(trafficLabels, "src_pod", "dst_pod")
	}
	core := registrar{m: m, reg: m.reg, enabled: enabled}
	m.flowBytes = core.counterVec(MetricFlowBytes, "Bytes of flows (L2 frame bytes counted on each flow's first interface, times its sampling rate), by source and destination namespace and workload and the direction of the counting interface.", trafficLabels)
	m.flowPackets = core.counterVec(MetricFlowPackets, "Packets of flows (times their sampling rate), by source and destination namespace and workload and the direction of the counting interface.", trafficLabels)
	m.nodeBytes = core.counterVec(MetricNodeBytes, "Bytes of flows (times their sampling rate) by the node of each endpoint (\"\" for endpoints not on a node: Services, external addresses).", []string{"src_node", "dst_node"})
	// groupgen register: generated to its end line by make generate. DO NOT EDIT.
	m.drops.register(m.featureRegistrar("drops", enabled))
	m.rtt.register(m.featureRegistrar("rtt", enabled))
	m.retransmits.register(m.featureRegistrar("retransmits", enabled))
	m.xlat.register(m.featureRegistrar("xlat", enabled))
	m.tls.register(m.featureRegistrar("tls", enabled))
	m.dns.register(m.featureRegistrar("dns", enabled))
	m.tcp.register(m.featureRegistrar("tcp", enabled))
	// groupgen register: end.
	if enabled[MetricFlows] {
		m.flows = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricFlows, Help: "Flow records received and processed (rate() is flows per second)."})
		m.reg.MustRegister(m.flows)
	}
	m.sampling = core.gaugeVec(MetricSampling, "Sampling rate the agent of each node reports on its latest flows (1 in N packets accounted; 1 = every packet).", []string{"node"})

	m.received = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricReceivedFlows, Help: "Flows received from agents, valid ones handed to the pipeline."})
	misses := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricEnrichmentMisses,
		Help: "Flow endpoints whose address is not a pod, Service or node of the cluster (enrichment on), by side."}, []string{"side"})
	m.missSrc, m.missDst = misses.WithLabelValues("src"), misses.WithLabelValues("dst")
	m.reg.MustRegister(m.received, misses)
	decodeErrors := o.DecodeErrors
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricDecodeErrors,
		Help: "Messages from agents that did not decode or held an invalid flow (refused with InvalidArgument), plus flows the pipeline could not convert."},
		func() float64 {
			n := m.convertErrors.Load()
			if decodeErrors != nil {
				n += decodeErrors()
			}
			return float64(n)
		}))
	if o.Informers != nil {
		m.reg.MustRegister(&syncedCollector{read: o.Informers, desc: prometheus.NewDesc(MetricInformerSynced,
			"1 once the informer of the resource has listed it (the collector resolves addresses from its cache), 0 before.", []string{"resource"}, nil)})
	}
	return m, nil
}

// enabledSet resolves MetricsOptions.Enabled.
func enabledSet(names []string) (map[string]bool, error) {
	set := map[string]bool{}
	if names == nil {
		for _, n := range FlowMetricNames {
			set[n] = true
		}
		return set, nil
	}
	for _, n := range names {
		full := n
		if !strings.HasPrefix(full, Prefix) {
			full = Prefix + n
		}
		switch {
		case slices.Contains(FlowMetricNames, full):
			set[full] = true
		case slices.Contains(HealthMetricNames, full):
		default:
			return nil, fmt.Errorf("unknown metric %q: want some of %s", n, strings.Join(FlowMetricNames, ", "))
		}
	}
	return set, nil
}

// Registry is where the metrics are registered; add the process's own
// collectors (Go runtime, process) to it.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves /metrics (Prometheus text, or OpenMetrics when asked),
// /healthz (200 while the process serves HTTP) and /readyz (200 once
// ready returns nil, 503 with its error until then; nil ready: always 200):
// package httpserve's handler over Registry, which the collector serves.
func (m *Metrics) Handler(ready func() error) http.Handler {
	return httpserve.Handler(httpserve.Options{Gatherer: m.reg, Ready: ready})
}

// Observe adds flows to the metrics. Flows from the pipeline carry their
// endpoints' context (Src, Dst); without it (Kind ""), an endpoint counts
// as external.
func (m *Metrics) Observe(flows []enriched.Flow) {
	var lastNode string
	var lastSampling uint32
	now := m.now().UnixNano() // the series' last update: one clock read per batch
	for i := range flows {
		f := &flows[i]
		m.observe(f, now)
		if m.sampling != nil && (i == 0 || f.NodeName != lastNode || f.Sampling != lastSampling) {
			lastNode, lastSampling = f.NodeName, f.Sampling
			m.sampling.set(now, float64(samplingOf(f.Sampling)), f.NodeName)
		}
	}
}

func samplingOf(s uint32) uint32 {
	if s == 0 {
		return 1 // an agent that does not say samples nothing
	}
	return s
}

// flowLabels are the label values of a flow that the core's and the
// features' metrics share, computed once per flow.
type flowLabels struct {
	srcNS, srcW, dstNS, dstW string
	// scale is the flow's sampling rate, by which its sampled counts
	// (bytes, packets) are multiplied.
	scale float64
	// now is the batch's time, the series' last update (Unix ns).
	now int64
}

func (m *Metrics) observe(f *enriched.Flow, now int64) {
	if m.flows != nil {
		m.flows.Inc()
	}
	l := flowLabels{now: now}
	l.scale = float64(samplingOf(f.Sampling))
	l.srcNS, l.srcW = endpointLabels(&f.Src)
	dst := deliveredDst(f) // the backend, not the Service (metrics_xlat.go)
	l.dstNS, l.dstW = endpointLabels(dst)

	// A tunnel flow's own record (overlay_outer) carries packets that its
	// inner flows count: the sums leave it out (docs/metrics.md).
	if (f.Bytes > 0 || f.Packets > 0) && !f.SkipInSums() {
		if m.flowBytes != nil || m.flowPackets != nil {
			dir := ""
			if len(f.Interfaces) > 0 {
				if d := f.Interfaces[0].Direction; d >= flow.DirIngress && d <= flow.DirBoth {
					dir = d.String()
				}
			}
			var lvs [7]string
			lv := append(lvs[:0], l.srcNS, l.srcW, l.dstNS, l.dstW, dir)
			if m.podLabels {
				lv = append(lv, podName(&f.Src), podName(dst))
			}
			if m.flowBytes != nil {
				m.flowBytes.add(now, float64(f.Bytes)*l.scale, lv...)
			}
			if m.flowPackets != nil {
				m.flowPackets.add(now, float64(f.Packets)*l.scale, lv...)
			}
		}
		if m.nodeBytes != nil {
			m.nodeBytes.add(now, float64(f.Bytes)*l.scale, f.Src.Node, dst.Node)
		}
	}
	// Each feature's metrics, called by name: this is the ingest path,
	// one call per flow and feature.
	// groupgen observe: generated to its end line by make generate. DO NOT EDIT.
	m.drops.observe(f, &l)
	m.rtt.observe(f, &l)
	m.retransmits.observe(f, &l)
	m.xlat.observe(f, &l)
	m.tls.observe(f, &l)
	m.dns.observe(f, &l)
	m.tcp.observe(f, &l)
	// groupgen observe: end.
}

// endpointLabels are the namespace and workload label values of an
// endpoint: the cluster's for pods, Services and nodes (namespace "" for
// nodes), and for external addresses namespace "" and the subnet label, or
// "external".
func endpointLabels(m *enriched.K8sContext) (namespace, workload string) {
	switch m.Kind {
	case enriched.KindPod, enriched.KindService, enriched.KindNode:
		return m.Namespace, m.Workload
	}
	if m.Subnet != "" {
		return "", m.Subnet
	}
	return "", WorkloadExternal
}

func podName(m *enriched.K8sContext) string {
	if m.Kind == enriched.KindPod {
		return m.Name
	}
	return ""
}

// syncedCollector reads the informers' sync status at scrape time.
type syncedCollector struct {
	read func() map[string]bool
	desc *prometheus.Desc
}

func (c *syncedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *syncedCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.read()
	names := make([]string, 0, len(st))
	for r := range st {
		names = append(names, r)
	}
	slices.Sort(names)
	for _, r := range names {
		v := 0.0
		if st[r] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, r)
	}
}

// A registrar registers the enabled ones of the flow metrics it is asked
// for. A feature's registrar also records every name asked for, enabled or
// not, in byFeature: a feature's metrics are what its register function
// asks for, so FeatureMetrics cannot drift from the registration.
type registrar struct {
	m         *Metrics // where the series are tracked
	reg       *prometheus.Registry
	enabled   map[string]bool
	feature   string
	byFeature map[string][]string // nil: the core's, not recorded
}

// featureRegistrar is the registrar of the metrics of feature.
func (m *Metrics) featureRegistrar(feature string, enabled map[string]bool) registrar {
	return registrar{m: m, reg: m.reg, enabled: enabled, feature: feature, byFeature: m.byFeature}
}

func (r registrar) asked(name string) bool {
	if r.byFeature != nil {
		r.byFeature[r.feature] = append(r.byFeature[r.feature], name)
	}
	return r.enabled[name]
}

// counterVec is the counter vector name, its series bounded (series.go),
// nil when it is not enabled.
func (r registrar) counterVec(name, help string, labels []string) *counterSeries {
	if !r.asked(name) {
		return nil
	}
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	r.reg.MustRegister(v)
	s := &counterSeries{}
	track(r.m, &s.bounded, name, v, len(labels), true)
	return s
}

// histogramVec is the histogram vector name, its series bounded, nil when
// it is not enabled.
func (r registrar) histogramVec(name, help string, buckets []float64, labels []string) *histogramSeries {
	if !r.asked(name) {
		return nil
	}
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	r.reg.MustRegister(v)
	s := &histogramSeries{}
	track(r.m, &s.bounded, name, v, len(labels), true)
	return s
}

// gaugeVec is the gauge vector name, its series bounded (past the cap, a
// value is dropped: a gauge has no sum to keep), nil when it is not
// enabled.
func (r registrar) gaugeVec(name, help string, labels []string) *gaugeSeries {
	if !r.asked(name) {
		return nil
	}
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	r.reg.MustRegister(v)
	s := &gaugeSeries{}
	track(r.m, &s.bounded, name, v, len(labels), false)
	return s
}

// track sets up b over vec and adds it to m's tracked series; its series
// of the limited and expired counters exist (0) from the start.
func track[M any](m *Metrics, b *bounded[M], name string, vec interface {
	GetMetricWithLabelValues(lvs ...string) (M, error)
	DeleteLabelValues(lvs ...string) bool
}, nLabel int, overflow bool) {
	b.name, b.vec, b.nLabel, b.overflow, b.max = name, vec, nLabel, overflow, m.maxSeries
	b.series = map[string]*seriesEntry[M]{}
	b.limited, b.expired = m.limited.WithLabelValues(name), m.expired.WithLabelValues(name)
	m.tracked = append(m.tracked, b)
}

// FeatureMetrics are the flow metrics of the kernel feature named feature
// (the registry's name: "dns"), the names its metrics_NAME.go registers;
// nil for a name without metrics. The conformance test of the feature
// registry reads them.
func FeatureMetrics(feature string) []string {
	m, err := NewMetrics(MetricsOptions{Enabled: []string{}})
	if err != nil {
		panic(err) // no name to refuse
	}
	return m.byFeature[feature]
}
