//go:build e2e_kubelet

package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// metricsSecret is the Secret of spec.agent.metricsTLS, created only once
// the operator has reported it missing.
const metricsSecret = "agent-metrics"

// scraper is Prometheus as docs/security.md sets it up: the client
// certificate of the Secret flowlens-metrics-client, the CA bundle of the
// ConfigMap flowlens-ca, and as server name the DNS name of service (a
// metrics Service of the agent namespace) in the metrics certificate.
func scraper(ctx context.Context, t *testing.T, c client.Client, service string) *http.Client {
	t.Helper()
	s, cm := &corev1.Secret{}, &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: certs.MetricsClientName}, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: certs.CAName}, cm); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("Secret %s: %v", certs.MetricsClientName, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(cm.Data[certs.BundleKey])) {
		t.Fatalf("ConfigMap %s: no CA certificate", certs.CAName)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: service + "." + agentNamespace + ".svc"}}}
}

// anonymous trusts the flowlens CA but has no client certificate (as the
// kubelet's probes, or any pod).
func anonymous(ctx context.Context, t *testing.T, c client.Client, service string) *http.Client {
	t.Helper()
	h := scraper(ctx, t, c, service)
	h.Transport.(*http.Transport).TLSClientConfig.Certificates = nil
	return h
}

// agentMetricsURL is path on the agent's metrics port at its node's
// address, the only one it listens on.
func agentMetricsURL(ctx context.Context, t *testing.T, c client.Client, path string) string {
	t.Helper()
	return "https://" + net.JoinHostPort(agentPod(ctx, t, c).Status.HostIP, strconv.Itoa(agentMetricsPort)) + path
}

// checkDefaultMetricsTLS checks the default install's metrics (no
// metricsTLS, no metricsPlaintext) under the real kubelet: the agent and
// the collector (manifests/flowlens-collector.yaml) are Ready through
// their HTTPS probes, never restarted; /metrics without a client
// certificate answers 403 naming the scrape identity, /healthz 200;
// plain HTTP gets no metrics; the agent listens on its node's address
// alone (127.0.0.1 refused); with the Secret flowlens-metrics-client's
// certificate both serve flowlens metrics.
func checkDefaultMetricsTLS(ctx context.Context, t *testing.T, c client.Client, agent, collector *corev1.Pod) {
	t.Helper()
	agent = agentPod(ctx, t, c)
	checkProbes(t, agent, corev1.URISchemeHTTPS)
	collector = collectorPod(ctx, t, c)
	if p := collector.Spec.Containers[0].ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("collector readiness probe %+v, want an HTTPS GET", p)
	}
	if st := collector.Status.ContainerStatuses; len(st) != 1 || !st[0].Ready || st[0].RestartCount != 0 {
		t.Errorf("collector container status %+v: want ready, never restarted", st)
	}
	for _, tg := range []struct {
		what, service, base, want string
	}{
		{"agent", render.MetricsServiceName, agentMetricsURL(ctx, t, c, ""), "flowlens_agent_attached_interfaces "},
		{"collector", certs.CollectorService, "https://" + net.JoinHostPort(collector.Status.PodIP, collectorMetricsPort), "flowlens_collector_"},
	} {
		code, body, err := httpservetest.Get(anonymous(ctx, t, c, tg.service), tg.base+"/metrics")
		if err != nil || code != http.StatusForbidden || !strings.Contains(body, "needs a client certificate of the flowlens CA") ||
			!strings.Contains(body, "Secret flowlens-metrics-client") {
			t.Errorf("%s: /metrics without a client certificate: %d %v %q, want 403 naming the scrape identity", tg.what, code, err, body)
		} else {
			t.Logf("%s: /metrics without a client certificate: %d %s", tg.what, code, strings.TrimSpace(body))
		}
		if code, body, err := httpservetest.Get(anonymous(ctx, t, c, tg.service), tg.base+"/healthz"); err != nil || code != 200 || body != "ok\n" {
			t.Errorf("%s: /healthz without a client certificate: %d %v %q, want 200 ok", tg.what, code, err, body)
		}
		plain := "http" + strings.TrimPrefix(tg.base, "https") + "/metrics"
		if code, body, err := httpservetest.Get(&http.Client{Timeout: 10 * time.Second}, plain); err == nil && (code != http.StatusBadRequest || strings.Contains(body, tg.want)) {
			t.Errorf("%s: plain HTTP scrape: %d\n%.300s", tg.what, code, body)
		}
		code, body, err = httpservetest.Get(scraper(ctx, t, c, tg.service), tg.base+"/metrics")
		if err != nil || code != http.StatusOK || !strings.Contains(body, tg.want) {
			t.Errorf("%s: /metrics with the scrape identity: %d %v\n%.500s", tg.what, code, err, body)
		} else {
			t.Logf("%s: /metrics with the scrape identity: %d, %d bytes", tg.what, code, len(body))
		}
	}
	// The metrics port is on the node's address, not on every address.
	if _, _, err := httpservetest.Get(scraper(ctx, t, c, render.MetricsServiceName), fmt.Sprintf("https://127.0.0.1:%d/metrics", agentMetricsPort)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("agent metrics at 127.0.0.1: %v, want the connection refused (it listens on %s alone)", err, agent.Status.HostIP)
	}
}

