package main

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// TestFollowersPerUser: with --auth kubernetes, follow streams are counted
// per authenticated user, not per address. Every `flowlens observe`
// through a port-forward comes from the collector pod's loopback; here
// both readers come from 127.0.0.1, and with one follower per client the
// second reader still follows, while the first's second stream is refused
// naming the user.
func TestFollowersPerUser(t *testing.T) {
	env := envtest.StartT(t, envtest.Options{})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := authLab(t, cs, []string{"reader", "reader2"}, readerRole,
		authRole{"flowlens-flows-reader-2", kubeauth.Subresource, kubeauth.VerbRead, "reader2"})
	admin := writeKubeconfig(t, env.Config, &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData})
	pki := receivertest.NewPKI(t)
	col := startCollector(t, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--tls-client-ca="+pki.CA,
		"--auth=kubernetes", "--kubeconfig="+admin, "--k8s-enrich=false", "--history-max-followers-per-client=1")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := func(sa string) error {
		t.Helper()
		creds, err := credentials.NewClientTLSFromFile(pki.CA, "")
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(col, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(bearer(token[sa])))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		st, err := flowv1.NewFlowHistoryClient(cc).GetFlows(ctx, &flowv1.GetFlowsRequest{Follow: true, SkipHistory: true})
		if err != nil {
			return err
		}
		r, err := st.Recv()
		if err == nil && !r.GetHistoryEnd() {
			t.Fatalf("%s: first answer %v, want the history's end", sa, r)
		}
		return err
	}
	if err := follow("reader"); err != nil {
		t.Fatalf("reader's follower: %v", err)
	}
	if err := follow("reader2"); err != nil {
		t.Fatalf("reader2's follower, from the same address: %v", err)
	}
	err = follow("reader")
	want := "GetFlows: 1 followers from user system:serviceaccount:flowlens:reader already, max 1 per client (--history-max-followers-per-client)"
	if status.Code(err) != codes.ResourceExhausted || status.Convert(err).Message() != want {
		t.Errorf("reader's second follower: %v; want ResourceExhausted %q", err, want)
	}
}
