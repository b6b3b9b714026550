package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The metrics of feature dns: query-to-answer latency, answers by response
// code, unanswered queries.
const (
	MetricDNSLatency   = Prefix + "dns_latency_seconds"
	MetricDNSResponses = Prefix + "dns_responses_total"
	MetricDNSTimeouts  = Prefix + "dns_timeouts_total"

	// DNSRcodeOther is the rcode label of a response code above 15, which
	// the 4-bit header field cannot hold (an agent that sends one is not
	// flowlens's): codes 0-15 are flow.DNSRcodeName's, so the label has at
	// most 17 values.
	DNSRcodeOther = "other"
)

var dnsMetricNames = []string{MetricDNSLatency, MetricDNSResponses, MetricDNSTimeouts}

// DNSLatencyBuckets are the buckets of flowlens_collector_dns_latency_seconds:
// 0.5 ms (a node-local cache) to 5 s (the resolvers' usual retry timeout),
// 1-2.5-5 per decade.
var DNSLatencyBuckets = []float64{
	0.5e-3, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5,
}

type dnsMetrics struct {
	latency             *histogramSeries
	responses, timeouts *counterSeries
}

func (m *dnsMetrics) register(r registrar) {
	client := []string{"client_namespace", "client_workload"}
	m.responses = r.counterVec(MetricDNSResponses, "DNS answers seen (feature dns; one per flow record that carries one: the last answer of the flow in the eviction period; not scaled), by response code name (NOERROR, NXDOMAIN, SERVFAIL ...) and the client's namespace and workload (the query's sender; query names are not a label).",
		append([]string{"rcode"}, client...))
	m.timeouts = r.counterVec(MetricDNSTimeouts, "DNS queries left unanswered longer than the agent's --dns-timeout (feature dns; one per flow record that reports one), by the client's namespace and workload.", client)
	m.latency = r.histogramVec(MetricDNSLatency, "DNS query-to-answer latency (feature dns), observed once per flow record that reports one (its latest value in the eviction period), by the client's namespace and workload.",
		DNSLatencyBuckets, client)
}

func (m *dnsMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if f.HasDNS() && (m.latency != nil || m.responses != nil || m.timeouts != nil) {
		// The client sent the query. A query (and its answer's latency
		// and code) is reported on the client's flow, whose source is the
		// client; an answer whose query was not seen, on the server's flow
		// (QR set), whose destination is the client.
		cNS, cW := l.srcNS, l.srcW
		if f.DNSFlags&flow.DNSFlagQR != 0 {
			cNS, cW = l.dstNS, l.dstW
		}
		if m.responses != nil && f.DNSAnswered() {
			m.responses.add(l.now, 1, dnsRcodeLabel(f.DNSRcode), cNS, cW)
		}
		if m.latency != nil && f.DNSLatency > 0 {
			m.latency.observe(l.now, f.DNSLatency.Seconds(), cNS, cW)
		}
		if m.timeouts != nil && f.DNSTimeout {
			m.timeouts.add(l.now, 1, cNS, cW)
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
