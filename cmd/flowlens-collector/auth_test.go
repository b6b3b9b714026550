package main

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/pkg/tlsclient"
)

// authCluster is what TestAuthorization creates on a real kube-apiserver
// (envtest): the agents' and the readers' ServiceAccounts and RBAC as the
// operator renders them (contract of issue #27), and tokens as the
// kubelet would mint them.
type authCluster struct {
	cs *kubernetes.Clientset
	ns string
}

// newAuthCluster starts a kube-apiserver (envtest) with namespace
// flowlens, the nodes and the ServiceAccounts sas in it.
func newAuthCluster(t *testing.T, nodes []string, sas ...string) (*authCluster, *rest.Config) {
	t.Helper()
	cfg := envtest.StartT(t, envtest.Options{}).Config
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := &authCluster{cs: cs, ns: "flowlens"}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}, metav1.CreateOptions{})
	c.must(t, err)
	for _, n := range nodes {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		c.must(t, err)
	}
	for _, sa := range sas {
		_, err := cs.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		c.must(t, err)
	}
	return c, cfg
}

func (c *authCluster) must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// role creates ClusterRole name allowing verb on flowcollectors/flows of
// the FlowCollector cluster, bound to the ServiceAccount sa.
func (c *authCluster) role(t *testing.T, name, verb, sa string) {
	ctx := context.Background()
	_, err := c.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{kubeauth.Group}, Resources: []string{kubeauth.Resource + "/" + kubeauth.Subresource},
			ResourceNames: []string{kubeauth.Name}, Verbs: []string{verb}}}}, metav1.CreateOptions{})
	c.must(t, err)
	_, err = c.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: c.ns}}}, metav1.CreateOptions{})
	c.must(t, err)
}

// podToken is the token the kubelet projects into a pod of sa on node:
// bound to the pod (so the API server adds the node's name to the
// TokenReview's user), for audience ("": the API server's own).
func (c *authCluster) podToken(t *testing.T, sa, node, audience string) string {
	t.Helper()
	ctx := context.Background()
	pod, err := c.cs.CoreV1().Pods(c.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: sa + "-", Namespace: c.ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: "example.com/agent:1"}}}}, metav1.CreateOptions{})
	c.must(t, err)
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	tr, err := c.cs.CoreV1().ServiceAccounts(c.ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	c.must(t, err)
	return tr.Status.Token
}

