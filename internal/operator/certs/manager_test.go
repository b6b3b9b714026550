package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// The Manager against a real kube-apiserver (envtest), with a clock the
// test moves: the objects it creates, what a TLS client with the published
// bundle accepts, and each renewal when due.

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func setup(t *testing.T, ns string) (client.Client, *Manager, *clock) {
	t.Helper()
	env := envtest.StartT(t, envtest.Options{})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := &Manager{Client: c, Reader: c, FieldOwner: "test", Now: clk.now,
		CALifetime: 300 * 24 * time.Hour, LeafLifetime: 30 * 24 * time.Hour, Propagation: 10 * time.Minute}
	return c, m, clk
}

type state struct {
	ca, leaf   *x509.Certificate
	bundle     []*x509.Certificate
	leafBundle []byte
	leafPair   tls.Certificate
}

func read(t *testing.T, c client.Client, ns, caSecret string) state {
	t.Helper()
	ctx := context.Background()
	var st state
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: caSecret}, s); err != nil {
		t.Fatal(err)
	}
	kp, err := parseKeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("CA Secret: %v", err)
	}
	st.ca = kp.cert
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: CAName}, cm); err != nil {
		t.Fatal(err)
	}
	if st.bundle, err = parseCerts([]byte(cm.Data[BundleKey])); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: CollectorTLSName}, s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s type %q, want %q", CollectorTLSName, s.Type, corev1.SecretTypeTLS)
	}
	if st.leafPair, err = tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
		t.Fatalf("serving Secret: %v", err)
	}
	st.leaf = st.leafPair.Leaf
	st.leafBundle = s.Data[BundleKey]
	if string(st.leafBundle) != cm.Data[BundleKey] {
		t.Errorf("the serving Secret's ca.crt differs from the ConfigMap's")
	}
	return st
}

// handshake runs a real TLS handshake: a server with the serving
// certificate, a client trusting bundle and asking for serverName, at now.
func handshake(t *testing.T, st state, serverName string, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range st.bundle {
		pool.AddCert(c)
	}
	srv, cli := tlsPipe()
	go func() {
		s := tls.Server(srv, &tls.Config{Certificates: []tls.Certificate{st.leafPair}, Time: func() time.Time { return now }})
		_ = s.Handshake()
		s.Close()
	}()
	c := tls.Client(cli, &tls.Config{RootCAs: pool, ServerName: serverName, Time: func() time.Time { return now }})
	defer c.Close()
	return c.Handshake()
}

var names = ServiceDNSNames(CollectorService, "flowlens")

// scraper is the client certificate's Leaf, as the operator asks for it.
var scraper = Leaf{Name: MetricsClientName, DNSNames: []string{MetricsScraper}, Client: true}

// readClient reads the client certificate's Secret.
func readClient(t *testing.T, c client.Client, ns string) tls.Certificate {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: MetricsClientName}, s); err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("Secret %s type %q, want %q", MetricsClientName, s.Type, corev1.SecretTypeTLS)
	}
	pair, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("client Secret: %v", err)
	}
	if l := pair.Leaf; l.Subject.CommonName != MetricsScraper || len(l.DNSNames) != 1 || l.DNSNames[0] != MetricsScraper ||
		len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("client certificate CN %q, DNS names %v, extended key usages %v; want %s and ClientAuth alone",
			l.Subject.CommonName, l.DNSNames, l.ExtKeyUsage, MetricsScraper)
	}
	return pair
}

// clientHandshake runs a real mutual TLS handshake as a metrics endpoint
// does (VerifyClientCertIfGiven, client CAs: the serving Secret's bundle)
// with client presenting its certificate, at now: the server's error.
func clientHandshake(t *testing.T, st state, client tls.Certificate, now time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(st.leafBundle) {
		t.Fatal("no certificate in the serving Secret's ca.crt")
	}
	roots := x509.NewCertPool()
	for _, c := range st.bundle {
		roots.AddCert(c)
	}
	// Loopback TCP, not net.Pipe: the server's last writes (an alert, its
	// session tickets) must not wait for a client that stopped reading.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		srv, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer srv.Close()
		done <- tls.Server(srv, &tls.Config{Certificates: []tls.Certificate{st.leafPair}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool, Time: func() time.Time { return now }}).Handshake()
	}()
	cli, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	c := tls.Client(cli, &tls.Config{RootCAs: roots, ServerName: "flowlens-collector.flowlens.svc", Certificates: []tls.Certificate{client}, Time: func() time.Time { return now }})
	_ = c.Handshake()
	return <-done
}

