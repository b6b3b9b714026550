// Package tls is the "tls" feature: TLS usage per flow, from the handshake
// the TC programs see (bpf/tls.h, inside the TC programs: no hook of its
// own). A ServerHello gives the flow it travels on (server -> client) the
// negotiated version, cipher suite and key-share group; a ClientHello marks
// the client's flow; a QUIC long-header packet marks a UDP flow. No payload
// is kept. docs/tls.md.
package tls

import (
	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Feature records TLS handshakes.
type Feature struct{ feature.NoOptions }

// New returns the feature.
func New() *Feature { return &Feature{} }

func (*Feature) Name() string { return "tls" }

func (*Feature) DocPage() string { return "docs/tls.md" }

func (*Feature) Config() config.Feature { return config.Feature{Brief: "TLS handshakes, QUIC"} }

func (*Feature) Doc() string {
	return "TLS handshakes (version, cipher suite, key-share group) and QUIC, per flow"
}

// Plan switches the inspection on inside the TC programs; it needs nothing
// the TC programs do not already use.
func (*Feature) Plan(*btf.Spec) datapath.Plan {
	return datapath.Plan{Name: "tls", TC: map[string]any{"tls_on": uint32(1)}}
}

func (*Feature) Fields() []string {
	return []string{"tls_version", "tls_cipher_suite", "tls_group", "tls_client_hello", "quic"}
}

// Fill copies what the handshake showed.
func (*Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	if v.TlsFlags&datapath.TLSServerHello != 0 {
		r.TLSVersion, r.TLSCipherSuite, r.TLSGroup = v.TlsVersion, v.TlsCipher, v.TlsGroup
	}
	r.TLSClientHello = v.TlsFlags&datapath.TLSClientHello != 0
	r.QUIC = v.TlsFlags&datapath.TLSQUIC != 0
}