// The collector's --auth kubernetes against a real kube-apiserver: who may
// Export (agents, for their own node) and who may GetFlows (readers), with
// tokens minted by the API server and RBAC, the collector over TLS.
func TestAuthorization(t *testing.T) {
	c, cfg := newAuthCluster(t, []string{"node-a", "node-b"}, "agent", "reader", "nobody")
	c.role(t, kubeauth.AgentClusterRole, kubeauth.VerbExport, "agent")
	c.role(t, kubeauth.ReaderClusterRole, kubeauth.VerbRead, "reader")

	agentA := c.podToken(t, "agent", "node-a", kubeauth.Audience)              // the agent of node-a
	agentAPI := c.podToken(t, "agent", "node-a", "")                           // the agent's SA, for the API server
	nobodyB := c.podToken(t, "nobody", "node-b", kubeauth.Audience)            // a pod without the export permission
	reader := c.podToken(t, "reader", "node-b", "")                            // a person's (here an SA's) kubeconfig token
	nobody := c.podToken(t, "nobody", "node-b", "")                            // a token without the read permission
	readerForCollector := c.podToken(t, "reader", "node-b", kubeauth.Audience) // a reader's token for the collector's audience

	pki := receivertest.NewPKI(t)
	a := startAuthCollector(t, cfg, 0, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--tls-client-ca="+pki.CA)
	addr := a.GRPC.String()
	tc, err := tlsclient.Config(pki.CA, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	tlsCreds := credentials.NewTLS(tc)

	// The real agent exporter, over TLS, with its projected token in a
	// file: accepted, its flows in the history.
	tokenFile := filepath.Join(t.TempDir(), "token")
	c.must(t, os.WriteFile(tokenFile, []byte(agentA+"\n"), 0o600))
	collectortest.Export(t, grpcexp.Config{Target: addr, TLSCA: pki.CA, TokenFile: tokenFile, NodeName: "node-a",
		AgentIP: netip.MustParseAddr("192.0.2.1")}, collectortest.Records())

	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		token string
		nodes []string // the flows' node_name
		code  codes.Code
		msg   string // in the status message ("" with OK)
	}{
		{"agent token, own node", tlsCreds, agentA, []string{"node-a", "node-a"}, codes.OK, ""},
		{"agent token claiming another node", tlsCreds, agentA, []string{"node-b", "node-b", "node-b"}, codes.PermissionDenied,
			`forbidden: 3 flows of node "node-b" from the agent of node "node-a"`},
		{"agent token, own and another node", tlsCreds, agentA, []string{"node-a", "node-c"}, codes.PermissionDenied,
			`forbidden: 1 flows of node "node-c" from the agent of node "node-a"`},
		{"token without the export permission", tlsCreds, nobodyB, []string{"node-b"}, codes.PermissionDenied,
			`forbidden: User "system:serviceaccount:flowlens:nobody" cannot create flowcollectors/flows in API group flowlens.io`},
		{"reader token for the collector", tlsCreds, readerForCollector, []string{"node-b"}, codes.PermissionDenied,
			`forbidden: User "system:serviceaccount:flowlens:reader" cannot create flowcollectors/flows in API group flowlens.io`},
		{"agent token for the API server", tlsCreds, agentAPI, []string{"node-a"}, codes.Unauthenticated,
			"want a token of audience flowlens-collector"},
		{"no token, no certificate", tlsCreds, "", []string{"node-a"}, codes.Unauthenticated,
			"Export needs a bearer token"},
		{"forged token", tlsCreds, agentA[:len(agentA)-4] + "AAAA", []string{"node-a"}, codes.Unauthenticated, "the token is not valid"},
		{"plaintext to the TLS collector", insecure.NewCredentials(), agentA, []string{"node-a"}, codes.Unavailable, ""},
		{"oversized token", tlsCreds, strings.Repeat("x", 16<<10+1), []string{"node-a"}, codes.Unauthenticated, "a bearer token of 16385 bytes, max 16384"},
	} {
		t.Run("Export/"+tc.name, func(t *testing.T) {
			err := rawExport(addr, tc.creds, tc.token, tc.nodes...)
			checkStatus(t, err, tc.code, tc.msg)
		})
	}

	// ExportAcked: an agent may only use instances of its own node, so
	// that it cannot have another agent's messages dropped as duplicates.
	checkStatus(t, rawExportAcked(addr, tlsCreds, agentA, "node-b/00"), codes.PermissionDenied,
		`forbidden: agent_instance "node-b/00" is not of node "node-a", the caller's`)
	checkStatus(t, rawExportAcked(addr, tlsCreds, agentA, "node-a/00"), codes.OK, "")

	// Certificates: the collector's CA's, CN agent-1, is the agent of
	// node agent-1; a self-made one (another CA) does not get in.
	mtls, err := tlsclient.Config(pki.CA, pki.ClientCert, pki.ClientKey, "")
	c.must(t, err)
	checkStatus(t, rawExport(addr, credentials.NewTLS(mtls), "", pki.ClientCN), codes.OK, "")
	checkStatus(t, rawExport(addr, credentials.NewTLS(mtls), "", "node-a"), codes.PermissionDenied,
		`forbidden: 1 flows of node "node-a" from the agent of node "agent-1"`)
	selfMade, err := tlsclient.Config(pki.CA, pki.OtherCert, pki.OtherKey, "")
	c.must(t, err)
	if err := rawExport(addr, credentials.NewTLS(selfMade), "", "intruder"); status.Code(err) != codes.Unavailable {
		t.Errorf("Export with a self-made certificate: %v, want Unavailable (refused at the handshake)", err)
	}

	// Exactly the flows of other nodes were counted: 3 + 1 + 1.
	expectSamples(t, scrape(t, a), map[[2]string]float64{
		{"flowlens_collector_refused_flows_total", "reason=identity"}: 5,
		{"flowlens_collector_received_flows_total", ""}:               3 + 2 + 1 + 1 + 1,
	})

	// GetFlows: readers read; nobody else, certificates included.
	flows, err := rawGetFlows(addr, tlsCreds, reader)
	if err != nil || len(flows) != 8 {
		t.Errorf("GetFlows as a reader: %d flows, %v; want 8", len(flows), err)
	}
	nodes := map[string]int{}
	for _, f := range flows {
		nodes[f.GetFlow().GetFlow().GetNodeName()]++
	}
	if nodes["node-a"] != 7 || nodes["agent-1"] != 1 || len(nodes) != 2 {
		t.Errorf("the history's nodes: %v, want node-a: 7, agent-1: 1", nodes)
	}
	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		token string
		code  codes.Code
		msg   string
	}{
		{"token without the read permission", tlsCreds, nobody, codes.PermissionDenied,
			`forbidden: User "system:serviceaccount:flowlens:nobody" cannot get flowcollectors/flows in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it`},
		{"agent token (audience flowlens-collector)", tlsCreds, agentA, codes.Unauthenticated, "want a token of the Kubernetes API server"},
		{"agent's ServiceAccount token", tlsCreds, agentAPI, codes.PermissionDenied,
			`forbidden: User "system:serviceaccount:flowlens:agent" cannot get flowcollectors/flows in API group flowlens.io`},
		{"no token", tlsCreds, "", codes.Unauthenticated, "reading flows needs a bearer token"},
		{"agent certificate", credentials.NewTLS(mtls), "", codes.Unauthenticated, "reading flows needs a bearer token"},
		{"plaintext", insecure.NewCredentials(), reader, codes.Unavailable, ""},
	} {
		t.Run("GetFlows/"+tc.name, func(t *testing.T) {
			flows, err := rawGetFlows(addr, tc.creds, tc.token)
			checkStatus(t, err, tc.code, tc.msg)
			if len(flows) != 0 {
				t.Errorf("%d flows read", len(flows))
			}
		})
	}
}

