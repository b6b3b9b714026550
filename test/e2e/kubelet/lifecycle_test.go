//go:build e2e_kubelet

package kubelet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	ebpflink "github.com/cilium/ebpf/link"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// attached lists, as the kernel has them, the tcx links on the interfaces
// ifaces (this node's, which no other test touches): each link's program
// ID, by "interface/attach type".
func attached(t *testing.T, ifaces []string) map[string][]ebpf.ProgramID {
	t.Helper()
	names := map[uint32]string{}
	for _, name := range ifaces {
		if i, err := net.InterfaceByName(name); err == nil {
			names[uint32(i.Index)] = name
		}
	}
	out := map[string][]ebpf.ProgramID{}
	it := new(ebpflink.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != ebpflink.TCXType {
			continue // detached meanwhile, or not tcx
		}
		if name, ok := names[info.TCX().Ifindex]; ok {
			k := fmt.Sprintf("%s/%v", name, info.TCX().AttachType)
			out[k] = append(out[k], info.Program)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// loaded returns those of ids the kernel still has.
func loaded(ids []ebpf.ProgramID) []ebpf.ProgramID {
	var left []ebpf.ProgramID
	for _, id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			p.Close()
		}
		left = append(left, id)
	}
	return left
}

func programIDs(links map[string][]ebpf.ProgramID) []ebpf.ProgramID {
	var ids []ebpf.ProgramID
	for _, l := range links {
		ids = append(ids, l...)
	}
	return ids
}

// checkAttached checks that each of ifaces has the agent's programs
// attached once per direction (ingress, egress), and returns them.
func checkAttached(ctx context.Context, t *testing.T, ifaces []string) map[string][]ebpf.ProgramID {
	t.Helper()
	var links map[string][]ebpf.ProgramID
	cluster.WaitFor(ctx, t, "the agent's programs on "+strings.Join(ifaces, ", "), time.Minute, func() error {
		links = attached(t, ifaces)
		for _, iface := range ifaces {
			for _, dir := range []string{"BPF_TCX_INGRESS", "BPF_TCX_EGRESS"} {
				if n := len(links[iface+"/"+dir]); n != 1 {
					return fmt.Errorf("%d programs at %s %s; all: %v", n, iface, dir, links)
				}
			}
		}
		if len(links) != 2*len(ifaces) {
			return fmt.Errorf("links %v, want ingress and egress on %v only", links, ifaces)
		}
		return nil
	})
	return links
}

// scrape gets the agent's /metrics at the node's address, where its port
// is, over HTTPS with Prometheus' scrape identity (metricstls_test.go).
func scrape(ctx context.Context, t *testing.T, c client.Client, path string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentMetricsURL(ctx, t, c, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := scraper(ctx, t, c, render.MetricsServiceName).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", path, resp.Status, err, body)
	}
	return string(body)
}

// checkMetrics scrapes the agent and checks it reports interfaces
// attached.
func checkMetrics(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	m := scrape(ctx, t, c, "/metrics")
	const want = "flowlens_agent_attached_interfaces "
	if !strings.Contains(m, want) || strings.Contains(m, want+"0\n") {
		var lines []string
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "flowlens_agent_attached") {
				lines = append(lines, l)
			}
		}
		t.Errorf("metrics lack %q: %v", want, lines)
	}
}

// restartAgent deletes the agent pod and waits for the DaemonSet's new one
// to be ready.
func restartAgent(ctx context.Context, t *testing.T, c client.Client, old *corev1.Pod) *corev1.Pod {
	t.Helper()
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	cluster.WaitFor(ctx, t, "a new agent pod", 2*time.Minute, func() error {
		pod = agentPod(ctx, t, c)
		if pod.UID == old.UID {
			return errors.New("still the old pod")
		}
		return nil
	})
	return pod
}

// deleteFlowCollector deletes the FlowCollector and waits until
// everything the operator made is gone: the agent DaemonSet and its pods,
// the certificates, and every object labelled as its (the dashboards'
// ConfigMaps too). The agent namespace stays: manifests/flowlens-operator.yaml
// declares it (the operator's Role is there), so it is not the operator's.
func deleteFlowCollector(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	if err := c.Delete(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(ctx, t, "the agents and certificates to be gone", 3*time.Minute, func() error {
		for _, obj := range []client.Object{
			&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: render.AgentName}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: certs.CAName}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: certs.CollectorTLSName}},
		} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)%s", obj, obj.GetName(), err, podStates(ctx, c, agentNamespace))
			}
		}
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{render.LabelName: render.AgentName}); err != nil {
			return err
		}
		if len(pods.Items) != 0 {
			return fmt.Errorf("%d agent pods left", len(pods.Items))
		}
		return nil
	})
	managed := client.MatchingLabels{render.LabelManagedBy: render.ManagedByValue}
	for _, list := range []client.ObjectList{&corev1.ConfigMapList{}, &corev1.ServiceList{}, &corev1.ServiceAccountList{}, &corev1.PodList{}} {
		if err := c.List(ctx, list, managed); err != nil {
			t.Fatal(err)
		}
		if n := metaLen(list); n != 0 {
			t.Errorf("%d %T left labelled managed-by %s", n, list, render.ManagedByValue)
		}
	}
}

func metaLen(list client.ObjectList) int {
	switch l := list.(type) {
	case *corev1.ConfigMapList:
		return len(l.Items)
	case *corev1.ServiceList:
		return len(l.Items)
	case *corev1.ServiceAccountList:
		return len(l.Items)
	case *corev1.PodList:
		return len(l.Items)
	}
	return -1
}

// checkDetached waits until no tcx link is left on ifaces and none of the
// programs ids is loaded.
func checkDetached(ctx context.Context, t *testing.T, ifaces []string, ids []ebpf.ProgramID) {
	t.Helper()
	cluster.WaitFor(ctx, t, "the agent's links and programs to be gone", time.Minute, func() error {
		if links := attached(t, ifaces); len(links) != 0 {
			return fmt.Errorf("links left: %v", links)
		}
		if left := loaded(ids); len(left) != 0 {
			return fmt.Errorf("programs left: %v", slices.Sorted(slices.Values(left)))
		}
		return nil
	})
}
