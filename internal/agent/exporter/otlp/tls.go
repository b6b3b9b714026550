package otlp

import "github.com/flowlens/flowlens/pkg/flow"

// The "tls" feature's attributes, on flows with a handshake or QUIC seen:
// the semantic conventions' tls.*, flowlens.tls_client_hello and
// flowlens.quic.
var (
	kTLSProtocolName        = newKey("tls.protocol.name")
	kTLSProtocolVersion     = newKey("tls.protocol.version")
	kTLSCipher              = newKey("tls.cipher")
	kTLSCurve               = newKey("tls.curve")
	kFlowlensTLSClientHello = newKey("flowlens.tls_client_hello")
	kFlowlensQUIC           = newKey("flowlens.quic")
)

var tlsGroup = group{name: "tls", attributes: tlsAttributes}

// tlsAttributes appends the group's attributes of r.
func tlsAttributes(e *encoder, b []byte, r *flow.Record) []byte {
	if !r.HasTLS() {
		return b
	}
	return e.tls(b, r)
}

// tls appends the TLS attributes: the semantic conventions' names, values
// as they define them ("tls" and "1.3", IANA names), a number the tables do
// not name as "0x%04x".
func (e *encoder) tls(b []byte, r *flow.Record) []byte {
	const a = fLRAttributes
	if name, ver := tlsProtocol(r.TLSVersion); name != "" {
		b = kvText(b, a, kTLSProtocolName, name)
		b = kvText(b, a, kTLSProtocolVersion, ver)
	} else if r.TLSVersion != 0 {
		b = kvBytes(b, a, kTLSProtocolVersion, appendHex16(e.tmp[:0], r.TLSVersion))
	}
	if r.TLSCipherSuite != 0 {
		b = e.kvTLSName(b, kTLSCipher, r.TLSCipherSuite, flow.TLSCipherSuiteName)
	}
	if r.TLSGroup != 0 {
		b = e.kvTLSName(b, kTLSCurve, r.TLSGroup, flow.TLSGroupName)
	}
	if r.TLSClientHello {
		b = kvBool(b, a, kFlowlensTLSClientHello, true)
	}
	if r.QUIC {
		b = kvBool(b, a, kFlowlensQUIC, true)
	}
	return b
}

func (e *encoder) kvTLSName(b []byte, key attrKey, v uint16, name func(uint16) (string, bool)) []byte {
	if n, ok := name(v); ok {
		return kvText(b, fLRAttributes, key, n)
	}
	e.tmp = appendHex16(e.tmp[:0], v)
	return kvBytes(b, fLRAttributes, key, e.tmp)
}

// tlsProtocol splits a TLS version number into the semantic conventions'
// tls.protocol.name and tls.protocol.version.
func tlsProtocol(v uint16) (name, version string) {
	switch v {
	case 0x0300:
		return "ssl", "3.0"
	case 0x0301:
		return "tls", "1.0"
	case 0x0302:
		return "tls", "1.1"
	case 0x0303:
		return "tls", "1.2"
	case 0x0304:
		return "tls", "1.3"
	}
	return "", ""
}
