// Package receivertest runs a real collector on loopback for tests: a
// Recorder keeps every flow it receives, and NewPKI makes a throwaway CA
// with server and client certificates for TLS and mTLS tests.
package receivertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// Recorder is a running collector that records what it receives.
type Recorder struct {
	Server *receiver.Server
	Addr   string // 127.0.0.1:port

	t       testing.TB
	served  chan error
	mu      sync.Mutex
	flows   []*flowv1.Flow
	batches int
	peers   map[string]int // CommonName -> batches
	stopped bool
}

// Start runs a collector on 127.0.0.1 on a free port; it is shut down when
// the test ends.
func Start(t testing.TB, opts receiver.Options) *Recorder {
	return StartAt(t, "127.0.0.1:0", opts)
}

// StartAt runs a collector on addr (to restart one on the port another used).
func StartAt(t testing.TB, addr string, opts receiver.Options) *Recorder {
	t.Helper()
	var lis net.Listener
	var err error
	// The port may still be held for a moment by a collector just stopped.
	for deadline := time.Now().Add(5 * time.Second); ; {
		lis, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	r := &Recorder{Addr: lis.Addr().String(), t: t, served: make(chan error, 1), peers: map[string]int{}}
	srv, err := receiver.New(r.handle, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Server = srv
	go func() { r.served <- srv.Serve(lis) }()
	t.Cleanup(r.Stop)
	return r
}

func (r *Recorder) handle(_ context.Context, b *receiver.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flows = append(r.flows, b.Flows...)
	r.batches++
	r.peers[b.Peer.CommonName]++
	return nil
}

// Stop shuts the collector down (gracefully, 5 s at most). Idempotent.
func (r *Recorder) Stop() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Server.Shutdown(ctx); err != nil {
		r.t.Errorf("collector shutdown: %v", err)
	}
	if err := <-r.served; err != nil {
		r.t.Errorf("collector serve: %v", err)
	}
}

// Flows returns a copy of the flows received so far.
func (r *Recorder) Flows() []*flowv1.Flow {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*flowv1.Flow(nil), r.flows...)
}

// Count is the number of flows received so far.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.flows)
}

// Batches is the number of messages received so far.
func (r *Recorder) Batches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batches
}

// Peers returns the batches received per client certificate CommonName
// ("" for agents without one).
func (r *Recorder) Peers() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.peers))
	for k, v := range r.peers {
		out[k] = v
	}
	return out
}

// WaitCount waits until at least n flows have arrived, failing the test
// after timeout.
func (r *Recorder) WaitCount(n int, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for r.Count() < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("collector has %d flows after %v, want %d", r.Count(), timeout, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Sums adds up the counters of flows.
func Sums(flows []*flowv1.Flow) (bytes, packets uint64) {
	for _, f := range flows {
		bytes += f.Bytes
		packets += f.Packets
	}
	return bytes, packets
}

// PKI is a test CA and certificates it issued, as PEM files in Dir.
type PKI struct {
	Dir                   string
	CA                    string // CA certificate
	ServerCert, ServerKey string // for 127.0.0.1, ::1 and localhost
	ClientCert, ClientKey string // CommonName ClientCN
	ClientCN              string
	OtherCA               string // a second, unrelated CA certificate
	OtherCert, OtherKey   string // client certificate issued by OtherCA
	caCert                *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

// NewPKI generates a CA, a server certificate and a client certificate
// (CommonName "agent-1"), plus a client certificate from an unrelated CA,
// in a temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p, err := WritePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WritePKI is NewPKI into dir, for programs that are not tests (the
// benchmarks' TLS runs).
func WritePKI(dir string) (*PKI, error) {
	p := &PKI{Dir: dir, ClientCN: "agent-1"}
	var err error
	if p.caCert, p.caKey, p.CA, err = p.newCA("flowlens test CA", "ca"); err != nil {
		return nil, err
	}
	if p.ServerCert, p.ServerKey, err = p.issue(p.caCert, p.caKey, "collector", "server", true); err != nil {
		return nil, err
	}
	if p.ClientCert, p.ClientKey, err = p.issue(p.caCert, p.caKey, p.ClientCN, "client", false); err != nil {
		return nil, err
	}
	otherCert, otherKey, otherFile, err := p.newCA("unrelated CA", "other-ca")
	if err != nil {
		return nil, err
	}
	p.OtherCA = otherFile
	if p.OtherCert, p.OtherKey, err = p.issue(otherCert, otherKey, "intruder", "other-client", false); err != nil {
		return nil, err
	}
	return p, nil
}

var serial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(serial.Add(1)) }

func (p *PKI) newCA(cn, name string) (*x509.Certificate, *ecdsa.PrivateKey, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, "", err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, "", err
	}
	file := filepath.Join(p.Dir, name+".crt")
	return cert, key, file, writePEM(file, "CERTIFICATE", der)
}

func (p *PKI) issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn, name string, server bool) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".crt"), filepath.Join(p.Dir, name+".key")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "EC PRIVATE KEY", keyDER)
}

func writePEM(file, typ string, der []byte) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
