package tls_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// TLS handshakes between openssl's s_client and s_server in two
// namespaces, with the version, cipher suite and group forced: the server's
// flow carries what was negotiated, the client's flow its ClientHello. And a
// QUIC long-header datagram marks its UDP flow.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	key, cert := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem")
	if out, err := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
		"-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=flowlens-test", "-days", "1").CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name                   string
		client                 []string
		port                   int
		protocol, sslCipher    string // what s_client must report
		version, cipher, group string // what the flow must carry
	}{
		{"TLS 1.3", []string{"-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384", "-groups", "P-256"}, 4433,
			"TLSv1.3", "TLS_AES_256_GCM_SHA384", "TLS 1.3", "TLS_AES_256_GCM_SHA384", "secp256r1"},
		{"TLS 1.3 x25519", []string{"-tls1_3", "-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256", "-groups", "X25519"}, 4434,
			"TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256", "TLS 1.3", "TLS_CHACHA20_POLY1305_SHA256", "x25519"},
		// TLS 1.2 has no key_share: the group is in the ServerKeyExchange, not read.
		{"TLS 1.2", []string{"-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"}, 4435,
			"TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256", "TLS 1.2", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := agenttest.NewPair(t)
			h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tls")
			var srv *exec.Cmd
			if err := p.B.Do(func() error {
				srv = exec.Command("openssl", "s_server", "-accept", fmt.Sprintf("%s:%d", p.IPB, tc.port), "-cert", cert, "-key", key, "-naccept", "1", "-quiet")
				return srv.Start()
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
			var out []byte
			var err error
			for range 50 { // until the server listens
				out, err = netlab.RunIn(p.A, "openssl", append([]string{"s_client", "-connect", fmt.Sprintf("%s:%d", p.IPB, tc.port)}, tc.client...)...)
				if err == nil && strings.Contains(string(out), tc.protocol) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !strings.Contains(string(out), tc.protocol) || !strings.Contains(string(out), tc.sslCipher) {
				t.Fatalf("s_client did not report %s %s: %v\n%s", tc.protocol, tc.sslCipher, err, out)
			}
			flows := h.Stop()
			var server, client []agenttest.JSONFlow
			for _, f := range flows {
				if f.Proto != 6 {
					continue
				}
				if f.SrcAddr == p.IPB && f.SrcPort == uint16(tc.port) {
					server = append(server, f)
				}
				if f.DstAddr == p.IPB && f.DstPort == uint16(tc.port) {
					client = append(client, f)
				}
			}
			if len(server) == 0 || len(client) == 0 {
				t.Fatalf("flows: %d server -> client, %d client -> server", len(server), len(client))
			}
			var got agenttest.JSONFlow
			for _, f := range server {
				if f.TLSVersion != "" {
					got = f
				}
			}
			if got.TLSVersion != tc.version || got.TLSCipherSuite != tc.cipher || got.TLSGroup != tc.group {
				t.Errorf("server flow: %q %q %q, want %q %q %q", got.TLSVersion, got.TLSCipherSuite, got.TLSGroup, tc.version, tc.cipher, tc.group)
			}
			hello := false
			for _, f := range client {
				hello = hello || f.TLSClientHello
				if f.TLSVersion != "" {
					t.Errorf("client flow carries a ServerHello's version %q", f.TLSVersion)
				}
			}
			if !hello {
				t.Errorf("client flow: no ClientHello")
			}
		})
	}
	t.Run("QUIC", func(t *testing.T) {
		p := agenttest.NewPair(t)
		agenttest.MustListen(t, p.B, p.IPB+":443")
		agenttest.MustListen(t, p.B, p.IPB+":8443")
		h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--features=tls")
		// A QUIC v1 Initial's first bytes: long header, fixed bit, type 0;
		// version 1; then anything.
		initial := append([]byte{0xc3, 0, 0, 0, 1}, make([]byte, 40)...)
		if err := netlab.UDPSend(p.A, p.IPA+":5000", p.IPB+":443", initial, 3); err != nil {
			t.Fatal(err)
		}
		other := append([]byte{0xc3, 0x12, 0x34, 0x56, 0x78}, make([]byte, 40)...) // no QUIC version
		if err := netlab.UDPSend(p.A, p.IPA+":5001", p.IPB+":8443", other, 3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		flows := h.Stop()
		for _, f := range flows {
			if f.Proto != 17 {
				continue
			}
			if want := f.DstPort == 443; f.QUIC != want {
				t.Errorf("flow to port %d: quic %v, want %v", f.DstPort, f.QUIC, want)
			}
		}
	})
}
