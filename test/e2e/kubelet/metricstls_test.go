//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// metricsSecret is the Secret of spec.agent.metricsTLS, created only once
// the operator has reported it missing.
const metricsSecret = "agent-metrics"

// checkMetricsTLS turns on spec.agent.metricsTLS under the real kubelet:
//  1. before its Secret exists, the agent pod cannot start and the
//     FlowCollector says so (Ready False, MountFailed, the kubelet's message);
//  2. with the Secret (a certificate for 127.0.0.1 and its CA), the HTTPS
//     startup and readiness probes pass (the FlowCollector is Ready), a
//     scrape trusting the CA reads the metrics and plain HTTP gets none;
//  3. with the Secret's CA as client CA, the probes (TCP) pass, a scraper
//     without a client certificate is refused and one with a certificate of
//     the CA reads the metrics;
//  4. metricsTLS removed, plain HTTP again.
//
// It returns the agent pod then running.
func checkMetricsTLS(ctx context.Context, t *testing.T, c client.Client) *corev1.Pod {
	t.Helper()
	pki := receivertest.NewPKI(t)
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
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", agentMetricsPort)
	scrapeTLS(t, httpservetest.Client(t, pki.CA, "", ""), url)
	code, body, err := httpservetest.Get(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/metrics", agentMetricsPort))
	if err == nil && (code != http.StatusBadRequest || strings.Contains(body, "flowlens_agent_")) {
		t.Errorf("plain HTTP scrape of the TLS endpoint: %d\n%s", code, body)
	}

	patchFlowCollector(ctx, t, c, fmt.Sprintf(`{"spec":{"agent":{"metricsTLS":{"clientCASecretRef":{"name":%q}}}}}`, metricsSecret))
	waitFlowCollector(ctx, t, c)
	pod = agentPod(ctx, t, c)
	checkProbes(t, pod, "")
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), url); err == nil {
		t.Errorf("mutual TLS: a scraper without a client certificate got %d, want the handshake refused", code)
	}
	scrapeTLS(t, httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url)

	patchFlowCollector(ctx, t, c, `{"spec":{"agent":{"metricsTLS":null}}}`)
	waitFlowCollector(ctx, t, c)
	pod = agentPod(ctx, t, c)
	checkProbes(t, pod, corev1.URISchemeHTTP)
	checkMetrics(ctx, t)
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
