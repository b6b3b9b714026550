package enrich

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Metric names: a contract with the dashboards (manifests/dashboards) and
// docs/metrics.md.
const (
	Prefix = "flowlens_collector_"

	// Flow metrics, derived from the flows received (selectable with
	// MetricsOptions.Enabled).
	MetricFlowBytes   = Prefix + "flow_bytes_total"
	MetricFlowPackets = Prefix + "flow_packets_total"
	MetricNodeBytes   = Prefix + "node_bytes_total"
	MetricDropPackets = Prefix + "drop_packets_total"
	MetricDropBytes   = Prefix + "drop_bytes_total"
	MetricRTT         = Prefix + "rtt_seconds"
	MetricRetransmits = Prefix + "retransmits_total"
	MetricFlows       = Prefix + "flows_total"
	MetricSampling    = Prefix + "sampling"
	// Translation (feature xlat): flows conntrack NAT rewrote.
	MetricTranslatedBytes = Prefix + "translated_bytes_total"
	MetricTranslatedFlows = Prefix + "translated_flows_total"
	// TLS (feature tls): flows that carried a ServerHello.
	MetricTLSFlows = Prefix + "tls_flows_total"
	// DNS (feature dns): query-to-answer latency, answers by response
	// code, unanswered queries.
	MetricDNSLatency   = Prefix + "dns_latency_seconds"
	MetricDNSResponses = Prefix + "dns_responses_total"
	MetricDNSTimeouts  = Prefix + "dns_timeouts_total"

	// Health metrics, always served.
	MetricReceivedFlows    = Prefix + "received_flows_total"
	MetricDecodeErrors     = Prefix + "decode_errors_total"
	MetricEnrichmentMisses = Prefix + "enrichment_misses_total"
	MetricInformerSynced   = Prefix + "informer_synced"
)

// FlowMetricNames are the flow metrics, the names MetricsOptions.Enabled
// chooses from (all by default).
var FlowMetricNames = []string{
	MetricFlowBytes, MetricFlowPackets, MetricNodeBytes, MetricDropPackets, MetricDropBytes,
	MetricRTT, MetricRetransmits, MetricFlows, MetricSampling,
	MetricTranslatedBytes, MetricTranslatedFlows, MetricTLSFlows,
	MetricDNSLatency, MetricDNSResponses, MetricDNSTimeouts,
}

// HealthMetricNames are always served.
var HealthMetricNames = []string{MetricReceivedFlows, MetricDecodeErrors, MetricEnrichmentMisses, MetricInformerSynced}

// RTTBuckets are the buckets of flowlens_collector_rtt_seconds: 50 µs to
// 10 s, 1-2.5-5 per decade.
var RTTBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5, 10,
}

// DNSLatencyBuckets are the buckets of flowlens_collector_dns_latency_seconds:
// 0.5 ms (a node-local cache) to 5 s (the resolvers' usual retry timeout),
// 1-2.5-5 per decade.
var DNSLatencyBuckets = []float64{
	0.5e-3, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5,
}

// Label values with a meaning.
const (
	// WorkloadExternal is the workload of an address outside the cluster
	// that no subnet label covers.
	WorkloadExternal = "external"
	// CauseOther replaces drop causes that are not kernel-style names
	// ([A-Za-z0-9_], at most 64) and causes beyond MaxDropCauses distinct
	// ones, so that agents cannot grow the cause label without bound.
	CauseOther = "OTHER"
	// MaxDropCauses bounds the distinct values of the cause label (the
	// kernel's enum skb_drop_reason has about 120).
	MaxDropCauses = 256

	// Values of the translated label: which side of the flow conntrack NAT
	// rewrote (address or port). A DNAT to a Service's backend is "dst" on
	// the request flow; its reply flow, un-DNATed, is "src".
	TranslatedDst  = "dst"
	TranslatedSrc  = "src"
	TranslatedBoth = "both"

	// TLSOther is the tls_version or cipher_suite label of a value the
	// name tables of pkg/flow do not have (flow.TLSVersionName,
	// flow.TLSCipherSuiteName), so agents cannot grow them without bound.
	TLSOther = "other"

	// DNSRcodeOther is the rcode label of a response code above 15, which
	// the 4-bit header field cannot hold (an agent that sends one is not
	// flowlens's): codes 0-15 are flow.DNSRcodeName's, so the label has at
	// most 17 values.
	DNSRcodeOther = "other"
)

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
}