// An open Export stream is authorized again (Options.ReauthorizeEvery):
// the agent's permission revoked, its stream ends with PermissionDenied
// within the reviews' cache TTL.
func TestAuthorizationRevoked(t *testing.T) {
	c, cfg := newAuthCluster(t, []string{"node-a"}, "agent")
	cs, ctx := c.cs, context.Background()
	c.role(t, kubeauth.AgentClusterRole, kubeauth.VerbExport, "agent")
	token := c.podToken(t, "agent", "node-a", kubeauth.Audience)
	pki := receivertest.NewPKI(t)
	a := startAuthCollector(t, cfg, 100*time.Millisecond, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey)
	tc, err := tlsclient.Credentials(pki.CA, "", "", "")
	c.must(t, err)
	conn, err := grpc.NewClient(a.GRPC.String(), grpc.WithTransportCredentials(tc))
	c.must(t, err)
	defer conn.Close()
	sctx, cancel := context.WithTimeout(withBearer(ctx, token), 30*time.Second)
	defer cancel()
	st, err := flowv1.NewFlowCollectorClient(conn).Export(sctx)
	c.must(t, err)
	batch := &flowv1.FlowBatch{Flows: []*flowv1.Flow{{NodeName: "node-a", SrcAddr: []byte{10, 0, 0, 1}, DstAddr: []byte{10, 0, 0, 2},
		Proto: 6, Bytes: 100, Packets: 1, Sampling: 1, AgentIp: []byte{192, 0, 2, 1}}}}
	c.must(t, st.Send(batch))
	time.Sleep(300 * time.Millisecond)
	c.must(t, st.Send(batch)) // reviewed again: still allowed

	c.must(t, cs.RbacV1().ClusterRoleBindings().Delete(ctx, kubeauth.AgentClusterRole+"-agent", metav1.DeleteOptions{}))
	start := time.Now()
	for {
		time.Sleep(200 * time.Millisecond)
		if err := st.Send(batch); err != nil {
			_, err = st.CloseAndRecv()
			checkStatus(t, err, codes.PermissionDenied, `forbidden: User "system:serviceaccount:flowlens:agent" cannot create flowcollectors/flows in API group flowlens.io`)
			break
		}
		if time.Since(start) > 25*time.Second {
			t.Fatal("the stream still open 25 s after the permission was revoked")
		}
	}
	t.Logf("cut off %v after the revocation", time.Since(start).Round(100*time.Millisecond))
}

