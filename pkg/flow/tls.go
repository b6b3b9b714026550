package flow

import "strconv"

// TLSFields are the "tls" feature's part of a Record: the handshake seen on
// the flow. A ServerHello gives the flow it travels on (server -> client)
// the negotiated version, cipher suite and key-share group; a ClientHello
// marks the client's flow; QUIC marks a UDP flow that carried a QUIC
// long-header packet.
type TLSFields struct {
	TLSVersion     uint16 // 0x0301 TLS 1.0 ... 0x0304 TLS 1.3; 0: no ServerHello seen
	TLSCipherSuite uint16 // IANA cipher suite number, e.g. 0x1301
	TLSGroup       uint16 // IANA named group of the server's key share, e.g. 0x001d (x25519); 0: none (TLS 1.2 without key_share)
	TLSClientHello bool   // a ClientHello was seen on this flow
	QUIC           bool
}

var tlsGroup = Group{
	Name:       "tls",
	JSONFields: []string{"tls_version", "tls_cipher_suite", "tls_group", "tls_client_hello", "quic"},
	Sample: func(r *Record) {
		r.TLSFields = TLSFields{TLSVersion: 0x0304, TLSCipherSuite: 0x1301, TLSGroup: 0x001d, TLSClientHello: true, QUIC: true}
	},
	Has: func(r *Record) bool { return r.HasTLS() },
}

// HasTLS reports whether the record carries any TLS field (feature "tls"):
// a ServerHello's version, cipher suite or group, a ClientHello, or QUIC.
func (g *TLSFields) HasTLS() bool {
	return g.TLSVersion != 0 || g.TLSCipherSuite != 0 || g.TLSGroup != 0 || g.TLSClientHello || g.QUIC
}

// appendJSON appends the tls_* fields and quic of a flow with a handshake
// or QUIC seen only: names, "" for a value not seen, "0x%04x" for one the
// tables do not name.
func (g *TLSFields) appendJSON(b []byte) []byte {
	if !g.HasTLS() {
		return b
	}
	b = append(b, `,"tls_version":`...)
	b = appendTLSName(b, g.TLSVersion, TLSVersionName)
	b = append(b, `,"tls_cipher_suite":`...)
	b = appendTLSName(b, g.TLSCipherSuite, TLSCipherSuiteName)
	b = append(b, `,"tls_group":`...)
	b = appendTLSName(b, g.TLSGroup, TLSGroupName)
	b = append(b, `,"tls_client_hello":`...)
	b = strconv.AppendBool(b, g.TLSClientHello)
	b = append(b, `,"quic":`...)
	return strconv.AppendBool(b, g.QUIC)
}

// Names of the TLS handshake values of a Record (feature "tls"): the JSON
// output writes them (tls_version, tls_cipher_suite, tls_group), the
// protobuf carries the numbers. The tables are fixed, so the names are a
// bounded set (the collector uses them as metric labels); a value not in
// them is written as its number, "0x%04x".

// TLSVersionName is the name of a TLS protocol version number ("TLS 1.3"
// for 0x0304, "SSL 3.0" for 0x0300), and false when it is none of SSL 3.0
// and TLS 1.0 to 1.3.
func TLSVersionName(v uint16) (string, bool) {
	switch v {
	case 0x0300:
		return "SSL 3.0", true
	case 0x0301:
		return "TLS 1.0", true
	case 0x0302:
		return "TLS 1.1", true
	case 0x0303:
		return "TLS 1.2", true
	case 0x0304:
		return "TLS 1.3", true
	}
	return "", false
}

// TLSCipherSuiteName is the IANA name of a cipher suite number
// ("TLS_AES_128_GCM_SHA256" for 0x1301), and false when the table does not
// have it. The table covers the TLS 1.3 suites, and for TLS 1.2 and before
// the RSA, DHE-RSA, ECDHE-RSA and ECDHE-ECDSA suites with AES (CBC, GCM,
// CCM), ChaCha20-Poly1305, Camellia, 3DES, RC4 and NULL encryption (the
// weak ones are what one looks for).
func TLSCipherSuiteName(id uint16) (string, bool) {
	n, ok := cipherSuiteNames[id]
	return n, ok
}

// TLSGroupName is the IANA name of a named group ("x25519" for 0x001d,
// "X25519MLKEM768" for 0x11ec), and false when the table does not have it.
func TLSGroupName(id uint16) (string, bool) {
	n, ok := groupNames[id]
	return n, ok
}

// TLSCipherSuiteNames and TLSGroupNames list every name the tables hold
// (a copy, in no particular order): the bound of a label made of them.
func TLSCipherSuiteNames() []string { return values(cipherSuiteNames) }

// TLSGroupNames: see TLSCipherSuiteNames.
func TLSGroupNames() []string { return values(groupNames) }

