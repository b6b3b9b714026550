package render

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
)

// TestPlainExampleMatchesOperator: manifests/flowlens-agent-daemonset.yaml,
// written by hand for users without the operator, deploys the agent the way
// the operator does for a default FlowCollector, but for the metrics' TLS:
// without the operator there is no CA to issue the metrics certificate, so
// it serves them as spec.metricsPlaintext does (on the node's address).
func TestPlainExampleMatchesOperator(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "..", "manifests", "flowlens-agent-daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var meta struct{ Kind string }
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "DaemonSet":
			err = json.Unmarshal(raw, &ds)
		case "ConfigMap":
			err = json.Unmarshal(raw, &cm)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// The operator's objects for a default FlowCollector, as typed objects.
	fc := collector(v1alpha1.FlowCollectorSpec{MetricsPlaintext: true})
	objs, err := Build(fc, Options{DefaultImage: "ghcr.io/flowlens/flowlens-agent:v0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	var want appsv1.DaemonSet
	roundTrip(t, objs.DaemonSet, &want)

	// Same agent configuration, as the agent reads it.
	s := WithDefaults(fc.Spec)
	wantCfg, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loadConfig(t, []byte(cm.Data[ConfigKey])), loadConfig(t, wantCfg); !reflect.DeepEqual(got, want) {
		t.Errorf("example configuration\n%+v\nthe operator's\n%+v", got, want)
	}

	if !reflect.DeepEqual(ds.Spec.Selector, want.Spec.Selector) || !reflect.DeepEqual(ds.Spec.UpdateStrategy, want.Spec.UpdateStrategy) {
		t.Errorf("selector or update strategy differ:\n%+v %+v\n%+v %+v", ds.Spec.Selector, ds.Spec.UpdateStrategy, want.Spec.Selector, want.Spec.UpdateStrategy)
	}
	gotPod, wantPod := ds.Spec.Template.Spec, want.Spec.Template.Spec
	if !reflect.DeepEqual(gotPod.Volumes, wantPod.Volumes) {
		t.Errorf("volumes differ:\n%+v\n%+v", gotPod.Volumes, wantPod.Volumes)
	}
	if gotPod.HostNetwork != wantPod.HostNetwork || !reflect.DeepEqual(gotPod.AutomountServiceAccountToken, wantPod.AutomountServiceAccountToken) || gotPod.DNSPolicy != wantPod.DNSPolicy || gotPod.PriorityClassName != wantPod.PriorityClassName ||
		!reflect.DeepEqual(gotPod.Tolerations, wantPod.Tolerations) || !reflect.DeepEqual(gotPod.NodeSelector, wantPod.NodeSelector) {
		t.Errorf("pod settings differ:\n%+v\n%+v", gotPod, wantPod)
	}
	g, w := gotPod.Containers[0], wantPod.Containers[0]
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"image", g.Image, w.Image},
		{"args", g.Args, w.Args},
		{"env", g.Env, w.Env},
		{"ports", g.Ports, w.Ports},
		{"mounts", g.VolumeMounts, w.VolumeMounts},
		{"security context", g.SecurityContext, w.SecurityContext},
		{"startup probe", g.StartupProbe, w.StartupProbe},
		{"liveness probe", g.LivenessProbe, w.LivenessProbe},
		{"readiness probe", g.ReadinessProbe, w.ReadinessProbe},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s differ:\nexample  %+v\noperator %+v", c.what, c.got, c.want)
		}
	}
	if !g.Resources.Requests.Cpu().Equal(*w.Resources.Requests.Cpu()) || !g.Resources.Limits.Memory().Equal(*w.Resources.Limits.Memory()) {
		t.Errorf("resources differ: %+v, %+v", g.Resources, w.Resources)
	}
	if caps := g.SecurityContext.Capabilities.Add; !slices.Equal(caps, BaseCapabilities) {
		t.Errorf("capabilities %v, want %v", caps, BaseCapabilities)
	}
}

// roundTrip converts an apply configuration into the typed object.
func roundTrip(t *testing.T, from, to any) {
	t.Helper()
	data, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, to); err != nil {
		t.Fatal(err)
	}
}

func loadConfig(t *testing.T, data []byte) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, mountedFiles(t, data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load([]string{"--config", path}, func(k string) string {
		if k == "NODE_NAME" {
			return "node-1"
		}
		return ""
	})
	if err != nil {
		t.Fatalf("the agent rejects %s: %v\n%s", path, err, data)
	}
	c.ConfigFile = ""
	return c
}