func TestManagerOwnCA(t *testing.T) {
	c, m, clk := setup(t, "flowlens")
	ctx := context.Background()
	target := Target{Namespace: "flowlens", Leaves: []Leaf{{Name: CollectorTLSName, DNSNames: names}, scraper}, Labels: map[string]string{"app.kubernetes.io/part-of": "flowlens"}}

	next, err := m.Ensure(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	st := read(t, c, "flowlens", CAName)
	cl := readClient(t, c, "flowlens")
	if !signedBy(cl.Leaf, st.ca) {
		t.Fatal("the client certificate is not the CA's")
	}
	if err := clientHandshake(t, st, cl, clk.t); err != nil {
		t.Errorf("mutual TLS with the client certificate: %v", err)
	}
	// A serving certificate of the same CA (ServerAuth alone) is no
	// client identity.
	if err := clientHandshake(t, st, st.leafPair, clk.t); err == nil || !strings.Contains(err.Error(), "incompatible key usage") {
		t.Errorf("mutual TLS with the serving certificate as client: %v, want an incompatible key usage error", err)
	}
	if !st.ca.IsCA || len(st.bundle) != 1 || !st.bundle[0].Equal(st.ca) {
		t.Fatalf("bundle %d certificates, want the CA alone", len(st.bundle))
	}
	if !sameNames(st.leaf, names) || !signedBy(st.leaf, st.ca) {
		t.Fatalf("serving certificate names %v, signed by the CA %v", st.leaf.DNSNames, signedBy(st.leaf, st.ca))
	}
	if got, want := st.leaf.NotAfter.Sub(clk.t), 30*24*time.Hour; got != want {
		t.Errorf("serving certificate lives %v, want %v", got, want)
	}
	for _, n := range []string{"flowlens-collector.flowlens.svc", "flowlens-collector.flowlens.svc.cluster.local"} {
		if err := handshake(t, st, n, clk.t); err != nil {
			t.Errorf("handshake as %s: %v", n, err)
		}
	}
	if err := handshake(t, st, "flowlens-collector.other.svc", clk.t); err == nil {
		t.Error("handshake as flowlens-collector.other.svc succeeded")
	}
	// First check: the end of the new CA's propagation (nothing to do).
	if want := clk.t.Add(10 * time.Minute); !next.Equal(want) {
		t.Errorf("next check %v, want %v", next, want)
	}

	// Nothing is due: nothing changes.
	clk.t = clk.t.Add(24 * time.Hour)
	if next, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	if st2 := read(t, c, "flowlens", CAName); !st2.leaf.Equal(st.leaf) || !st2.ca.Equal(st.ca) {
		t.Fatal("a certificate changed before it was due")
	}
	if want := clk.t.Add(time.Hour); !next.Equal(want) {
		t.Errorf("next check %v, want the hourly %v", next, want)
	}

	// Two thirds into the serving certificate's 30 days: renewed, same CA.
	clk.t = renewAt(st.leaf).Add(time.Minute)
	if _, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	st2 := read(t, c, "flowlens", CAName)
	if st2.leaf.Equal(st.leaf) || !st2.ca.Equal(st.ca) || !signedBy(st2.leaf, st.ca) {
		t.Fatal("the serving certificate was not renewed from the same CA at two thirds of its life")
	}
	if err := handshake(t, st2, "flowlens-collector.flowlens.svc", clk.t); err != nil {
		t.Errorf("handshake after renewal: %v", err)
	}
	if cl2 := readClient(t, c, "flowlens"); cl2.Leaf.Equal(cl.Leaf) || !signedBy(cl2.Leaf, st.ca) {
		t.Fatal("the client certificate was not renewed from the same CA at two thirds of its life")
	} else if err := clientHandshake(t, st2, cl2, clk.t); err != nil {
		t.Errorf("mutual TLS after renewal: %v", err)
	}

	// Two thirds into the CA's 300 days: a new CA, published beside the
	// old one; the serving certificate stays the old CA's until the bundle
	// had Propagation to reach the clients, then the new CA's.
	clk.t = renewAt(st.ca).Add(-24 * time.Hour) // a fresh serving certificate, not due at the CA's renewal
	if _, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	stBefore := read(t, c, "flowlens", CAName)
	clk.t = renewAt(st.ca).Add(time.Minute)
	if next, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	st3 := read(t, c, "flowlens", CAName)
	if st3.ca.Equal(st.ca) {
		t.Fatal("the CA was not renewed at two thirds of its life")
	}
	if len(st3.bundle) != 2 || !st3.bundle[0].Equal(st3.ca) || !st3.bundle[1].Equal(st.ca) {
		t.Fatalf("bundle during the CA rollover: %d certificates, want the new CA then the old", len(st3.bundle))
	}
	if !st3.leaf.Equal(stBefore.leaf) {
		t.Fatal("the serving certificate was re-signed by the new CA before the bundle propagated")
	}
	if !signedBy(readClient(t, c, "flowlens").Leaf, st.ca) {
		t.Fatal("the client certificate was re-signed by the new CA before the bundle propagated")
	}
	if want := clk.t.Add(10 * time.Minute); !next.Equal(want) {
		t.Errorf("next check %v, want the end of the propagation %v", next, want)
	}
	clk.t = clk.t.Add(10 * time.Minute)
	if _, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	st4 := read(t, c, "flowlens", CAName)
	if !signedBy(st4.leaf, st3.ca) || !st4.ca.Equal(st3.ca) {
		t.Fatal("after the propagation, the serving certificate is not the new CA's")
	}
	// The client certificate follows; a server that still has the
	// rollover bundle (both CAs) accepts it.
	cl4 := readClient(t, c, "flowlens")
	if !signedBy(cl4.Leaf, st3.ca) {
		t.Fatal("after the propagation, the client certificate is not the new CA's")
	}
	if err := clientHandshake(t, state{bundle: st3.bundle, leafPair: st4.leafPair, leafBundle: st3.leafBundle}, cl4, clk.t); err != nil {
		t.Errorf("mutual TLS with the rollover bundle: %v", err)
	}
	// A client that still has only the old bundle's CA... has the new one
	// too: the bundle it read held both. The old CA leaves the bundle once
	// expired.
	if err := handshake(t, state{bundle: st3.bundle, leafPair: st4.leafPair}, "flowlens-collector.flowlens.svc", clk.t); err != nil {
		t.Errorf("handshake with the rollover bundle: %v", err)
	}
	clk.t = st.ca.NotAfter.Add(time.Minute)
	if _, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	if st5 := read(t, c, "flowlens", CAName); len(st5.bundle) != 1 || !st5.bundle[0].Equal(st3.ca) {
		t.Fatalf("bundle after the old CA expired: %d certificates, want the new CA alone", len(st5.bundle))
	}

	// A serving certificate deleted by hand, or with other names, is
	// issued again.
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "flowlens", Name: CollectorTLSName}}); err != nil {
		t.Fatal(err)
	}
	if _, err = m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	if st6 := read(t, c, "flowlens", CAName); !signedBy(st6.leaf, st3.ca) {
		t.Fatal("the deleted serving certificate was not issued again")
	}
}

