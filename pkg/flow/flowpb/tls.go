package flowpb

import (
	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Flow.tls (feature "tls").
var tlsGroup = group{
	name: "tls",
	num:  54,
	toProto: func(dst, spare *flowv1.Flow, r *flow.Record) {
		m := groupMessage(dst, spare, func(f *flowv1.Flow) **flowv1.TLS { return &f.Tls }, r.HasTLS())
		if m == nil {
			return
		}
		m.TlsVersion = uint32(r.TLSVersion)
		m.TlsCipherSuite = uint32(r.TLSCipherSuite)
		m.TlsGroup = uint32(r.TLSGroup)
		m.TlsClientHello = r.TLSClientHello
		m.Quic = r.QUIC
	},
	toRecord: func(r *flow.Record, f *flowv1.Flow) {
		if m := f.Tls; m != nil {
			r.TLSFields = flow.TLSFields{TLSVersion: uint16(m.TlsVersion), TLSCipherSuite: uint16(m.TlsCipherSuite),
				TLSGroup: uint16(m.TlsGroup), TLSClientHello: m.TlsClientHello, QUIC: m.Quic}
		}
	},
	validate: func(f *flowv1.Flow) error {
		m := f.Tls
		if m == nil {
			return nil
		}
		return firstErr(
			checkMax("tls_version", m.TlsVersion, 0xffff), checkMax("tls_cipher_suite", m.TlsCipherSuite, 0xffff),
			checkMax("tls_group", m.TlsGroup, 0xffff),
		)
	},
}

// appendTLS appends Flow.tls of r (wire.go).
func appendTLS(b []byte, r *flow.Record) []byte {
	if !r.HasTLS() {
		return b
	}
	b, start := openGroup(b, 54)
	b = appendVarint(b, 1, uint64(r.TLSVersion))
	b = appendVarint(b, 2, uint64(r.TLSCipherSuite))
	b = appendVarint(b, 3, uint64(r.TLSGroup))
	b = appendBool(b, 4, r.TLSClientHello)
	b = appendBool(b, 5, r.QUIC)
	return closeGroup(b, start)
}