// checkMetricsTLS turns on spec.agent.metricsTLS under the real kubelet:
//  1. before its Secret exists, the agent pod cannot start and the
//     FlowCollector says so (Ready False, MountFailed, the kubelet's message);
//  2. with the Secret (a certificate for localhost and its CA), the HTTPS
//     startup and readiness probes pass (the FlowCollector is Ready), a
//     scrape trusting the CA reads the metrics and plain HTTP gets none;
//  3. with the Secret's CA as client CA, the probes (TCP) pass, a scraper
//     without a client certificate is refused and one with a certificate of
//     the CA reads the metrics;
//  4. metricsTLS removed, the default again (HTTPS, the scrape identity).
//
// It returns the agent pod then running.
func checkMetricsTLS(ctx context.Context, t *testing.T, c client.Client) *corev1.Pod {
	t.Helper()
	pki := receivertest.NewPKI(t)
	// The test's server certificate names localhost; the agent listens on
	// its node's address.
	tlsClient := func(cert, key string) *http.Client {
		h := httpservetest.Client(t, pki.CA, cert, key)
		h.Transport.(*http.Transport).TLSClientConfig.ServerName = "localhost"
		return h
	}
	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"agent":{"metricsTLS":{"serverSecretRef":{"name":%q}}}}}`, metricsSecret))
	waitNotReady(ctx, t, c, v1alpha1.ReasonMountFailed, fmt.Sprintf(`secret %q not found`, metricsSecret))

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: metricsSecret, Namespace: agentNamespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       readFile(t, pki.ServerCert),
			corev1.TLSPrivateKeyKey: readFile(t, pki.ServerKey),
			"ca.crt":                readFile(t, pki.CA),
		},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitFlowCollector(ctx, t, c)
	pod := agentPod(ctx, t, c)
	checkProbes(t, pod, corev1.URISchemeHTTPS)
	url := agentMetricsURL(ctx, t, c, "/metrics")
	scrapeTLS(t, tlsClient("", ""), url)
	code, body, err := httpservetest.Get(http.DefaultClient, "http"+strings.TrimPrefix(url, "https"))
	if err == nil && (code != http.StatusBadRequest || strings.Contains(body, "flowlens_agent_")) {
		t.Errorf("plain HTTP scrape of the TLS endpoint: %d\n%s", code, body)
	}

	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"agent":{"metricsTLS":{"clientCASecretRef":{"name":%q}}}}}`, metricsSecret))
	waitFlowCollector(ctx, t, c)
	pod = agentPod(ctx, t, c)
	checkProbes(t, pod, "")
	if code, _, err := httpservetest.Get(tlsClient("", ""), url); err == nil {
		t.Errorf("mutual TLS: a scraper without a client certificate got %d, want the handshake refused", code)
	}
	scrapeTLS(t, tlsClient(pki.ClientCert, pki.ClientKey), url)

	patchFlowCollector(ctx, t, c, `{"spec":{"agent":{"metricsTLS":null}}}`)
	waitFlowCollector(ctx, t, c)
	pod = agentPod(ctx, t, c)
	checkProbes(t, pod, corev1.URISchemeHTTPS)
	checkMetrics(ctx, t, c)
	return pod
}

