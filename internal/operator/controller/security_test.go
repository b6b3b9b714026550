package controller

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
)

func grpcExporter(g v1alpha1.GRPCExporter) []v1alpha1.Exporter {
	return []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC, GRPC: &g}}
}

func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

// TestSecureDefault: a FlowCollector exporting over gRPC with nothing said
// about TLS gets issue #27's secure default from a real API server: the
// CA, the collector's certificate (for its Service's names, signed by that
// CA) and the bundle, owned by the FlowCollector; agents that verify the
// collector with the bundle and send a projected token of audience
// flowlens-collector; the export ClusterRole bound to the agents'
// ServiceAccount; the NetworkPolicies, deleted when disabled.
func TestSecureDefault(t *testing.T) {
	needEnv(t)
	const ns = "fl-secure"
	ctx := context.Background()
	fc := newCollector(ns)
	fc.Spec.Exporters = grpcExporter(v1alpha1.GRPCExporter{TargetHost: "flowlens-collector.fl-secure.svc", TargetPort: 9990})
	create(t, fc)
	fc = get(t)

	caSecret := waitFor(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.CAName}}, exists)
	serving := waitFor(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.CollectorTLSName}}, exists)
	bundle := waitFor(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.CAName}}, exists)
	ca := pemCerts(t, caSecret.Data["tls.crt"])
	leaf := pemCerts(t, serving.Data["tls.crt"])
	roots := pemCerts(t, []byte(bundle.Data["ca.crt"]))
	if len(ca) != 1 || !ca[0].IsCA || len(roots) != 1 || !roots[0].Equal(ca[0]) || len(caSecret.Data["tls.key"]) == 0 {
		t.Fatalf("CA Secret and bundle: %d CA certificates, %d in the bundle", len(ca), len(roots))
	}
	pool := x509.NewCertPool()
	pool.AddCert(roots[0])
	for _, name := range []string{"flowlens-collector.fl-secure.svc", "flowlens-collector-kafka.fl-secure.svc.cluster.local"} {
		if _, err := leaf[0].Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the collector's certificate as %s: %v", name, err)
		}
	}
	if string(serving.Data["ca.crt"]) != bundle.Data["ca.crt"] || serving.Type != corev1.SecretTypeTLS {
		t.Errorf("serving Secret type %q, ca.crt equal to the bundle: %v", serving.Type, string(serving.Data["ca.crt"]) == bundle.Data["ca.crt"])
	}
	for _, o := range []client.Object{caSecret, serving, bundle} {
		checkOwner(t, o, fc)
	}
	checkMetricsSecrets(t, ns, ca[0], fc)

	// The agents: TLS with the bundle, the token.
	cfg := waitFor(t, configMap(ns), exists).Data[render.ConfigKey]
	for _, want := range []string{"\ntls: true\n", "\ntls_ca: /etc/flowlens/ca/ca.crt\n", "\ntoken_file: /var/run/secrets/flowlens/token\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("agent.yaml lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "insecure_plaintext") {
		t.Errorf("agent.yaml says insecure_plaintext:\n%s", cfg)
	}
	ds := waitFor(t, agentDaemonSet(ns), exists)
	pod := ds.Spec.Template.Spec
	var caVol, tokenVol *corev1.Volume
	for i := range pod.Volumes {
		switch pod.Volumes[i].Name {
		case "ca":
			caVol = &pod.Volumes[i]
		case "token":
			tokenVol = &pod.Volumes[i]
		}
	}
	if caVol == nil || caVol.ConfigMap == nil || caVol.ConfigMap.Name != certs.CAName {
		t.Errorf("no volume of the ConfigMap %s: %+v", certs.CAName, caVol)
	}
	if tokenVol == nil || tokenVol.Projected == nil || len(tokenVol.Projected.Sources) != 1 || tokenVol.Projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("no projected token volume: %+v", tokenVol)
	}
	if tok := tokenVol.Projected.Sources[0].ServiceAccountToken; tok.Audience != "flowlens-collector" || *tok.ExpirationSeconds != 3600 || tok.Path != "token" {
		t.Errorf("projected token %+v, want audience flowlens-collector, 3600 s, file token", tok)
	}
	mounts := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["ca"] != "/etc/flowlens/ca" || mounts["token"] != "/var/run/secrets/flowlens" {
		t.Errorf("mounts %v", mounts)
	}

	// The right to export, bound to the agents and nothing else.
	role := waitFor(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: render.ExportRoleName}}, exists)
	want := []rbacv1.PolicyRule{{APIGroups: []string{"flowlens.io"}, Resources: []string{"flowcollectors/flows"}, ResourceNames: []string{"cluster"}, Verbs: []string{"create"}}}
	if fmt.Sprint(role.Rules) != fmt.Sprint(want) {
		t.Errorf("%s rules %+v, want %+v", render.ExportRoleName, role.Rules, want)
	}
	// Cluster-scoped: an earlier test's FlowCollector (another namespace)
	// may have written it; the operator rewrites it for this one.
	waitFor(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: render.ExportRoleName}}, func(rb *rbacv1.ClusterRoleBinding) error {
		if rb.RoleRef.Name != render.ExportRoleName || len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" ||
			rb.Subjects[0].Name != render.AgentName || rb.Subjects[0].Namespace != ns {
			return fmt.Errorf("%s binds %+v to %+v, want only service account %s/%s", render.ExportRoleName, rb.RoleRef, rb.Subjects, ns, render.AgentName)
		}
		return nil
	})

	// The NetworkPolicies: every pod's ingress denied but the collectors'
	// gRPC port from outside the pod network and metrics from monitoring.
	deny := waitFor(t, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.DenyPolicyName}}, exists)
	if len(deny.Spec.PodSelector.MatchLabels)+len(deny.Spec.PodSelector.MatchExpressions) != 0 || len(deny.Spec.Ingress) != 0 ||
		!slices.Equal(deny.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("deny policy %+v", deny.Spec)
	}
	coll := waitFor(t, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.CollectorPolicyName}}, exists)
	if in := coll.Spec.Ingress; len(in) != 2 || in[0].Ports[0].Port.IntVal != 9990 || in[0].From[0].IPBlock == nil ||
		in[1].Ports[0].Port.IntVal != 9401 || !slices.Equal(in[1].From[0].NamespaceSelector.MatchExpressions[0].Values, []string{"monitoring"}) {
		t.Errorf("collector policy ingress %+v", coll.Spec.Ingress)
	}
	checkOwner(t, coll, fc)

	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		off := false
		fc.Spec.NetworkPolicy.Enable = &off
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, wait, func() error {
		for _, name := range render.NetworkPolicyNames {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &networkingv1.NetworkPolicy{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("NetworkPolicy %s still there (err %v)", name, err)
			}
		}
		return nil
	})

	// Plaintext only when asked: no token, no CA.
	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		fc.Spec.Exporters[0].GRPC.InsecurePlaintext = true
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		c := cm.Data[render.ConfigKey]
		if !strings.Contains(c, "\ninsecure_plaintext: true\n") || strings.Contains(c, "token_file") || strings.Contains(c, "tls") {
			return fmt.Errorf("agent.yaml with insecurePlaintext:\n%s", c)
		}
		return nil
	})
}

