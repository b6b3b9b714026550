package install

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// kubeconfig writes a kubeconfig file reaching the apiserver of cfg as its
// administrator, for helm.
func kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHelmInstall runs the README's Helm commands against a real
// kube-apiserver (envtest, with the Prometheus Operator's CRDs): install
// into a namespace helm creates, with the ServiceMonitors and the
// PrometheusRule on; upgrade with a changed value; uninstall. The apiserver
// stores and validates the objects (no controller runs them): the
// FlowCollector CRD from the chart's crds/, the collector in the agents'
// namespace the chart creates, the monitoring objects.
func TestHelmInstall(t *testing.T) {
	helmBin(t)
	env := envtest.StartT(t, envtest.Options{CRDs: monitoringCRDs(t)})
	kc := kubeconfig(t, env.Config)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k8s, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	get := func(obj client.Object, ns, name string) error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	}
	must := func(obj client.Object, ns, name string) {
		t.Helper()
		if err := get(obj, ns, name); err != nil {
			t.Fatalf("after helm: %v", err)
		}
	}

	helm(t, "install", "flowlens", chart, "--kubeconfig", kc, "--namespace", chartNamespace, "--create-namespace",
		"--set", "serviceMonitors.enabled=true,prometheusRule.enabled=true")
	must(&apiextensionsv1.CustomResourceDefinition{}, "", "flowcollectors.flowlens.io")
	must(&appsv1.Deployment{}, chartNamespace, "flowlens-operator")
	must(&corev1.Service{}, chartNamespace, "flowlens-operator-metrics")
	must(&corev1.ConfigMap{}, chartNamespace, "flowlens-dashboard-traffic")
	ns := &corev1.Namespace{}
	must(ns, "", "flowlens")
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace flowlens labels %v, want pod-security.kubernetes.io/enforce: privileged", ns.Labels)
	}
	collector := &appsv1.Deployment{}
	must(collector, "flowlens", "flowlens-collector")
	// The targets' ServiceMonitors beside the scrape identity's Secret, in
	// the agents' namespace; the operator's and the rule in the release's.
	for gvk, ns := range map[string]string{"ServiceMonitor flowlens-agent": "flowlens", "ServiceMonitor flowlens-collector": "flowlens",
		"ServiceMonitor flowlens-collector-kafka": "flowlens", "ServiceMonitor flowlens-operator": chartNamespace, "PrometheusRule flowlens": chartNamespace} {
		u := monitoringObject(gvk)
		must(u, ns, u.GetName())
	}

	helm(t, "upgrade", "flowlens", chart, "--kubeconfig", kc, "--namespace", chartNamespace,
		"--set", "serviceMonitors.enabled=true,prometheusRule.enabled=true,collector.replicas=2")
	must(collector, "flowlens", "flowlens-collector")
	if r := collector.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("after helm upgrade --set collector.replicas=2: replicas %v", r)
	}

	helm(t, "uninstall", "flowlens", "--kubeconfig", kc, "--namespace", chartNamespace)
	if err := get(&appsv1.Deployment{}, chartNamespace, "flowlens-operator"); !apierrors.IsNotFound(err) {
		t.Errorf("operator Deployment after helm uninstall: %v, want not found", err)
	}
	// Helm never deletes the CRDs of crds/ (nor so the FlowCollectors).
	must(&apiextensionsv1.CustomResourceDefinition{}, "", "flowcollectors.flowlens.io")
}

// monitoringObject returns an empty monitoring.coreos.com/v1 object to get,
// from "Kind name".
func monitoringObject(kindName string) *unstructured.Unstructured {
	kind, name, _ := strings.Cut(kindName, " ")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(monitoringAPI)
	u.SetKind(kind)
	u.SetName(name)
	return u
}