// Metrics derives Prometheus metrics from flows, with labels of bounded
// cardinality: namespaces, workloads, nodes, directions, drop causes,
// translated sides, TLS versions and cipher suites (fixed tables), DNS
// response codes (never query names), and pods only when asked. Safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	podLabels bool

	flowBytes, flowPackets *prometheus.CounterVec
	nodeBytes              *prometheus.CounterVec
	dropPackets, dropBytes *prometheus.CounterVec
	rtt                    *prometheus.HistogramVec
	retransmits            *prometheus.CounterVec
	flows                  prometheus.Counter
	sampling               *prometheus.GaugeVec
	xlatBytes, xlatFlows   *prometheus.CounterVec
	tlsFlows               *prometheus.CounterVec
	dnsLatency             *prometheus.HistogramVec
	dnsResponses           *prometheus.CounterVec
	dnsTimeouts            *prometheus.CounterVec
	received               prometheus.Counter
	convertErrors          atomic.Uint64
	missSrc, missDst       prometheus.Counter

	causeMu sync.RWMutex
	causes  map[string]struct{}
}

// NewMetrics registers the enabled metrics in a new registry.
func NewMetrics(o MetricsOptions) (*Metrics, error) {
	enabled, err := enabledSet(o.Enabled)
	if err != nil {
		return nil, err
	}
	m := &Metrics{reg: prometheus.NewRegistry(), podLabels: o.PodLabels, causes: map[string]struct{}{}}
	flowLabels := []string{"src_namespace", "src_workload", "dst_namespace", "dst_workload", "direction"}
	if o.PodLabels {
		flowLabels = append(flowLabels, "src_pod", "dst_pod")
	}
	nsLabels := []string{"src_namespace", "dst_namespace"}
	counterVec := func(name, help string, labels []string) *prometheus.CounterVec {
		if !enabled[name] {
			return nil
		}
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(v)
		return v
	}
	m.flowBytes = counterVec(MetricFlowBytes, "Bytes of flows (L2 frame bytes counted on each flow's first interface, times its sampling rate), by source and destination namespace and workload and the direction of the counting interface.", flowLabels)
	m.flowPackets = counterVec(MetricFlowPackets, "Packets of flows (times their sampling rate), by source and destination namespace and workload and the direction of the counting interface.", flowLabels)
	m.nodeBytes = counterVec(MetricNodeBytes, "Bytes of flows (times their sampling rate) by the node of each endpoint (\"\" for endpoints not on a node: Services, external addresses).", []string{"src_node", "dst_node"})
	m.dropPackets = counterVec(MetricDropPackets, "Packets the kernel dropped, by source and destination namespace and drop cause (the kernel's drop reason).", []string{"src_namespace", "dst_namespace", "cause"})
	m.dropBytes = counterVec(MetricDropBytes, "Bytes of the packets the kernel dropped, by source and destination namespace and drop cause.", []string{"src_namespace", "dst_namespace", "cause"})
	m.retransmits = counterVec(MetricRetransmits, "TCP segments retransmitted, by source and destination namespace of the flow that carried them.", nsLabels)
	xlatLabels := []string{"src_namespace", "src_workload", "dst_namespace", "dst_workload",
		"xlat_dst_namespace", "xlat_dst_workload", "translated"}
	m.xlatBytes = counterVec(MetricTranslatedBytes, "Bytes of flows conntrack NAT translated (feature xlat; times their sampling rate), by source and destination namespace and workload as seen (a Service's virtual IP: the Service), the namespace and workload of the translated destination (the backend), and the side translated (dst, src, both).", xlatLabels)
	m.xlatFlows = counterVec(MetricTranslatedFlows, "Flow records conntrack NAT translated (feature xlat; one per flow per eviction period, not scaled), with the labels of translated_bytes_total.", xlatLabels)
	m.tlsFlows = counterVec(MetricTLSFlows, "Flow records that carried a TLS ServerHello (feature tls; the server -> client flow of a handshake; not scaled), by negotiated version and cipher suite (IANA names, other for values without one) and the server's namespace and workload.",
		[]string{"tls_version", "cipher_suite", "server_namespace", "server_workload"})
	dnsClient := []string{"client_namespace", "client_workload"}
	m.dnsResponses = counterVec(MetricDNSResponses, "DNS answers seen (feature dns; one per flow record that carries one: the last answer of the flow in the eviction period; not scaled), by response code name (NOERROR, NXDOMAIN, SERVFAIL ...) and the client's namespace and workload (the query's sender; query names are not a label).",
		append([]string{"rcode"}, dnsClient...))
	m.dnsTimeouts = counterVec(MetricDNSTimeouts, "DNS queries left unanswered longer than the agent's --dns-timeout (feature dns; one per flow record that reports one), by the client's namespace and workload.", dnsClient)
	if enabled[MetricDNSLatency] {
		m.dnsLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricDNSLatency,
			Help:    "DNS query-to-answer latency (feature dns), observed once per flow record that reports one (its latest value in the eviction period), by the client's namespace and workload.",
			Buckets: DNSLatencyBuckets}, dnsClient)
		m.reg.MustRegister(m.dnsLatency)
	}
	if enabled[MetricRTT] {
		m.rtt = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricRTT,
			Help:    "Smoothed TCP round-trip time, observed once per flow that reports one (its latest value in the eviction period), by source and destination namespace.",
			Buckets: RTTBuckets}, nsLabels)
		m.reg.MustRegister(m.rtt)
	}
	if enabled[MetricFlows] {
		m.flows = prometheus.NewCounter(prometheus.CounterOpts{Name: MetricFlows, Help: "Flow records received and processed (rate() is flows per second)."})
		m.reg.MustRegister(m.flows)
	}
	if enabled[MetricSampling] {
		m.sampling = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricSampling,
			Help: "Sampling rate the agent of each node reports on its latest flows (1 in N packets accounted; 1 = every packet)."}, []string{"node"})
		m.reg.MustRegister(m.sampling)
	}

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
	for i := range flows {
		f := &flows[i]
		m.observe(f)
		if m.sampling != nil && (i == 0 || f.NodeName != lastNode || f.Sampling != lastSampling) {
			lastNode, lastSampling = f.NodeName, f.Sampling
			m.sampling.WithLabelValues(f.NodeName).Set(float64(samplingOf(f.Sampling)))
		}
	}
}