func TestManagerUserCA(t *testing.T) {
	c, m, clk := setup(t, "flowlens")
	ctx := context.Background()
	user, err := newCA("my-ca", clk.t, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	put := func(kp *keyPair) {
		t.Helper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "flowlens", Name: "my-ca"}}
		_, err := ctrlCreateOrUpdate(ctx, c, s, func() {
			s.Type = corev1.SecretTypeTLS
			s.Data = map[string][]byte{"tls.crt": kp.certPEM, "tls.key": kp.keyPEM}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(user)
	target := Target{Namespace: "flowlens", UserCA: "my-ca", Leaves: []Leaf{{Name: CollectorTLSName, DNSNames: names}, scraper}}
	if _, err := m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	st := read(t, c, "flowlens", "my-ca")
	if !st.ca.Equal(user.cert) || len(st.bundle) != 1 || !st.bundle[0].Equal(user.cert) || !signedBy(st.leaf, user.cert) {
		t.Fatal("the serving certificate or the bundle is not the user's CA's")
	}
	if cl := readClient(t, c, "flowlens"); !signedBy(cl.Leaf, user.cert) {
		t.Fatal("the client certificate is not the user's CA's")
	} else if err := clientHandshake(t, st, cl, clk.t); err != nil {
		t.Errorf("mutual TLS with the client certificate of the user's CA: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "flowlens", Name: CAName}, &corev1.Secret{}); err == nil {
		t.Error("the operator created a CA of its own beside the user's")
	}
	// The user's CA is never renewed by the operator, even when due.
	clk.t = user.cert.NotBefore.Add(250 * 24 * time.Hour)
	if _, err := m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	if st2 := read(t, c, "flowlens", "my-ca"); !st2.ca.Equal(user.cert) {
		t.Fatal("the operator replaced the user's CA")
	}

	// The user replaces the CA: both are published, then the serving
	// certificate follows.
	next, err := newCA("my-ca-2", clk.t, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	put(next)
	if _, err := m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	st3 := read(t, c, "flowlens", "my-ca")
	if len(st3.bundle) != 2 || !st3.bundle[0].Equal(next.cert) || !st3.bundle[1].Equal(user.cert) {
		t.Fatalf("bundle after the user's CA changed: %d certificates, want new then old", len(st3.bundle))
	}
	clk.t = clk.t.Add(11 * time.Minute)
	if _, err := m.Ensure(ctx, target); err != nil {
		t.Fatal(err)
	}
	if st4 := read(t, c, "flowlens", "my-ca"); !signedBy(st4.leaf, next.cert) {
		t.Fatal("the serving certificate is not the new user CA's after the propagation")
	}
	if !signedBy(readClient(t, c, "flowlens").Leaf, next.cert) {
		t.Fatal("the client certificate is not the new user CA's after the propagation")
	}

	// A Secret that is not a CA is refused, naming it.
	leaf, err := newLeaf(next, "x", []string{"x"}, x509.ExtKeyUsageServerAuth, clk.t, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	put(leaf)
	_, err = m.Ensure(ctx, target)
	if want := "the CA Secret flowlens/my-ca: its tls.crt is not a CA certificate"; err == nil || err.Error() != want {
		t.Errorf("a non-CA Secret: error %v, want %q", err, want)
	}
}

func tlsPipe() (net.Conn, net.Conn) { return net.Pipe() }

func ctrlCreateOrUpdate(ctx context.Context, c client.Client, s *corev1.Secret, f func()) (controllerutil.OperationResult, error) {
	return controllerutil.CreateOrUpdate(ctx, c, s, func() error { f(); return nil })
}