func values(m map[uint16]string) []string {
	out := make([]string, 0, len(m))
	for _, n := range m {
		out = append(out, n)
	}
	return out
}

// cipherSuiteNames: IANA TLS Cipher Suites registry names.
var cipherSuiteNames = map[uint16]string{
	// TLS 1.3 (RFC 8446)
	0x1301: "TLS_AES_128_GCM_SHA256",
	0x1302: "TLS_AES_256_GCM_SHA384",
	0x1303: "TLS_CHACHA20_POLY1305_SHA256",
	0x1304: "TLS_AES_128_CCM_SHA256",
	0x1305: "TLS_AES_128_CCM_8_SHA256",

	// RSA key exchange
	0x0001: "TLS_RSA_WITH_NULL_MD5",
	0x0002: "TLS_RSA_WITH_NULL_SHA",
	0x003b: "TLS_RSA_WITH_NULL_SHA256",
	0x0004: "TLS_RSA_WITH_RC4_128_MD5",
	0x0005: "TLS_RSA_WITH_RC4_128_SHA",
	0x000a: "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
	0x002f: "TLS_RSA_WITH_AES_128_CBC_SHA",
	0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
	0x003c: "TLS_RSA_WITH_AES_128_CBC_SHA256",
	0x003d: "TLS_RSA_WITH_AES_256_CBC_SHA256",
	0x0041: "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA",
	0x0084: "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA",
	0x009c: "TLS_RSA_WITH_AES_128_GCM_SHA256",
	0x009d: "TLS_RSA_WITH_AES_256_GCM_SHA384",
	0xc09c: "TLS_RSA_WITH_AES_128_CCM",
	0xc09d: "TLS_RSA_WITH_AES_256_CCM",

	// DHE-RSA
	0x0016: "TLS_DHE_RSA_WITH_3DES_EDE_CBC_SHA",
	0x0033: "TLS_DHE_RSA_WITH_AES_128_CBC_SHA",
	0x0039: "TLS_DHE_RSA_WITH_AES_256_CBC_SHA",
	0x0045: "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA",
	0x0088: "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA",
	0x0067: "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256",
	0x006b: "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256",
	0x009e: "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256",
	0x009f: "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384",
	0xc09e: "TLS_DHE_RSA_WITH_AES_128_CCM",
	0xc09f: "TLS_DHE_RSA_WITH_AES_256_CCM",
	0xccaa: "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256",

	// ECDHE-ECDSA
	0xc006: "TLS_ECDHE_ECDSA_WITH_NULL_SHA",
	0xc007: "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
	0xc008: "TLS_ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA",
	0xc009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
	0xc00a: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
	0xc023: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
	0xc024: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384",
	0xc02b: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	0xc02c: "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	0xc0ac: "TLS_ECDHE_ECDSA_WITH_AES_128_CCM",
	0xc0ad: "TLS_ECDHE_ECDSA_WITH_AES_256_CCM",
	0xc0ae: "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8",
	0xc0af: "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8",
	0xcca9: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",

	// ECDHE-RSA
	0xc010: "TLS_ECDHE_RSA_WITH_NULL_SHA",
	0xc011: "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
	0xc012: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
	0xc013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
	0xc014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
	0xc027: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
	0xc028: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384",
	0xc02f: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	0xc030: "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	0xcca8: "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}

// groupNames: IANA TLS Supported Groups registry names.
var groupNames = map[uint16]string{
	0x0017: "secp256r1",
	0x0018: "secp384r1",
	0x0019: "secp521r1",
	0x001a: "brainpoolP256r1",
	0x001b: "brainpoolP384r1",
	0x001c: "brainpoolP512r1",
	0x001d: "x25519",
	0x001e: "x448",
	0x0100: "ffdhe2048",
	0x0101: "ffdhe3072",
	0x0102: "ffdhe4096",
	0x0103: "ffdhe6144",
	0x0104: "ffdhe8192",
	0x0200: "MLKEM512",
	0x0201: "MLKEM768",
	0x0202: "MLKEM1024",
	0x11eb: "SecP256r1MLKEM768",
	0x11ec: "X25519MLKEM768",
	0x11ed: "SecP384r1MLKEM1024",
	0x6399: "X25519Kyber768Draft00",
}

// appendTLSName appends the JSON string of a TLS value: "" for 0 (not
// seen), its name when known, else "0x%04x" (without fmt: no allocation).
func appendTLSName(b []byte, v uint16, name func(uint16) (string, bool)) []byte {
	b = append(b, '"')
	if v != 0 {
		if n, ok := name(v); ok {
			b = append(b, n...)
		} else {
			b = appendHex16(b, v)
		}
	}
	return append(b, '"')
}

// appendHex16 appends v as fmt's "0x%04x".
func appendHex16(b []byte, v uint16) []byte {
	const digits = "0123456789abcdef"
	return append(b, '0', 'x', digits[v>>12], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf])
}