func samplingOf(s uint32) uint32 {
	if s == 0 {
		return 1 // an agent that does not say samples nothing
	}
	return s
}

func (m *Metrics) observe(f *enriched.Flow) {
	if m.flows != nil {
		m.flows.Inc()
	}
	s := float64(samplingOf(f.Sampling))
	srcNS, srcW := endpointLabels(&f.Src)
	dstNS, dstW := endpointLabels(&f.Dst)

	if f.Bytes > 0 || f.Packets > 0 {
		if m.flowBytes != nil || m.flowPackets != nil {
			dir := ""
			if len(f.Interfaces) > 0 {
				if d := f.Interfaces[0].Direction; d >= flow.DirIngress && d <= flow.DirBoth {
					dir = d.String()
				}
			}
			var lv []string
			if m.podLabels {
				lv = []string{srcNS, srcW, dstNS, dstW, dir, podName(&f.Src), podName(&f.Dst)}
			} else {
				lv = []string{srcNS, srcW, dstNS, dstW, dir}
			}
			if m.flowBytes != nil {
				m.flowBytes.WithLabelValues(lv...).Add(float64(f.Bytes) * s)
			}
			if m.flowPackets != nil {
				m.flowPackets.WithLabelValues(lv...).Add(float64(f.Packets) * s)
			}
		}
		if m.nodeBytes != nil {
			m.nodeBytes.WithLabelValues(f.Src.Node, f.Dst.Node).Add(float64(f.Bytes) * s)
		}
	}
	// Drops and retransmits come from the agent's drop and retransmit
	// hooks, which see every packet whatever the sampling rate: they are
	// exact counts, not scaled.
	if f.DropPackets > 0 || f.DropBytes > 0 {
		cause := m.cause(f.DropCause)
		if m.dropPackets != nil {
			m.dropPackets.WithLabelValues(srcNS, dstNS, cause).Add(float64(f.DropPackets))
		}
		if m.dropBytes != nil {
			m.dropBytes.WithLabelValues(srcNS, dstNS, cause).Add(float64(f.DropBytes))
		}
	}
	if f.Retransmits > 0 && m.retransmits != nil {
		m.retransmits.WithLabelValues(srcNS, dstNS).Add(float64(f.Retransmits))
	}
	if f.RTT > 0 && m.rtt != nil {
		m.rtt.WithLabelValues(srcNS, dstNS).Observe(f.RTT.Seconds())
	}
	if (m.xlatBytes != nil || m.xlatFlows != nil) && (f.Bytes > 0 || f.Packets > 0) {
		if side := translatedSide(&f.Record); side != "" {
			// The translated destination's context; the flow's own when
			// only the source was translated.
			xNS, xW := dstNS, dstW
			if f.XlatDstAddr.IsValid() {
				xNS, xW = endpointLabels(&f.XlatDst)
			}
			lv := []string{srcNS, srcW, dstNS, dstW, xNS, xW, side}
			if m.xlatBytes != nil {
				m.xlatBytes.WithLabelValues(lv...).Add(float64(f.Bytes) * s)
			}
			if m.xlatFlows != nil {
				m.xlatFlows.WithLabelValues(lv...).Inc()
			}
		}
	}
	// A ServerHello travels from the server to the client: the flow's
	// source is the server. ClientHello-only and QUIC-only flows carry no
	// negotiated values and are not counted.
	if m.tlsFlows != nil && f.TLSVersion != 0 {
		m.tlsFlows.WithLabelValues(tlsLabel(f.TLSVersion, flow.TLSVersionName),
			tlsLabel(f.TLSCipherSuite, flow.TLSCipherSuiteName), srcNS, srcW).Inc()
	}
	if f.HasDNS() && (m.dnsLatency != nil || m.dnsResponses != nil || m.dnsTimeouts != nil) {
		// The client sent the query. A query (and its answer's latency
		// and code) is reported on the client's flow, whose source is the
		// client; an answer whose query was not seen, on the server's flow
		// (QR set), whose destination is the client.
		cNS, cW := srcNS, srcW
		if f.DNSFlags&flow.DNSFlagQR != 0 {
			cNS, cW = dstNS, dstW
		}
		if m.dnsResponses != nil && f.DNSAnswered() {
			m.dnsResponses.WithLabelValues(dnsRcodeLabel(f.DNSRcode), cNS, cW).Inc()
		}
		if m.dnsLatency != nil && f.DNSLatency > 0 {
			m.dnsLatency.WithLabelValues(cNS, cW).Observe(f.DNSLatency.Seconds())
		}
		if m.dnsTimeouts != nil && f.DNSTimeout {
			m.dnsTimeouts.WithLabelValues(cNS, cW).Inc()
		}
	}
}

