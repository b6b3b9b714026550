package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/pkg/tlsclient"
)

// An agent's capture stream is authorized as its Export: a token of
// audience flowlens-collector bound to a pod on a node, whose user may
// create flowcollectors/flows; a token for the API server is refused; and
// the open stream is authorized again, so that a revoked permission ends
// it with PermissionDenied (the agent's captures end with it).
func TestAgentCaptureAuthorization(t *testing.T) {
	c, cfg := newAuthCluster(t, []string{"node-a"}, "agent")
	cs, ctx := c.cs, context.Background()
	c.role(t, kubeauth.AgentClusterRole, kubeauth.VerbExport, "agent")
	token := c.podToken(t, "agent", "node-a", kubeauth.Audience)
	apiToken := c.podToken(t, "agent", "node-a", "")
	pki := receivertest.NewPKI(t)
	a := startAuthCollector(t, cfg, 100*time.Millisecond, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey)
	tc, err := tlsclient.Credentials(pki.CA, "", "", "")
	c.must(t, err)
	conn, err := grpc.NewClient(a.GRPC.String(), grpc.WithTransportCredentials(tc))
	c.must(t, err)
	defer conn.Close()
	open := func(tok string) grpc.BidiStreamingClient[flowv1.AgentCaptureMessage, flowv1.CaptureCommand] {
		st, err := flowv1.NewPacketCaptureClient(conn).AgentCapture(withBearer(ctx, tok))
		c.must(t, err)
		c.must(t, st.Send(&flowv1.AgentCaptureMessage{Message: &flowv1.AgentCaptureMessage_Hello{Hello: &flowv1.AgentHello{Node: "node-a", Enabled: true}}}))
		return st
	}
	_, err = open(apiToken).Recv()
	checkStatus(t, err, codes.Unauthenticated, "collector: the token is not valid")

	st := open(token)
	received := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		received <- err
	}()
	select {
	case err := <-received:
		t.Fatalf("the agent's stream ended while allowed: %v", err)
	case <-time.After(500 * time.Millisecond): // reviewed again: still allowed
	}
	c.must(t, cs.RbacV1().ClusterRoleBindings().Delete(ctx, kubeauth.AgentClusterRole+"-agent", metav1.DeleteOptions{}))
	select {
	case err := <-received:
		checkStatus(t, err, codes.PermissionDenied, `forbidden: User "system:serviceaccount:flowlens:agent" cannot create flowcollectors/flows in API group flowlens.io`)
	case <-time.After(30 * time.Second):
		t.Fatal("the capture stream still open 30 s after the permission was revoked")
	}
}
