package controller

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readManifest decodes every object of a multi-document YAML file of
// manifests/.
func readManifest(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	return readYAML(t, filepath.Join("manifests", name))
}

// readYAML decodes every object of a multi-document YAML file, named by its
// path in the repository.
func readYAML(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s has no objects", name)
	}
	return objs
}

// applyManifest server-side applies every object of a manifest in order, as
// `kubectl apply --server-side -f` does, and returns them.
func applyManifest(t *testing.T, name string, opts ...client.ApplyOption) []*unstructured.Unstructured {
	t.Helper()
	objs := readManifest(t, name)
	opts = append(opts, client.FieldOwner("kubectl"), client.ForceOwnership)
	for _, u := range objs {
		if err := k8s.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
			t.Errorf("%s: applying %s %s: %v", name, u.GetKind(), u.GetName(), err)
		}
	}
	return objs
}

// TestManifestsApply: the rendered manifests apply cleanly to a real API
// server: the operator's (CRD, namespace, RBAC, Deployment) and the plain
// agent DaemonSet for real, and the FlowCollector sample as a server-side
// dry run (a real one would make the reconciler of this suite act on it).
func TestManifestsApply(t *testing.T) {
	needEnv(t)
	ctx := context.Background()

	objs := applyManifest(t, "flowlens-operator.yaml")
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			t.Errorf("%s %s not found after apply: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for _, k := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"} {
		if kinds[k] == 0 {
			t.Errorf("flowlens-operator.yaml has no %s (kinds %v)", k, kinds)
		}
	}

	applyManifest(t, "flowlens-agent-daemonset.yaml")
	applyManifest(t, "flowlens-collector.yaml")

	for _, u := range applyManifest(t, "flowcollector.yaml", client.DryRunAll) {
		if u.GetKind() != "FlowCollector" || u.GetName() != "cluster" {
			t.Errorf("flowcollector.yaml holds %s %s, want the FlowCollector cluster", u.GetKind(), u.GetName())
		}
	}
}

// TestCollectorManifestDeclaresNoNamespace: the collector manifest declares no
// Namespace, so `kubectl delete -f manifests/flowlens-collector.yaml` never
// deletes the agents' namespace (which the operator creates for the
// FlowCollector); every object it declares is namespaced in flowlens or
// cluster-scoped RBAC.
func TestCollectorManifestDeclaresNoNamespace(t *testing.T) {
	for _, u := range readManifest(t, "flowlens-collector.yaml") {
		switch u.GetKind() {
		case "Namespace":
			t.Errorf("flowlens-collector.yaml declares Namespace %s: deleting the collector would delete it", u.GetName())
		case "ClusterRole", "ClusterRoleBinding":
		default:
			if u.GetNamespace() != "flowlens" {
				t.Errorf("flowlens-collector.yaml: %s %s in namespace %q, want flowlens", u.GetKind(), u.GetName(), u.GetNamespace())
			}
		}
	}
}

// TestCollectorManifestNoServiceLinks: the collector's pods get no Docker-link
// variables, whose names (FLOWLENS_COLLECTOR_PORT from its own Service) are
// the collector's FLOWLENS_COLLECTOR_ options: make e2e-kubelet's collector
// exited with `invalid FLOWLENS_COLLECTOR_PORT "tcp://10.0.0.241:9990"`.
func TestCollectorManifestNoServiceLinks(t *testing.T) {
	for _, u := range readManifest(t, "flowlens-collector.yaml") {
		if u.GetKind() != "Deployment" {
			continue
		}
		links, found, err := unstructured.NestedBool(u.Object, "spec", "template", "spec", "enableServiceLinks")
		if err != nil || !found || links {
			t.Errorf("Deployment %s: enableServiceLinks %v (set %v, %v), want false", u.GetName(), links, found, err)
		}
	}
}