// startAuthCollector runs the command with --auth kubernetes in a cluster
// reached through cfg (as its in-cluster configuration).
func startAuthCollector(t *testing.T, cfg *rest.Config, reauthorize time.Duration, args ...string) collector.Addrs {
	t.Helper()
	errOut := &collectortest.SyncBuffer{}
	rctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan collector.Addrs, 1)
	code := make(chan int, 1)
	go func() {
		code <- run(rctx, append([]string{"--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--auth", "kubernetes",
			"--k8s-enrich=false", "--output", "none"}, args...), io.Discard, errOut,
			&env{Options: collector.Options{Ready: func(a collector.Addrs) { addrCh <- a }, InCluster: func() (*rest.Config, error) { return rest.CopyConfig(cfg), nil },
				ReauthorizeEvery: reauthorize}})
	}()
	var a collector.Addrs
	select {
	case a = <-addrCh:
	case c := <-code:
		t.Fatalf("collector exited with %d: %s", c, errOut.String())
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-code:
		case <-time.After(15 * time.Second):
			t.Error("collector did not stop")
		}
		if t.Failed() {
			t.Logf("collector log:\n%s", errOut.String())
		}
	})
	return a
}

// rawExport sends one batch of flows with these node names, as anyone
// could (token as gRPC metadata, whatever the transport), and returns the
// stream's status.
func rawExport(addr string, creds credentials.TransportCredentials, token string, nodes ...string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(withBearer(context.Background(), token), 10*time.Second)
	defer cancel()
	st, err := flowv1.NewFlowCollectorClient(conn).Export(ctx)
	if err != nil {
		return err
	}
	b := &flowv1.FlowBatch{}
	for i, n := range nodes {
		b.Flows = append(b.Flows, &flowv1.Flow{NodeName: n, SrcAddr: []byte{10, 0, 0, 1}, DstAddr: []byte{10, 0, 0, 2},
			SrcPort: uint32(40000 + i), DstPort: 80, Proto: 6, Bytes: 100, Packets: 1, Sampling: 1, AgentIp: []byte{192, 0, 2, 1}})
	}
	if err := st.Send(b); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

// rawExportAcked sends one message of one node-a flow on ExportAcked as
// instance and returns the stream's status after its acknowledgement.
func rawExportAcked(addr string, creds credentials.TransportCredentials, token, instance string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(withBearer(context.Background(), token), 10*time.Second)
	defer cancel()
	st, err := flowv1.NewFlowCollectorClient(conn).ExportAcked(ctx)
	if err != nil {
		return err
	}
	b := &flowv1.FlowBatch{AgentInstance: instance, Seq: 1, Flows: []*flowv1.Flow{{NodeName: "node-a", SrcAddr: []byte{10, 0, 0, 1},
		DstAddr: []byte{10, 0, 0, 2}, SrcPort: 50000, DstPort: 80, Proto: 6, Bytes: 100, Packets: 1, Sampling: 1, AgentIp: []byte{192, 0, 2, 1}}}}
	if err := st.Send(b); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if ack, err := st.Recv(); err != nil || ack.Refused {
		_, err = st.Recv()
		return err
	}
	st.CloseSend()
	_, err = st.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// rawGetFlows reads the whole history with token.
func rawGetFlows(addr string, creds credentials.TransportCredentials, token string) ([]*flowv1.GetFlowsResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(withBearer(context.Background(), token), 10*time.Second)
	defer cancel()
	st, err := flowv1.NewFlowHistoryClient(conn).GetFlows(ctx, &flowv1.GetFlowsRequest{})
	if err != nil {
		return nil, err
	}
	var out []*flowv1.GetFlowsResponse
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

func withBearer(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func checkStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if s := status.Convert(err); s.Code() != code || !strings.Contains(s.Message(), msg) {
		t.Errorf("status %v %q, want %v with %q", s.Code(), s.Message(), code, msg)
	}
}