// checkMetricsSecrets: the metrics endpoints' serving certificate (for
// their Services' names, ServerAuth alone, with the bundle) and Prometheus'
// scrape identity (flowlens-metrics-scraper, ClientAuth alone), both of ca,
// owned by fc; the default web configuration's ConfigMap; the agents serve
// with it, on their node's address, probed over HTTPS.
func checkMetricsSecrets(t *testing.T, ns string, ca *x509.Certificate, fc *v1alpha1.FlowCollector) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	metrics := waitFor(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.MetricsTLSName}}, exists)
	leaf := pemCerts(t, metrics.Data["tls.crt"])[0]
	for _, name := range []string{"flowlens-agent-metrics." + ns + ".svc", "flowlens-collector-kafka." + ns + ".svc", "flowlens-collector." + ns + ".svc"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the metrics certificate as %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("the metrics serving certificate passes as a client certificate")
	}
	if roots := pemCerts(t, metrics.Data["ca.crt"]); len(roots) != 1 || !roots[0].Equal(ca) || metrics.Type != corev1.SecretTypeTLS {
		t.Errorf("metrics Secret type %q, ca.crt of %d certificates, want the CA", metrics.Type, len(roots))
	}
	scraper := waitFor(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.MetricsClientName}}, exists)
	cl := pemCerts(t, scraper.Data["tls.crt"])[0]
	if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil ||
		cl.Subject.CommonName != certs.MetricsScraper || !slices.Equal(cl.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("scrape identity %q, usages %v, verifies as a client of the CA: %v", cl.Subject.CommonName, cl.ExtKeyUsage, err)
	}
	for _, o := range []client.Object{metrics, scraper} {
		checkOwner(t, o, fc)
	}
	web := waitFor(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.MetricsWebConfigName}}, exists)
	if want, _ := render.DefaultWebConfig(); web.Data[render.WebConfigKey] != string(want) {
		t.Errorf("ConfigMap %s: %q, want the default web configuration", render.MetricsWebConfigName, web.Data[render.WebConfigKey])
	}
	checkOwner(t, web, fc)
	ds := waitFor(t, agentDaemonSet(ns), exists)
	ctr := ds.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["HOST_IP"] != "status.hostIP" || env["FLOWLENS_AGENT_METRICS_ADDRESS"] != "[$(HOST_IP)]:9400" {
		t.Errorf("agent env %v, want the metrics on the node's address", env)
	}
	if p := ctr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("agent readiness probe %+v, want an HTTPS GET", p)
	}
}

