package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/shared/httpserve"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// certManagerAssets is the directory of cert-manager's controllers
// (certmanager) and CRDs (crds/) that `make cert-manager-assets` builds:
// $FLOWLENS_CERT_MANAGER, else $FLOWLENS_CACHE/cert-manager/<the version
// of hack/certmanager/go.mod>. missing says why not and how to get it.
func certManagerAssets() (dir string, missing error) {
	if dir = os.Getenv("FLOWLENS_CERT_MANAGER"); dir == "" {
		root, err := testkit.ModuleRoot()
		if err != nil {
			return "", err
		}
		v, err := testkit.ToolVersion(filepath.Join(root, "hack", "certmanager", "go.mod"), "github.com/cert-manager/cert-manager")
		if err != nil {
			return "", err
		}
		base, err := testkit.CacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(base, "cert-manager", v)
	}
	for _, f := range []string{"certmanager", "crds/cert-manager.io_certificates.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("no %s in %s: run `make cert-manager-assets` (about 3 minutes cold) or set FLOWLENS_CERT_MANAGER", f, dir)
		}
	}
	return dir, nil
}

// TestCertManagerIssues: spec.tls.certManager with real cert-manager.
// cert-manager's certificate controllers (hack/certmanager) run against a
// kube-apiserver of their own with cert-manager's CRDs, with a CA Issuer
// whose CA a SelfSigned Issuer issued; the reconciler, on a FlowCollector
// whose issuerRef names that Issuer, applies the Certificates, and
// cert-manager issues the three Secrets: the collector's and the metrics
// endpoints' serving certificates (their DNS names, ServerAuth alone) and
// the scrape identity (ClientAuth alone), all of the Issuer's CA, which the
// operator publishes in the bundle ConfigMap. A TLS handshake with the
// collector's certificate verifies against that bundle, and a metrics
// server with the operator's default web configuration and cert-manager's
// Secret serves /metrics to the scrape identity and 403 to a client
// without it.
func TestCertManagerIssues(t *testing.T) {
	dir, missing := certManagerAssets()
	testkit.Need(t, "cert-manager's controllers", missing)
	env := envtest.StartT(t, envtest.Options{CRDs: []string{filepath.Join("config", "crd", "bases"), filepath.Join(dir, "crds")}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// cert-manager.
	cm := exec.Command(filepath.Join(dir, "certmanager"), "--kubeconfig", writeKubeconfig(t, env.Config), "--cluster-resource-namespace", "default")
	cmLog := &testkit.SyncBuffer{}
	cm.Stdout, cm.Stderr = cmLog, cmLog
	if err := testkit.StartOwned(cm); err != nil {
		t.Fatal(err)
	}
	cmDone := make(chan error, 1)
	go func() { cmDone <- cm.Wait() }()
	t.Cleanup(func() {
		cm.Process.Signal(os.Interrupt)
		select {
		case <-cmDone:
		case <-time.After(10 * time.Second):
			cm.Process.Kill()
			<-cmDone
		}
		if t.Failed() {
			t.Logf("cert-manager log:\n%s", cmLog.String())
		}
	})

	// The operator's reconciler, in a manager of its own on this API
	// server (the suite's manager runs the same controller name).
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     scheme,
		Cache:      cache.Options{ByObject: CacheByObject()},
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &FlowCollectorReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), DefaultImage: testAgentImage, DefaultCollectorImage: testCollectorImage}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mgrCtx, stopMgr := context.WithCancel(context.Background())
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stopMgr()
		if err := <-mgrDone; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// A CA Issuer, its CA issued by a SelfSigned Issuer.
	const ns = "fl-cm"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	issuerRef := map[string]any{"name": "selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
	for _, o := range []*unstructured.Unstructured{
		cmObject("Issuer", ns, "selfsigned", map[string]any{"selfSigned": map[string]any{}}),
		cmObject("Certificate", ns, "test-ca", map[string]any{
			"isCA": true, "commonName": "flowlens test CA", "secretName": "test-ca",
			"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)}, "issuerRef": issuerRef,
		}),
		cmObject("Issuer", ns, "ca-issuer", map[string]any{"ca": map[string]any{"secretName": "test-ca"}}),
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	fc := newCollector(ns)
	fc.Spec.TLS.CertManager = &v1alpha1.CertManagerTLS{IssuerRef: v1alpha1.CertManagerIssuerRef{Name: "ca-issuer"}}
	if err := c.Create(ctx, fc); err != nil {
		t.Fatal(err)
	}

	// The three Certificates Ready, their Secrets written.
	want := []struct {
		secret string
		cn     string
		names  []string
		usage  x509.ExtKeyUsage
	}{
		{certs.CollectorTLSName, render.CollectorDNSNames(ns)[2], render.CollectorDNSNames(ns), x509.ExtKeyUsageServerAuth},
		{certs.MetricsTLSName, render.MetricsDNSNames(ns)[2], render.MetricsDNSNames(ns), x509.ExtKeyUsageServerAuth},
		{certs.MetricsClientName, certs.MetricsScraper, []string{certs.MetricsScraper}, x509.ExtKeyUsageClientAuth},
	}
	secrets := map[string]*corev1.Secret{}
	start := time.Now()
	for _, w := range want {
		eventually(t, 2*time.Minute, func() error {
			crt := &unstructured.Unstructured{}
			crt.SetAPIVersion(render.CertManagerAPIVersion)
			crt.SetKind("Certificate")
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.secret}, crt); err != nil {
				return fmt.Errorf("Certificate %s: %w", w.secret, err)
			}
			conds, _, _ := unstructured.NestedSlice(crt.Object, "status", "conditions")
			ready := false
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Ready" && m["status"] == "True" {
					ready = true
				}
			}
			if !ready {
				return fmt.Errorf("Certificate %s not Ready: %v", w.secret, conds)
			}
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: w.secret}, s); err != nil {
				return err
			}
			secrets[w.secret] = s
			return nil
		})
	}
	t.Logf("cert-manager issued %d Secrets in %v", len(secrets), time.Since(start).Round(time.Millisecond))

	caSecret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "test-ca"}, caSecret); err != nil {
		t.Fatal(err)
	}
	ca := pemCert(t, caSecret.Data[corev1.TLSCertKey])
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, w := range want {
		s := secrets[w.secret]
		leaf := pemCert(t, s.Data[corev1.TLSCertKey])
		got, wantNames := slices.Clone(leaf.DNSNames), slices.Clone(w.names)
		slices.Sort(got)
		slices.Sort(wantNames)
		if !slices.Equal(got, wantNames) || leaf.Subject.CommonName != w.cn {
			t.Errorf("%s: CN %q DNS names %v, want %q %v", w.secret, leaf.Subject.CommonName, leaf.DNSNames, w.cn, w.names)
		}
		if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{w.usage}) {
			t.Errorf("%s: ExtKeyUsage %v, want %v alone", w.secret, leaf.ExtKeyUsage, w.usage)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{w.usage}}); err != nil {
			t.Errorf("%s does not verify against the Issuer's CA: %v", w.secret, err)
		}
		if !pemCert(t, s.Data[certs.BundleKey]).Equal(ca) {
			t.Errorf("%s: ca.crt is not the Issuer's CA", w.secret)
		}
		t.Logf("%s: CN %s, %d DNS names, ExtKeyUsage %v, %s, valid %v", w.secret, leaf.Subject.CommonName, len(leaf.DNSNames),
			leaf.ExtKeyUsage, leaf.PublicKeyAlgorithm, leaf.NotAfter.Sub(leaf.NotBefore))
	}

	// The bundle the agents and `flowlens observe` trust: the Issuer's CA.
	bundle := &corev1.ConfigMap{}
	eventually(t, time.Minute, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: certs.CAName}, bundle); err != nil {
			return err
		}
		if bundle.Data[certs.BundleKey] == "" {
			return errors.New("no ca.crt in the bundle ConfigMap yet")
		}
		return nil
	})
	if !pemCert(t, []byte(bundle.Data[certs.BundleKey])).Equal(ca) {
		t.Errorf("the bundle ConfigMap %s holds another CA than the Issuer's", certs.CAName)
	}

	// A TLS handshake with the collector's certificate, the agent's way:
	// the bundle as roots, a Service name as server name.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(bundle.Data[certs.BundleKey]))
	col := secrets[certs.CollectorTLSName]
	serverCert, err := tls.X509KeyPair(col.Data[corev1.TLSCertKey], col.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert}})
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		conn, err := lis.Accept()
		if err == nil {
			conn.(*tls.Conn).Handshake()
			io.Copy(io.Discard, conn)
			conn.Close()
		}
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: pool, ServerName: certs.CollectorService + "." + ns + ".svc"})
	if err != nil {
		t.Errorf("TLS handshake with the collector's certificate: %v", err)
	} else {
		st := conn.ConnectionState()
		t.Logf("collector handshake: %s, server %s", tls.VersionName(st.Version), st.PeerCertificates[0].Subject.CommonName)
		conn.Close()
	}

	// The metrics endpoints: the operator's default web configuration
	// over cert-manager's Secret, scraped with the scrape identity.
	tmp := t.TempDir()
	tlsDir := filepath.Join(tmp, "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, certs.BundleKey} {
		if err := os.WriteFile(filepath.Join(tlsDir, k), secrets[certs.MetricsTLSName].Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	wc, err := render.DefaultWebConfig()
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(tmp, "web-config.yml")
	if err := os.WriteFile(webConfig, []byte(strings.ReplaceAll(string(wc), render.MetricsTLSDir, tlsDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := httpserve.Listen("127.0.0.1:0", webConfig, httpserve.Handler(httpserve.Options{Gatherer: goRegistry()}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	scraper := secrets[certs.MetricsClientName]
	id, err := tls.X509KeyPair(scraper.Data[corev1.TLSCertKey], scraper.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + srv.Addr().String() + "/metrics"
	serverName := render.MetricsDNSNames(ns)[0]
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		code  int
	}{{"the scrape identity", []tls.Certificate{id}, http.StatusOK}, {"no client certificate", nil, http.StatusForbidden}} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, Certificates: tc.certs}}}
		resp, err := hc.Get(url)
		if err != nil {
			t.Errorf("/metrics with %s: %v", tc.name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("/metrics with %s: %d, %d bytes", tc.name, resp.StatusCode, len(body))
		if resp.StatusCode != tc.code || (tc.code == http.StatusOK && !strings.Contains(string(body), "go_goroutines")) {
			t.Errorf("/metrics with %s: %d %.200q, want %d", tc.name, resp.StatusCode, body, tc.code)
		}
	}
}

// goRegistry is a registry of the Go runtime's metrics: something to serve.
func goRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promcollectors.NewGoCollector())
	return reg
}

// cmObject is a cert-manager object of kind with spec.
func cmObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(render.CertManagerAPIVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func pemCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM certificate in %.100q", b)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writeKubeconfig writes a kubeconfig for cfg (the admin of an envtest API
// server), for a child process.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, f); err != nil {
		t.Fatal(err)
	}
	return f
}
