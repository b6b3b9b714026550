//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

const (
	clusterName = "flowlens-e2e"
	nodes       = 3
	// operatorSA is the identity manifests/flowlens-operator.yaml gives the
	// operator.
	operatorSA        = "system:serviceaccount:flowlens-system:flowlens-operator"
	operatorNamespace = "flowlens-system"
	agentNamespace    = "flowlens" // the sample FlowCollector's
)

func TestOperatorOnKwokCluster(t *testing.T) {
	bins := cluster.NeedBins(t, "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	home := t.TempDir()
	start := time.Now()
	kubeconfig := cluster.Start(ctx, t, bins, clusterName, home)
	cluster.Kwokctl(ctx, t, bins, clusterName, home, "scale", "node", "--replicas", fmt.Sprint(nodes))
	t.Logf("kwok cluster with %d nodes up in %v", nodes, time.Since(start).Round(time.Millisecond))

	admin := cluster.NewClient(t, kubeconfig, "")

	// 1. Install the operator as a user would.
	cluster.Apply(ctx, t, admin, "flowlens-operator.yaml", nil)
	waitFor(ctx, t, "the CRD to be established", func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := admin.Get(ctx, client.ObjectKey{Name: "flowcollectors.flowlens.io"}, crd); err != nil {
			return err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return nil
			}
		}
		return errors.New("not established")
	})
	// Its Deployment passes pod security admission (restricted) and gets a
	// (fake) ready pod.
	waitFor(ctx, t, "the operator Deployment to be available", func() error {
		d := &appsv1.Deployment{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: "flowlens-operator"}, d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 1 {
			return fmt.Errorf("status %+v", d.Status)
		}
		return nil
	})

	// 2. Run the operator binary as the operator's ServiceAccount.
	stopOperator := runOperator(ctx, t, kubeconfig, home)
	defer stopOperator()

	// 3. Create the sample FlowCollector; the agents roll out to every node.
	cluster.Apply(ctx, t, admin, "flowcollector.yaml", nil)
	fc := waitReady(ctx, t, admin, 1)
	t.Logf("Ready: %s", meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady).Message)
	hash1 := checkAgentPods(ctx, t, admin)

	// 4. A spec change rolls every agent to the new configuration.
	patch := []byte(`{"spec":{"agent":{"sampling":10}}}`)
	if err := admin.Patch(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	waitReady(ctx, t, admin, 2)
	if hash2 := checkAgentPods(ctx, t, admin); hash2 == hash1 {
		t.Errorf("the agents kept config hash %s after a sampling change", hash1)
	}
	cm := &corev1.ConfigMap{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: render.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[render.ConfigKey], "sampling: 10\n") {
		t.Errorf("ConfigMap not updated:\n%s", cm.Data[render.ConfigKey])
	}

	// 5. A kafka exporter: the operator, with only its manifests' RBAC,
	// runs the Kafka collector Deployment (granting its ClusterRole needs the
	// rights it grants), whose pods get scheduled and ready, which the
	// FlowCollector's CollectorReady says; removing the exporter removes it
	// and the condition.
	patch = []byte(`{"spec":{"exporters":[{"type":"stdout"},{"type":"kafka","kafka":{"brokers":["kafka.kafka.svc:9092"]}}],"collector":{"replicas":2}}}`)
	if err := admin.Patch(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	waitReady(ctx, t, admin, 3)
	collectorKey := client.ObjectKey{Namespace: agentNamespace, Name: render.CollectorName}
	waitFor(ctx, t, "the Kafka collector's 2 replicas to be ready", func() error {
		d := &appsv1.Deployment{}
		if err := admin.Get(ctx, collectorKey, d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v", d.Status)
		}
		return nil
	})
	waitFor(ctx, t, "the FlowCollector to report 2 ready collectors", func() error {
		fc := &v1alpha1.FlowCollector{}
		if err := admin.Get(ctx, client.ObjectKey{Name: "cluster"}, fc); err != nil {
			return err
		}
		c, st := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionCollectorReady), fc.Status
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonCollectorsReady ||
			st.DesiredCollectors != 2 || st.ReadyCollectors != 2 || st.UpdatedCollectors != 2 {
			return fmt.Errorf("CollectorReady %+v, status %+v", c, st)
		}
		return nil
	})
	patch = []byte(`{"spec":{"exporters":[{"type":"stdout"}]}}`)
	if err := admin.Patch(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
	if fc := waitReady(ctx, t, admin, 4); meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionCollectorReady) != nil {
		t.Errorf("CollectorReady without a kafka exporter: %+v", fc.Status)
	}
	waitFor(ctx, t, "the Kafka collector to be removed", func() error {
		for _, obj := range []client.Object{&appsv1.Deployment{}, &rbacv1.ClusterRole{}} {
			key := collectorKey
			if _, ok := obj.(*rbacv1.ClusterRole); ok {
				key.Namespace = ""
			}
			if err := admin.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T still there (err %v)", obj, err)
			}
		}
		return nil
	})

	// 6. Deleting the FlowCollector garbage-collects everything it owns:
	// the agents, the certificates, the export ClusterRole. The namespace
	// stays: manifests/flowlens-operator.yaml declares it (the operator's
	// Role is there).
	if err := admin.Delete(ctx, &v1alpha1.FlowCollector{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the FlowCollector's objects to be collected", func() error {
		for _, obj := range []client.Object{
			&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: render.AgentName}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: certs.CAName}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: certs.CollectorTLSName}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: certs.CAName}},
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: render.ExportRoleName}},
		} {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%T %s still there (err %v)", obj, obj.GetName(), err)
			}
		}
		return nil
	})
	if err := admin.Get(ctx, client.ObjectKey{Name: agentNamespace}, &corev1.Namespace{}); err != nil {
		t.Errorf("the agent namespace, the operator manifest's: %v", err)
	}
	t.Logf("e2e done in %v", time.Since(start).Round(time.Millisecond))
}

