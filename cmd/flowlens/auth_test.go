package main

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// writeKubeconfig writes a kubeconfig for cfg's API server with user.
func writeKubeconfig(t *testing.T, cfg *rest.Config, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["lab"] = user
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "lab"}
	kc.CurrentContext = "lab"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	return file
}

func restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// observe against a collector with --auth kubernetes on a real
// kube-apiserver (envtest): a reader's token reads; a token without the
// permission gets "forbidden" naming it and the ClusterRole to bind; no
// token says what to do. And what observe takes from a kubeconfig: the
// token (as is, from a file, from an exec plugin; none for a client
// certificate) and the collector's CA from ConfigMap flowlens-ca.
func TestObserveAuthorization(t *testing.T) {
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
	token := authLab(t, cs, []string{"reader", "nobody"}, readerRole)

	// What observe reads in the collectors' namespace besides (listing the
	// collector pods and port-forwarding need their own rules).
	_, err = cs.RbacV1().Roles("flowlens").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "observe"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{caConfigMap}, Verbs: []string{"get"}}}},
		metav1.CreateOptions{})
	must(err)
	_, err = cs.RbacV1().RoleBindings("flowlens").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "observe"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "observe"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: "flowlens"}}}, metav1.CreateOptions{})
	must(err)

	admin := writeKubeconfig(t, cfg, &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData})
	pki := receivertest.NewPKI(t)
	metrics := testkit.FreeAddr(t)
	col := startCollector(t, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--tls-client-ca="+pki.CA,
		"--auth=kubernetes", "--kubeconfig="+admin, "--k8s-enrich=false", "--metrics-address="+metrics)
	a, _ := lab()
	collectortest.Export(t, grpcexp.Config{Target: col, NodeName: pki.ClientCN, AgentIP: netip.MustParseAddr("192.0.2.1"),
		TLSCA: pki.CA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey}, a)

	observeAs := func(tok string) (int, string, string) {
		var out, errOut strings.Builder
		env := func(k string) string {
			if k == "FLOWLENS_OBSERVE_TOKEN" {
				return tok
			}
			return ""
		}
		code := run(ctx, []string{"observe", "--server", col, "--tls-ca", pki.CA, "-o", "json"}, env, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := observeAs(token["reader"]); code != 0 || strings.Join(jsonNames(t, out), " ") != "f1 f2 f5" {
		t.Errorf("as a reader: exit %d, flows %q, stderr %s", code, jsonNames(t, out), errOut)
	}
	want := `: forbidden: User "system:serviceaccount:flowlens:nobody" cannot get flowcollectors/flows in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it` + "\n"
	if code, out, errOut := observeAs(token["nobody"]); code != 1 || out != "" || !strings.HasPrefix(errOut, "flowlens observe: "+col) || !strings.HasSuffix(errOut, want) {
		t.Errorf("without the permission: exit %d, stdout %q, stderr %q; want 1 and ...%s", code, out, errOut, want)
	}
	if code, out, errOut := observeAs(""); code != 1 || out != "" || !strings.Contains(errOut, "reading flows needs a bearer token") ||
		!strings.Contains(errOut, `give one with --token, e.g. --token "$(kubectl create token <serviceaccount> -n <namespace>)" for a ServiceAccount bound to the ClusterRole flowlens-flows-reader`) {
		t.Errorf("without a token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// The kubeconfig's token, however the kubeconfig gives it.
	tokenFile := filepath.Join(t.TempDir(), "token")
	must(os.WriteFile(tokenFile, []byte(token["reader"]), 0o600))
	plugin := filepath.Join(t.TempDir(), "plugin")
	must(os.WriteFile(plugin, []byte("#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"from-the-plugin\"}}'\n"), 0o755))
	for _, tc := range []struct {
		name string
		user *clientcmdapi.AuthInfo
		want string
	}{
		{"token", &clientcmdapi.AuthInfo{Token: token["reader"]}, token["reader"]},
		{"token file", &clientcmdapi.AuthInfo{TokenFile: tokenFile}, token["reader"]},
		{"exec plugin", &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: plugin,
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}, "from-the-plugin"},
		{"client certificate", &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}, ""},
	} {
		got, err := kubeconfigToken(restConfig(t, writeKubeconfig(t, cfg, tc.user)))
		if err != nil || got != tc.want {
			t.Errorf("%s: token %.20q, %v; want %.20q", tc.name, got, err, tc.want)
		}
	}

	// Through the kubeconfig: TLS with ConfigMap flowlens-ca when there is
	// one (and the token then goes), plaintext without (and it does not).
	kube := restConfig(t, writeKubeconfig(t, cfg, &clientcmdapi.AuthInfo{Token: token["reader"]}))
	o := &options{namespace: "flowlens"}
	c, err := connect(ctx, o, "localhost", kube)
	must(err)
	if c.tls || c.token || !strings.Contains(c.noToken, "the token is sent only over TLS") {
		t.Errorf("without ConfigMap flowlens-ca: tls %v token %v (%s), %v", c.tls, c.token, c.noToken, err)
	}
	ca, err := os.ReadFile(pki.CA)
	must(err)
	_, err = cs.CoreV1().ConfigMaps("flowlens").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "flowlens-ca"},
		Data: map[string]string{"ca.crt": string(ca)}}, metav1.CreateOptions{})
	must(err)
	c, err = connect(ctx, o, "localhost", kube)
	must(err)
	if !c.tls || !c.token {
		t.Fatalf("with ConfigMap flowlens-ca: tls %v token %v, %v", c.tls, c.token, err)
	}
	// That connection reads the collector.
	var out, errOut strings.Builder
	qo := &options{output: "json"}
	bw := bufio.NewWriter(&out)
	if err := query(ctx, qo, []string{strings.Replace(col, "127.0.0.1", "localhost", 1)}, c, &printer{o: qo, w: bw}, &errOut); err != nil {
		t.Fatalf("query with the kubeconfig's token over the ConfigMap's CA: %v", err)
	}
	must(bw.Flush())
	if got := strings.Join(jsonNames(t, out.String()), " "); got != "f1 f2 f5" {
		t.Errorf("through the kubeconfig: %q", got)
	}

	// Without the Role flowlens-observe, listing the collector pods is
	// refused, and the message names the Role to bind.
	nobody := rest.AnonymousClientConfig(cfg)
	nobody.BearerToken = token["nobody"]
	_, err = collectorPods(ctx, nobody, "flowlens")
	if want := "; an administrator can bind the Role flowlens-observe of that namespace to you"; err == nil ||
		!strings.HasPrefix(err.Error(), "listing the collector pods in namespace flowlens: ") ||
		!strings.Contains(err.Error(), "forbidden") || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("listing the pods as nobody: %v, want forbidden ending %q", err, want)
	}

	// The API server goes away: past its answer's TTL (kubeauth's 10 s),
	// the reader still reads on the last answer, and the collector counts
	// the one call it authorized so.
	url := "http://" + metrics + "/metrics"
	promtest.Expect(t, promtest.Scrape(t, url), 0, collector.MetricAuthStaleAnswers)
	env.StopAPIServer(t)
	time.Sleep(11 * time.Second)
	if code, out, errOut := observeAs(token["reader"]); code != 0 || strings.Join(jsonNames(t, out), " ") != "f1 f2 f5" {
		t.Errorf("as a reader, API server gone: exit %d, flows %q, stderr %s", code, jsonNames(t, out), errOut)
	}
	promtest.Expect(t, promtest.Scrape(t, url), 1, collector.MetricAuthStaleAnswers)
}
