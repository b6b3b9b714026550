package enrich

import (
	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The metric of feature tls: flows that carried a ServerHello.
const (
	MetricTLSFlows = Prefix + "tls_flows_total"

	// TLSOther is the tls_version or cipher_suite label of a value the
	// name tables of pkg/flow do not have (flow.TLSVersionName,
	// flow.TLSCipherSuiteName), so agents cannot grow them without bound.
	TLSOther = "other"
)

var tlsMetricNames = []string{MetricTLSFlows}

type tlsMetrics struct{ flows *counterSeries }

func (m *tlsMetrics) register(r registrar) {
	m.flows = r.counterVec(MetricTLSFlows, "Flow records that carried a TLS ServerHello (feature tls; the server -> client flow of a handshake; not scaled), by negotiated version and cipher suite (IANA names, other for values without one) and the server's namespace and workload.",
		[]string{"tls_version", "cipher_suite", "server_namespace", "server_workload"})
}

// observe: a ServerHello travels from the server to the client: the flow's
// source is the server. ClientHello-only and QUIC-only flows carry no
// negotiated values and are not counted.
func (m *tlsMetrics) observe(f *enriched.Flow, l *flowLabels) {
	if m.flows != nil && f.TLSVersion != 0 {
		m.flows.add(l.now, 1, tlsLabel(f.TLSVersion, flow.TLSVersionName),
			tlsLabel(f.TLSCipherSuite, flow.TLSCipherSuiteName), l.srcNS, l.srcW)
	}
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