// dnsRcodeLabel is the rcode label of a DNS response code: its name for the
// header's 4-bit codes, DNSRcodeOther above.
func dnsRcodeLabel(c uint8) string {
	if c > 15 {
		return DNSRcodeOther
	}
	return flow.DNSRcodeName(c)
}

// tlsLabel is the label value of a TLS version or cipher suite: its name,
// TLSOther without one ("" for 0: not seen).
func tlsLabel(v uint16, name func(uint16) (string, bool)) string {
	if v == 0 {
		return ""
	}
	if n, ok := name(v); ok {
		return n
	}
	return TLSOther
}

// translatedSide is the translated label of a flow: which side conntrack
// NAT rewrote (a translated address or port that differs from the flow's
// own), "" when the flow carries no translation or one that changes
// nothing.
func translatedSide(r *flow.Record) string {
	src := r.XlatSrcAddr.IsValid() && (r.XlatSrcAddr.Unmap() != r.SrcAddr.Unmap() || r.XlatSrcPort != r.SrcPort)
	dst := r.XlatDstAddr.IsValid() && (r.XlatDstAddr.Unmap() != r.DstAddr.Unmap() || r.XlatDstPort != r.DstPort)
	switch {
	case src && dst:
		return TranslatedBoth
	case dst:
		return TranslatedDst
	case src:
		return TranslatedSrc
	}
	return ""
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

// cause bounds the drop cause label.
func (m *Metrics) cause(c string) string {
	if !validCause(c) {
		return CauseOther
	}
	m.causeMu.RLock()
	_, ok := m.causes[c]
	m.causeMu.RUnlock()
	if ok {
		return c
	}
	m.causeMu.Lock()
	defer m.causeMu.Unlock()
	if _, ok := m.causes[c]; ok {
		return c
	}
	if len(m.causes) >= MaxDropCauses {
		return CauseOther
	}
	m.causes[c] = struct{}{}
	return c
}

// validCause accepts the kernel's drop reason names (and the agent's
// numeric fallback): [A-Za-z0-9_], 64 at most; "" (unknown) too.
func validCause(c string) bool {
	if len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_') {
			return false
		}
	}
	return true
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
