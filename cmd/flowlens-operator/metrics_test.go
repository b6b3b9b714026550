package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flowlens/flowlens/internal/shared/httpserve/httpservetest"
	"github.com/flowlens/flowlens/internal/shared/version"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// startOperator runs the operator's run against a real API server (envtest)
// with args, and returns its metrics address and the API server's admin
// configuration.
func startOperator(t *testing.T, args ...string) (string, *rest.Config) {
	t.Helper()
	env := envtest.StartT(t, envtest.Options{CRDs: []string{filepath.Join("config", "crd", "bases")}})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	c := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: c.CertData, ClientKeyData: c.KeyData, Token: c.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	metricsAddr, probeAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1) // holds run's result until read
	go func() {
		done <- run(ctx, append([]string{"--kubeconfig", kubeconfig, "--metrics-bind-address", metricsAddr,
			"--health-probe-bind-address", probeAddr}, args...), nil, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	// Serving once the manager has started: wait for the port, or the end
	// (a guard against a hang, not a timing).
	for deadline := time.Now().Add(time.Minute); ; {
		select {
		case err := <-done:
			done <- nil // for the cleanup
			t.Fatalf("operator exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("operator serves no metrics on %s after a minute", metricsAddr)
		}
		if conn, err := net.Dial("tcp", metricsAddr); err == nil {
			conn.Close()
			return metricsAddr, env.Config
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func buildInfoLine() string {
	return `flowlens_operator_build_info{goversion="` + runtime.Version() + `",revision="unknown",version="` + version.Version + `"} 1`
}

// --metrics-secure with --metrics-cert-path and --metrics-client-ca: a
// scrape with the CA and a client certificate gets the metrics, with
// flowlens_operator_build_info; plain HTTP, no client certificate, or one
// of another CA do not. (Plain HTTP is controller-runtime's default, served
// in internal/operator/controller's envtest suite.)
func TestMetricsSecure(t *testing.T) {
	pki := receivertest.NewPKI(t)
	certDir := t.TempDir()
	for src, dst := range map[string]string{pki.ServerCert: "tls.crt", pki.ServerKey: "tls.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certDir, dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := startOperator(t, "--metrics-secure", "--metrics-cert-path", certDir, "--metrics-client-ca", pki.CA)
	url := "https://" + addr + "/metrics"

	code, body, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.ClientCert, pki.ClientKey), url)
	if err != nil || code != 200 || !strings.Contains(body, buildInfoLine()) {
		t.Errorf("mTLS scrape: %d %v, want %s in:\n%s", code, err, buildInfoLine(), body)
	}
	if code, body, err := httpservetest.Get(http.DefaultClient, "http://"+addr+"/metrics"); err == nil &&
		(code != http.StatusBadRequest || strings.Contains(body, "flowlens_operator")) {
		t.Errorf("plaintext scrape of the HTTPS endpoint: %d\n%s", code, body)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, "", ""), url); err == nil {
		t.Errorf("scrape without a client certificate got %d, want the handshake refused", code)
	}
	if code, _, err := httpservetest.Get(httpservetest.Client(t, pki.CA, pki.OtherCert, pki.OtherKey), url); err == nil {
		t.Errorf("scrape with a certificate of another CA got %d, want the handshake refused", code)
	}
}

func TestMetricsFlagErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-cert-path", dir}, "--metrics-cert-path and --metrics-client-ca need --metrics-secure"},
		{[]string{"--metrics-secure", "--metrics-cert-path", dir},
			`invalid --metrics-cert-path "` + dir + `": stat ` + filepath.Join(dir, "tls.crt") + `: no such file or directory`},
		{[]string{"--metrics-secure", "--metrics-client-ca", notPEM}, `invalid --metrics-client-ca "` + notPEM + `": no PEM certificate in it`},
	} {
		err := run(context.Background(), tc.args, nil, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || err.Error() != tc.want {
			t.Errorf("%v: %v, want usage error %q", tc.args, err, tc.want)
		}
	}
}

// --metrics-secure without --metrics-client-ca: controller-runtime's
// authentication and authorization filter. A scrape without a token gets
// 401; with the token of a ServiceAccount allowed nothing, 403; with one
// bound to a ClusterRole allowing get on /metrics (docs/security.md's scrape
// identity), the metrics. The API server reviews each token.
func TestMetricsTokenAuth(t *testing.T) {
	addr, cfg := startOperator(t, "--metrics-secure")
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "flowlens-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flowlens-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scraper, other := token("prometheus"), token("nobody")

	// controller-runtime's self-signed certificate: the client does not
	// verify it (the token is what this test is about).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test server
	scrape := func(tok string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := scrape(""); code != http.StatusUnauthorized || strings.Contains(body, "flowlens_operator") {
		t.Errorf("scrape without a token: %d\n%s", code, body)
	}
	if code, body := scrape(other); code != http.StatusForbidden || strings.Contains(body, "flowlens_operator") {
		t.Errorf("scrape with a token allowed nothing: %d\n%s", code, body)
	}
	if code, body := scrape(scraper); code != http.StatusOK || !strings.Contains(body, buildInfoLine()) {
		t.Errorf("scrape with the scrape identity's token: %d, want %s in\n%s", code, buildInfoLine(), body)
	}
}