// TestUserCA: spec.tls.caSecretRef issues the collector's certificate from
// the user's CA (and none of the operator's own); a Secret that is not a CA
// is reported in Degraded.
func TestUserCA(t *testing.T) {
	needEnv(t)
	const ns = "fl-userca"
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// A user's CA, made by the operator's own code path in another
	// namespace (a real CA Secret, tls.crt and tls.key).
	const other = "fl-userca-src"
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	m := &certs.Manager{Client: k8s, Reader: k8s, FieldOwner: "test"}
	if _, err := m.Ensure(ctx, certs.Target{Namespace: other}); err != nil {
		t.Fatal(err)
	}
	src := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: other, Name: certs.CAName}, src); err != nil {
		t.Fatal(err)
	}
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-ca"}, Type: corev1.SecretTypeTLS, Data: src.Data}
	if err := k8s.Create(ctx, user); err != nil {
		t.Fatal(err)
	}

	fc := newCollector(ns)
	fc.Spec.TLS.CASecretRef = &v1alpha1.SecretRef{Name: "my-ca"}
	create(t, fc)
	serving := waitFor(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.CollectorTLSName}}, exists)
	userCA := pemCerts(t, user.Data["tls.crt"])[0]
	if err := pemCerts(t, serving.Data["tls.crt"])[0].CheckSignatureFrom(userCA); err != nil {
		t.Errorf("the collector's certificate is not the user CA's: %v", err)
	}
	checkMetricsSecrets(t, ns, userCA, get(t))
	bundle := waitFor(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: certs.CAName}}, exists)
	if roots := pemCerts(t, []byte(bundle.Data["ca.crt"])); len(roots) != 1 || !roots[0].Equal(userCA) {
		t.Errorf("bundle of %d certificates, want the user's CA", len(roots))
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: certs.CAName}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a CA Secret of the operator's beside the user's (err %v)", err)
	}

	// Pointed at a Secret that is not there: Degraded says which.
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.TLS.CASecretRef.Name = "missing" }); err != nil {
		t.Fatal(err)
	}
	fc = waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonApplyFailed)
	if c := findCondition(fc, v1alpha1.ConditionDegraded); !strings.Contains(c.Message, `reading the CA Secret fl-userca/missing: secrets "missing" not found`) {
		t.Errorf("Degraded message %q", c.Message)
	}
}

// TestCertManager: spec.tls.certManager applies a cert-manager Certificate
// for the collector's Secret; without cert-manager's CRD the operator says
// so in Degraded.
func TestCertManager(t *testing.T) {
	needEnv(t)
	const ns = "fl-certmanager"
	fc := newCollector(ns)
	fc.Spec.TLS.CertManager = &v1alpha1.CertManagerTLS{IssuerRef: v1alpha1.CertManagerIssuerRef{Name: "ca-issuer"}}
	create(t, fc)
	fc = waitCondition(t, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonApplyFailed)
	if c := findCondition(fc, v1alpha1.ConditionDegraded); !strings.Contains(c.Message, "applying the cert-manager Certificate fl-certmanager/flowlens-collector-tls (is cert-manager installed?)") {
		t.Errorf("Degraded message %q", c.Message)
	}
	if fc.Spec.TLS.CertManager.IssuerRef.Kind != "Issuer" || fc.Spec.TLS.CertManager.IssuerRef.Group != "cert-manager.io" {
		t.Errorf("issuerRef defaults %+v", fc.Spec.TLS.CertManager.IssuerRef)
	}
}

func findCondition(fc *v1alpha1.FlowCollector, typ string) metav1.Condition {
	for _, c := range fc.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}
