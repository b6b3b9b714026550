//go:build e2e_kubelet

package kubelet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// The collector's Service and port, as README's step 3 names them, and its
// metrics port (manifests/flowlens-collector.yaml).
const (
	collectorService     = "flowlens-collector." + agentNamespace + ".svc"
	collectorGRPCPort    = "9990"
	collectorMetricsPort = "9401"
)

// checkForgedNode is an agent's identity claiming another node (issue
// #27): a token of the agent's ServiceAccount for the collector, bound to
// the running agent pod as the kubelet's projected token is (so the API
// server names the pod's real node in it), sent by this test over TLS
// verified with the operator's CA. Flows whose node_name is another node
// are refused with PermissionDenied and counted in
// refused_flows_total{reason="identity"}, exactly, none received; flows of
// the agent's own node from the same token are received, exactly, and
// reach the collector's output. It runs before the agent exports to the
// collector, so that no other sender moves the counters.
func checkForgedNode(ctx context.Context, t *testing.T, c client.Client, cs kubernetes.Interface, agent, collector *corev1.Pod) {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, render.AgentName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{kubeauth.Audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agent.Name, UID: agent.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn := collectorConn(ctx, t, c, collector, tr.Status.Token)
	const forged, own = 3, 2
	before := collectorMetrics(ctx, t, c, collector)
	sum, err := export(ctx, conn, forged, "flowlens-other-node")
	want := fmt.Sprintf(`forbidden: %d flows of node "flowlens-other-node" from the agent of node %q`, forged, nodeName)
	if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != want {
		t.Errorf("flows of another node: summary %v, %v; want PermissionDenied %q", sum, err, want)
	}
	mid := collectorMetrics(ctx, t, c, collector)
	checkDelta(t, "after the forged flows", before, mid, forged, 0)

	sum, err = export(ctx, conn, own, nodeName)
	if err != nil || sum.GetBatches() != 1 || sum.GetFlows() != own {
		t.Errorf("flows of the agent's own node: summary %v, %v; want 1 batch, %d flows", sum, err, own)
	}
	checkDelta(t, "after the agent's own flows", mid, collectorMetrics(ctx, t, c, collector), 0, own)
	cluster.WaitFor(ctx, t, "the collector to print the agent's own flows", time.Minute, func() error {
		totals, _, err := flowTotals(ctx, cs, collector, 17, "192.0.2.10", "192.0.2.20", 53)
		if err != nil {
			return err
		}
		if tot := totals[40000]; len(totals) != 1 || tot != [2]uint64{own, own * 100} {
			return fmt.Errorf("totals %v, want port 40000: %d packets, %d bytes", totals, own, own*100)
		}
		return nil
	})
}

// collectorConn is a gRPC connection to the collector pod, over TLS
// verified with the operator's CA (ConfigMap flowlens-ca) for the
// Service's name, sending token.
func collectorConn(ctx context.Context, t *testing.T, c client.Client, collector *corev1.Pod, token string) *grpc.ClientConn {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: certs.CAName}, cm); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data[certs.BundleKey])) {
		t.Fatalf("ConfigMap %s: no certificate in %s", certs.CAName, certs.BundleKey)
	}
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: collectorService})
	conn, err := grpc.NewClient(net.JoinHostPort(collector.Status.PodIP, collectorGRPCPort),
		grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(bearerToken(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type bearerToken string

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerToken) RequireTransportSecurity() bool { return true }

// export sends one batch of n UDP flows of node on one Export stream, 1
// packet of 100 bytes each, from 192.0.2.10:40000 to 192.0.2.20:53
// (TEST-NET-1: no pod's).
func export(ctx context.Context, conn *grpc.ClientConn, n int, node string) (*flowv1.ExportSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := flowv1.NewFlowCollectorClient(conn).Export(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	b := &flowv1.FlowBatch{}
	for i := range n {
		b.Flows = append(b.Flows, &flowv1.Flow{SrcAddr: []byte{192, 0, 2, 10}, DstAddr: []byte{192, 0, 2, 20}, SrcPort: 40000, DstPort: 53,
			Proto: 17, Packets: 1, Bytes: 100, Sampling: 1, NodeName: node,
			StartTime: timestamppb.New(now.Add(time.Duration(i-n) * time.Second)), EndTime: timestamppb.New(now.Add(time.Duration(i-n)*time.Second + time.Millisecond))})
	}
	_ = s.Send(b) // io.EOF when the server ended the stream: CloseAndRecv has its status
	return s.CloseAndRecv()
}

// collectorMetrics scrapes the collector pod's /metrics from the node,
// where the pod network is, over HTTPS with Prometheus' scrape identity
// (metricstls_test.go).
func collectorMetrics(ctx context.Context, t *testing.T, c client.Client, collector *corev1.Pod) promtest.Families {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(collector.Status.PodIP, collectorMetricsPort)+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := scraper(ctx, t, c, certs.CollectorService).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("collector /metrics: %s", resp.Status)
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// checkDelta checks that, from before to after, the collector refused
// exactly refused flows for their identity and received exactly received.
func checkDelta(t *testing.T, when string, before, after promtest.Families, refused, received float64) {
	t.Helper()
	for _, m := range []struct {
		name  string
		label []string
		want  float64
	}{
		{"flowlens_collector_refused_flows_total", []string{"reason=identity"}, refused},
		{"flowlens_collector_received_flows_total", nil, received},
	} {
		b, okB := promtest.Value(before, m.name, m.label...)
		a, okA := promtest.Value(after, m.name, m.label...)
		if !okB || !okA || a-b != m.want {
			t.Errorf("%s: %s%v went from %v to %v (present %v, %v), want +%v", when, m.name, m.label, b, a, okB, okA, m.want)
			continue
		}
		t.Logf("%s: %s%v %v -> %v", when, m.name, m.label, b, a)
	}
}

// checkForeignPod runs a pod of another namespace, with a ServiceAccount
// of its own, that calls Export and GetFlows of the collector's Service
// as anyone in the cluster could (podtool grpcprobe), and checks every
// call is refused, with the code and text the collector gives:
//   - in plaintext: the TLS server drops the connection (Unavailable);
//   - over TLS with a self-signed client certificate: the collector
//     asks for no client certificate, so the call has no identity
//     (Unauthenticated, naming what each method wants);
//   - with the pod's API token: not an agent's (audience), and its user
//     may not read flows (PermissionDenied naming the permission);
//   - with a token of the pod's ServiceAccount for the collector's
//     audience: its user may not export flows (PermissionDenied), and it
//     is no API server token to read with (Unauthenticated).
//
// Nothing it sent is received or counted. It runs while the agent does
// not export to the collector, so that the counters are exact. The
// NetworkPolicy flowlens-collector would keep the pod off port 9990, but
// the node's CNI (the bridge plugin) enforces no policy: these are the
// collector's own refusals, the defence that stands without one.
func checkForeignPod(ctx context.Context, t *testing.T, c client.Client, cs kubernetes.Interface, collector *corev1.Pod) {
	t.Helper()
	const ns, sa, dir = "e2e-outsider", "prober", "/var/run/secrets/probe"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}); err != nil {
		t.Fatal(err)
	}
	token := func(path, audience string) corev1.VolumeProjection {
		return corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: path, Audience: audience}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prober"}, Spec: corev1.PodSpec{
		ServiceAccountName: sa, RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
		Volumes: []corev1.Volume{{Name: "tokens", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{token("api", ""), token("collector", kubeauth.Audience)}}}}},
		Containers: []corev1.Container{{Name: "probe", Image: podtoolImage, ImagePullPolicy: corev1.PullNever,
			Args:         []string{"grpcprobe", collectorService + ":" + collectorGRPCPort, dir + "/api", dir + "/collector"},
			VolumeMounts: []corev1.VolumeMount{{Name: "tokens", MountPath: dir, ReadOnly: true}}}},
	}}
	before := collectorMetrics(ctx, t, c, collector)
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(ctx, t, "the probe pod to finish", 2*time.Minute, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if p := pod.Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			return fmt.Errorf("phase %s%s", p, podStates(ctx, c, ns))
		}
		return nil
	})
	log, err := podLog(ctx, cs, pod)
	if err != nil || pod.Status.Phase != corev1.PodSucceeded || !strings.Contains(log, "probe done") {
		t.Fatalf("probe pod %s (%v), log:\n%s", pod.Status.Phase, err, log)
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)
	type answer struct{ code, prefix, suffix string }
	const preface = `connection error: desc = "error reading server preface: `
	want := map[string]answer{
		"plaintext Export":   {"Unavailable", preface, ""},
		"plaintext GetFlows": {"Unavailable", preface, ""},
		"client-cert Export": {"Unauthenticated", "collector: Export needs a bearer token (a ServiceAccount token of audience flowlens-collector, " +
			"--token-file) or a client certificate of the collector's --tls-client-ca", ""},
		"client-cert GetFlows": {"Unauthenticated", "collector: reading flows needs a bearer token whose user may get flowcollectors/flows " +
			"in API group flowlens.io (flowlens observe sends the kubeconfig's)", ""},
		"token:" + dir + "/api Export": {"Unauthenticated", "collector: the token is not valid: ", " (want a token of audience flowlens-collector)"},
		"token:" + dir + "/api GetFlows": {"PermissionDenied", fmt.Sprintf(`forbidden: User %q cannot get flowcollectors/flows in API group flowlens.io `+
			`(resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it`, user), ""},
		"token:" + dir + "/collector Export":   {"PermissionDenied", fmt.Sprintf(`forbidden: User %q cannot create flowcollectors/flows in API group flowlens.io`, user), ""},
		"token:" + dir + "/collector GetFlows": {"Unauthenticated", "collector: the token is not valid: ", " (want a token of the Kubernetes API server)"},
	}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var got struct{ Case, Method, Code, Message string }
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
			t.Fatalf("probe line %q: %v", sc.Text(), err)
		}
		key := got.Case + " " + got.Method
		w, ok := want[key]
		delete(want, key)
		// A prefix alone is the whole text; with a suffix, the middle is
		// the API server's own words.
		exact := w.suffix == "" && w.prefix != preface
		if !ok || got.Code != w.code || !strings.HasPrefix(got.Message, w.prefix) || !strings.HasSuffix(got.Message, w.suffix) ||
			(exact && got.Message != w.prefix) {
			t.Errorf("%s: %s %q; want %s %q...%q", key, got.Code, got.Message, w.code, w.prefix, w.suffix)
			continue
		}
		t.Logf("%s: %s: %s", key, got.Code, got.Message)
	}
	for key := range want {
		t.Errorf("the probe did not report %s", key)
	}
	checkDelta(t, "after the probe pod's calls", before, collectorMetrics(ctx, t, c, collector), 0, 0)
}
