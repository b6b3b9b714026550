package main

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The command against a real kube-apiserver (envtest), as it runs in a
// pod: the in-cluster configuration, informers over protobuf, readiness
// once synced. Gated by internal/testkit/envtest: skipped in short mode and
// when the envtest binaries are absent outside CI, failed in CI.
func TestInClusterEnrichment(t *testing.T) {
	cfg := envtest.StartT(t, envtest.Options{}).Config
	k8s, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := k8s.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := k8s.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "example.com/web:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = "10.244.0.7"
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.7"}}
	if _, err := k8s.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	out, errOut := &collectortest.SyncBuffer{}, &collectortest.SyncBuffer{}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrCh := make(chan collector.Addrs, 1)
	code := make(chan int, 1)
	go func() {
		code <- run(rctx, []string{"--listen", "127.0.0.1:0", "--auth", "none", "--metrics-address", "127.0.0.1:0", "--subnet-labels", "internet=0.0.0.0/0"}, out, errOut,
			&env{Options: collector.Options{Ready: func(a collector.Addrs) { addrCh <- a }, InCluster: func() (*rest.Config, error) { return rest.CopyConfig(cfg), nil }}})
	}()
	var a collector.Addrs
	select {
	case a = <-addrCh:
	case c := <-code:
		t.Fatalf("collector exited with %d: %s", c, errOut.String())
	}
	// Ready once the caches have synced.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, body := httpGet(t, "http://"+a.Metrics.String()+"/readyz")
		if c == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s\n%s", c, body, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	collectortest.Send(t, a.GRPC.String(), []flow.Record{{SrcAddr: netip.MustParseAddr("10.244.0.7"), DstAddr: netip.MustParseAddr("8.8.8.8"), SrcPort: 5000, DstPort: 53, Proto: 17,
		Bytes: 80, Packets: 1, Sampling: 1, StartTime: t0, EndTime: t0,
		Interfaces: []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}}}})
	fams := scrape(t, a)
	expectSamples(t, fams, map[[2]string]float64{
		{"flowlens_collector_informer_synced", "resource=pods"}:                                                                                1,
		{"flowlens_collector_informer_synced", "resource=replicasets"}:                                                                         1,
		{"flowlens_collector_informer_synced", "resource=services"}:                                                                            1,
		{"flowlens_collector_informer_synced", "resource=nodes"}:                                                                               1,
		{"flowlens_collector_flow_bytes_total", "src_namespace=shop,src_workload=web-1,dst_namespace=,dst_workload=internet,direction=egress"}: 80,
		{"flowlens_collector_node_bytes_total", "src_node=node-a,dst_node="}:                                                                   80,
		{"flowlens_collector_enrichment_misses_total", "side=src"}:                                                                             0,
		{"flowlens_collector_enrichment_misses_total", "side=dst"}:                                                                             1,
	})
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, errOut.String())
	}
	lines := out.Lines()
	want := `"src_k8s":{"kind":"pod","namespace":"shop","name":"web-1","workload":"web-1","workload_kind":"Pod","node":"node-a"},"dst_k8s":{"kind":"external","subnet":"internet"}}`
	if len(lines) != 1 || !strings.HasSuffix(lines[0], want) {
		t.Errorf("output:\n%s\nwant a line ending with %s", strings.Join(lines, "\n"), want)
	}
}