// runOperator builds cmd/flowlens-operator and runs it with a kubeconfig that
// impersonates the operator's ServiceAccount. It returns a function that
// stops it; the operator's log is printed if the test failed.
func runOperator(ctx context.Context, t *testing.T, kubeconfig, dir string) func() {
	t.Helper()
	bin := filepath.Join(dir, "flowlens-operator")
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	build := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "github.com/flowlens/flowlens/cmd/flowlens-operator")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}

	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = operatorSA
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, "system:authenticated"}
	}
	saConfig := filepath.Join(dir, "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, saConfig); err != nil {
		t.Fatal(err)
	}

	logPath := filepath.Join(dir, "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	opCtx, stop := context.WithCancel(ctx)
	cmd := exec.CommandContext(opCtx, bin,
		"--kubeconfig", saConfig,
		"--agent-image", "ghcr.io/flowlens/flowlens-agent:e2e",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", "0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		stop()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logPath); err == nil {
				t.Logf("operator log:\n%s", log)
			}
		}
	}
}

// waitReady waits until the FlowCollector reports Ready for generation gen
// with every node's agent ready and updated.
func waitReady(ctx context.Context, t *testing.T, c client.Client, gen int64) *v1alpha1.FlowCollector {
	t.Helper()
	fc := &v1alpha1.FlowCollector{}
	waitFor(ctx, t, fmt.Sprintf("the FlowCollector to be Ready at generation %d", gen), func() error {
		if err := c.Get(ctx, client.ObjectKey{Name: "cluster"}, fc); err != nil {
			return err
		}
		r := meta.FindStatusCondition(fc.Status.Conditions, v1alpha1.ConditionReady)
		st := fc.Status
		if fc.Generation != gen || st.ObservedGeneration != gen || r == nil || r.Status != metav1.ConditionTrue ||
			st.DesiredAgents != nodes || st.ReadyAgents != nodes || st.UpdatedAgents != nodes {
			return fmt.Errorf("generation %d, status %+v", fc.Generation, st)
		}
		return nil
	})
	return fc
}

// checkAgentPods checks that one ready agent pod runs on each node, all with
// the same config hash, and returns it.
func checkAgentPods(ctx context.Context, t *testing.T, c client.Client) string {
	t.Helper()
	var hash string
	waitFor(ctx, t, "one ready agent per node on the current configuration", func() error {
		ds := &appsv1.DaemonSet{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: render.AgentName}, ds); err != nil {
			return err
		}
		hash = ds.Spec.Template.Annotations[render.ConfigHashAnnotation]
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(agentNamespace), client.MatchingLabels{render.LabelName: render.AgentName}); err != nil {
			return err
		}
		onNode := map[string]bool{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s is terminating", p.Name)
			}
			if p.Annotations[render.ConfigHashAnnotation] != hash {
				return fmt.Errorf("pod %s has config hash %s, want %s", p.Name, p.Annotations[render.ConfigHashAnnotation], hash)
			}
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
			}
			if p.Status.Phase != corev1.PodRunning || !ready {
				return fmt.Errorf("pod %s on %s: phase %s, ready %v", p.Name, p.Spec.NodeName, p.Status.Phase, ready)
			}
			if !p.Spec.HostNetwork {
				return fmt.Errorf("pod %s is not on the host network", p.Name)
			}
			onNode[p.Spec.NodeName] = true
		}
		if len(pods.Items) != nodes || len(onNode) != nodes {
			return fmt.Errorf("%d pods on %d nodes, want one on each of %d", len(pods.Items), len(onNode), nodes)
		}
		return nil
	})
	return hash
}

func waitFor(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	cluster.WaitFor(ctx, t, what, 3*time.Minute, check)
}
