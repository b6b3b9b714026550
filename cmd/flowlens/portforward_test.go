package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// Without --server, observe finds the running collector pods with the
// kubeconfig and context given, against a real kube-apiserver (envtest:
// there is no kubelet, so the port-forward itself is refused, which
// observe reports naming the pod).
func TestFindCollectorPods(t *testing.T) {
	cfg := envtest.StartT(t, envtest.Options{}).Config
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flowlens"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name    string
		labels  map[string]string
		running bool
	}{
		{"collector-0", map[string]string{"app.kubernetes.io/name": "flowlens-collector"}, true},
		{"collector-1", map[string]string{"app.kubernetes.io/name": "flowlens-collector"}, false},
		{"other", map[string]string{"app.kubernetes.io/name": "other"}, true},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "flowlens", Labels: p.labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "collector", Image: "example.com/c:1",
				Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9401}, {Name: "grpc", ContainerPort: 9991}}}}}}
		pod, err := cs.CoreV1().Pods("flowlens").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.running {
			pod.Status.Phase = corev1.PodRunning
			if _, err := cs.CoreV1().Pods("flowlens").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pods, err := collectorPods(ctx, cfg, "flowlens")
	if err != nil || len(pods) != 1 || pods[0].Name != "collector-0" || grpcPort(pods[0]) != 9991 {
		t.Fatalf("collector pods: %v %v", pods, err)
	}

	// Through a kubeconfig file and --context, as a user runs it.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["lab"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["lab"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "lab"}
	kc.Contexts["elsewhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "lab"}
	kc.CurrentContext = "elsewhere"
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, file); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := run(ctx, []string{"observe", "--kubeconfig", file, "--context", "lab"}, nil, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "flowlens observe: port-forward to flowlens/collector-0: ") {
		t.Errorf("exit %d, stderr %q; want 1 and the port-forward to flowlens/collector-0 refused (no kubelet)", code, errOut.String())
	}
	errOut.Reset()
	code = run(ctx, []string{"observe", "--kubeconfig", file, "--context", "lab", "-n", "shop"}, nil, &out, &errOut)
	if want := "flowlens observe: no running collector pod (app.kubernetes.io/name=flowlens-collector) in namespace shop: install manifests/flowlens-collector.yaml, or give --server or -n\n"; code != 1 || errOut.String() != want {
		t.Errorf("-n shop: exit %d, stderr %q, want %q", code, errOut.String(), want)
	}
}