func patchFlowCollector(ctx context.Context, t *testing.T, c client.Client, patch string) {
	t.Helper()
	if err := c.Patch(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}},
		client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatalf("patching the FlowCollector with %s: %v", patch, err)
	}
}

// waitNotReady waits for the FlowCollector's Ready condition to be False,
// with reason (MountFailed, ConfigFailed) and a message containing want.
func waitNotReady(ctx context.Context, t *testing.T, c client.Client, reason, want string) {
	t.Helper()
	waitCondition(ctx, t, c, v1alpha1.ConditionReady, metav1.ConditionFalse, reason, want)
}

// waitCondition waits for the FlowCollector's condition typ to have status
// and reason, and a message containing want, for its current generation.
func waitCondition(ctx context.Context, t *testing.T, c client.Client, typ string, status metav1.ConditionStatus, reason, want string) {
	t.Helper()
	cluster.WaitFor(ctx, t, "the FlowCollector to report "+typ+" "+reason+": "+want, 3*time.Minute, func() error {
		fc := &v1alpha1.FlowCollector{}
		if err := c.Get(ctx, client.ObjectKey{Name: "cluster"}, fc); err != nil {
			return err
		}
		r := meta.FindStatusCondition(fc.Status.Conditions, typ)
		if r == nil || fc.Status.ObservedGeneration != fc.Generation || r.Status != status ||
			r.Reason != reason || !strings.Contains(r.Message, want) {
			return fmt.Errorf("generation %d, %s %+v%s", fc.Generation, typ, r, podStates(ctx, c, agentNamespace))
		}
		t.Logf("%s: %s: %s", typ, r.Reason, r.Message)
		return nil
	})
}

// checkProbes checks that the agent pod, ready, was probed as the operator
// renders: HTTP GETs with scheme, or TCP connections when scheme is "", and
// that no probe restarted it.
func checkProbes(t *testing.T, pod *corev1.Pod, scheme corev1.URIScheme) {
	t.Helper()
	ctr := pod.Spec.Containers[0]
	for what, p := range map[string]*corev1.Probe{"startup": ctr.StartupProbe, "liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
		switch {
		case p == nil:
			t.Errorf("no %s probe", what)
		case scheme == "" && p.TCPSocket == nil:
			t.Errorf("%s probe %+v, want a TCP connection", what, p.ProbeHandler)
		case scheme != "" && (p.HTTPGet == nil || p.HTTPGet.Scheme != scheme):
			t.Errorf("%s probe %+v, want an %s GET", what, p.ProbeHandler, scheme)
		}
	}
	if s := pod.Status.ContainerStatuses; len(s) != 1 || s[0].RestartCount != 0 || !s[0].Ready {
		t.Errorf("agent container status %+v: want ready, never restarted", s)
	}
}

// scrapeTLS GETs the agent's metrics with c and checks they are there.
func scrapeTLS(t *testing.T, c *http.Client, url string) {
	t.Helper()
	code, body, err := httpservetest.Get(c, url)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "flowlens_agent_attached_interfaces ") {
		t.Errorf("GET %s: %d %v\n%.500s", url, code, err, body)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
