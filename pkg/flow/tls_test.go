package flow_test

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// The tables agree with Go's crypto/tls on every suite and TLS version it
// names (IANA names), and cover what the contract names.
func TestTLSNamesAgreeWithCryptoTLS(t *testing.T) {
	suites := append(tls.CipherSuites(), tls.InsecureCipherSuites()...)
	if len(suites) < 20 {
		t.Fatalf("crypto/tls lists %d suites", len(suites))
	}
	for _, s := range suites {
		got, ok := flow.TLSCipherSuiteName(s.ID)
		if !ok || got != s.Name {
			t.Errorf("suite 0x%04x: %q %v, crypto/tls: %q", s.ID, got, ok, s.Name)
		}
	}
	// (SSL 3.0 is "SSL 3.0" by the contract; crypto/tls says "SSLv3".)
	if got, ok := flow.TLSVersionName(tls.VersionSSL30); !ok || got != "SSL 3.0" {
		t.Errorf("SSL 3.0: %q %v", got, ok)
	}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11, tls.VersionTLS12, tls.VersionTLS13} {
		got, ok := flow.TLSVersionName(v)
		if !ok || got != tls.VersionName(v) {
			t.Errorf("version 0x%04x: %q %v, crypto/tls: %q", v, got, ok, tls.VersionName(v))
		}
	}
	for _, c := range []struct {
		id   uint16
		want string
	}{
		{0x1303, "TLS_CHACHA20_POLY1305_SHA256"}, {0x1304, "TLS_AES_128_CCM_SHA256"},
		{0xc030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}, {0xc02b, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
		{0xcca9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"}, {0xc028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384"},
		{0x009f, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384"}, {0x003d, "TLS_RSA_WITH_AES_256_CBC_SHA256"},
	} {
		if got, ok := flow.TLSCipherSuiteName(c.id); !ok || got != c.want {
			t.Errorf("suite 0x%04x: %q %v, want %q", c.id, got, ok, c.want)
		}
	}
	// Groups: Go's CurveID values are the IANA numbers (its names differ).
	for _, c := range []struct {
		id   tls.CurveID
		want string
	}{
		{tls.X25519, "x25519"}, {tls.CurveP256, "secp256r1"}, {tls.CurveP384, "secp384r1"},
		{tls.CurveP521, "secp521r1"}, {tls.X25519MLKEM768, "X25519MLKEM768"},
		{0x001e, "x448"}, {0x0100, "ffdhe2048"}, {0x0104, "ffdhe8192"},
	} {
		if got, ok := flow.TLSGroupName(uint16(c.id)); !ok || got != c.want {
			t.Errorf("group 0x%04x: %q %v, want %q", uint16(c.id), got, ok, c.want)
		}
	}
	for _, v := range []uint16{0, 0x01ff, 0x0305, 0xfeff} {
		if n, ok := flow.TLSVersionName(v); ok {
			t.Errorf("version 0x%04x named %q", v, n)
		}
	}
	if _, ok := flow.TLSCipherSuiteName(0); ok {
		t.Error("suite 0 named")
	}
	if _, ok := flow.TLSGroupName(0); ok {
		t.Error("group 0 named")
	}
}

// Names are distinct (a label value means one number) and the lists are
// the tables.
func TestTLSNameTables(t *testing.T) {
	for what, names := range map[string][]string{"suite": flow.TLSCipherSuiteNames(), "group": flow.TLSGroupNames()} {
		seen := map[string]bool{}
		for _, n := range names {
			if n == "" || seen[n] {
				t.Errorf("%s name %q empty or repeated", what, n)
			}
			seen[n] = true
		}
	}
	if n := len(flow.TLSCipherSuiteNames()); n < 40 || n > 100 {
		t.Errorf("%d suite names", n)
	}
	// Unknown values print like fmt's 0x%04x through the JSON.
	for _, v := range []uint16{0x0001, 0x00ab, 0x0a0b, 0xfffe} {
		if _, ok := flow.TLSGroupName(v); ok {
			continue
		}
		r := flow.Record{TLSFields: flow.TLSFields{TLSGroup: v}}
		want := fmt.Sprintf(`"tls_group":"0x%04x"`, v)
		if js := string(r.AppendJSON(nil)); !strings.Contains(js, want) {
			t.Errorf("group 0x%04x: %s lacks %s", v, js, want)
		}
	}
}
