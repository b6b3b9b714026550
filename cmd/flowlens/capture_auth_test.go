package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flowlens/flowlens/internal/agent/capturectl"
	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// startCollectorProc is startCollector, and the process (its log).
func startCollectorProc(t *testing.T, args ...string) (string, *testkit.Proc) {
	t.Helper()
	bin := buildCollector(t)
	addr := testkit.FreeAddr(t)
	p := testkit.Start(t, "collector "+addr, exec.Command(bin, append([]string{"--listen=" + addr, "--metrics-address=", "--output=none"}, args...)...))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, p
		}
		select {
		case <-p.Done():
			t.Fatalf("collector exited: %v", p.Err())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not listening after 20s")
		}
	}
}

// flowlens capture against a collector with --auth kubernetes on a real
// kube-apiserver (envtest): a user who may read flows but not capture is
// refused with a message naming create flowcollectors/capture and the
// ClusterRole flowlens-capture, and so is one who may export flows (the
// same verb, create, on flows); a user bound to it captures (here from
// an agent whose capture is disabled, connected with its mTLS
// certificate: the end report says so per node), and the collector logs
// who asked what.
func TestCaptureAuthorization(t *testing.T) {
	env := envtest.StartT(t, envtest.Options{})
	cfg := env.Config
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	token := authLab(t, cs, []string{"reader", "capturer", "exporter"}, readerRole,
		authRole{kubeauth.CaptureClusterRole, kubeauth.SubresourceCapture, kubeauth.VerbCapture, "capturer"},
		// Export's verb is create too: on flows, not capture.
		authRole{kubeauth.AgentClusterRole, kubeauth.Subresource, kubeauth.VerbExport, "exporter"})
	admin := writeKubeconfig(t, cfg, &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData})
	pki := receivertest.NewPKI(t)
	col, proc := startCollectorProc(t, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--tls-client-ca="+pki.CA,
		"--auth=kubernetes", "--kubeconfig="+admin, "--k8s-enrich=false")

	// An agent (its mTLS certificate: node pki.ClientCN) with capture
	// disabled keeps its stream open.
	exp, err := grpcexp.New(grpcexp.Config{Target: col, NodeName: pki.ClientCN, TLSCA: pki.CA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey})
	must(err)
	actx, stop := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		capturectl.Run(actx, capturectl.Config{Conn: exp.Conn(), Node: pki.ClientCN, MaxSnaplen: 128, BackoffBase: 50 * time.Millisecond})
	}()
	t.Cleanup(func() { stop(); <-agentDone; exp.Close() })

	captureAs := func(tok string, args ...string) (int, string, string) {
		var out, errOut strings.Builder
		env := func(k string) string {
			if k == "FLOWLENS_CAPTURE_TOKEN" {
				return tok
			}
			return ""
		}
		code := run(ctx, append([]string{"capture", "--server", col, "--tls-ca", pki.CA, "-o", "json", "--duration", "5s"}, args...), env, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	want := `: forbidden: User "system:serviceaccount:flowlens:reader" cannot create flowcollectors/capture in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-capture to it` + "\n"
	if code, out, errOut := captureAs(token["reader"]); code != 1 || out != "" || !strings.HasPrefix(errOut, "flowlens capture: "+col) || !strings.HasSuffix(errOut, want) {
		t.Errorf("without the permission: exit %d, stdout %q, stderr %q; want 1 and ...%s", code, out, errOut, want)
	}
	wantExporter := strings.ReplaceAll(want, "flowlens:reader", "flowlens:exporter")
	if code, out, errOut := captureAs(token["exporter"]); code != 1 || out != "" || !strings.HasSuffix(errOut, wantExporter) {
		t.Errorf("with the export permission only: exit %d, stdout %q, stderr %q; want 1 and ...%s", code, out, errOut, wantExporter)
	}
	if code, out, errOut := captureAs(""); code != 1 || out != "" || !strings.Contains(errOut, "capturing packets needs a bearer token whose user may create flowcollectors/capture in API group flowlens.io") {
		t.Errorf("without a token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The agent's stream is up once the collector lists it: poll by
	// capturing until the node answers.
	var code int
	var out, errOut string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out, errOut = captureAs(token["capturer"], "--port", "5353")
		if strings.Contains(errOut, "node "+pki.ClientCN) || time.Now().After(deadline) {
			break
		}
	}
	wantErr := "0 packets captured\ncapture ended: no agent of a matching node could capture\nnode " + pki.ClientCN +
		": capture is disabled on this node's agent (--capture=false; the operator's spec.agent.capture.enable)\n"
	if code != exitNoCapture || out != "" || errOut != wantErr {
		t.Errorf("as a capturer, agent's capture disabled: exit %d (want 3), stdout %q, stderr\n%s\nwant\n%s", code, out, errOut, wantErr)
	}
	// Every capture is logged with who asked what.
	logged := ""
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if logged = proc.Log.String(); strings.Contains(logged, "system:serviceaccount:flowlens:capturer") {
			break
		}
	}
	for _, s := range []string{`msg=capture `, `user=system:serviceaccount:flowlens:capturer`, `filter="port=[5353]"`, `duration=5s`} {
		if !strings.Contains(logged, s) {
			t.Errorf("the collector's log lacks %q:\n%s", s, logged)
		}
	}
}
