package k8smeta_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
)

// The caches' client with the API server gone (its own apiserver, not the
// suite's): a list waits, trying again every second, for as long as its
// caller waits (client-go's own client fails at once, and its informers
// then back off up to a minute), and returns the API server's answer once
// it is back; a caller that stops waiting gets the error; both changes
// are logged.
func TestClientWaitsForAPIServer(t *testing.T) {
	needEnv(t)
	env := envtest.StartT(t, envtest.Options{})
	var log testkit.SyncBuffer
	client, err := k8smeta.NewClient(env.Config, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := plain.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/a:1"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := env.StopAPIServer(t)
	if _, err := plain.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("client-go's own client listed with the API server gone")
	}
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = client.CoreV1().Pods("default").List(short, metav1.ListOptions{})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a caller waiting 1.5 s: %v, want the connection's error", err)
	}

	type result struct {
		pods int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		l, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{pods: len(l.Items)}
	}()
	select {
	case r := <-done:
		t.Fatalf("the list returned with the API server gone: %+v", r)
	case <-time.After(2 * time.Second):
	}
	start()
	back := time.Now()
	select {
	case r := <-done:
		if r.err != nil || r.pods != 1 {
			t.Errorf("the list after the API server's return: %d pods, %v; want pod kept", r.pods, r.err)
		}
		// It tries every ReconnectEvery.
		if d := time.Since(back); d > k8smeta.ReconnectEvery+time.Second {
			t.Errorf("the list returned %v after the API server was ready", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the list still waiting 30 s after the API server's return")
	}
	for _, want := range []string{"Kubernetes API server unreachable: enriching from the caches", "Kubernetes API server reachable again"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("no %q in the log:\n%s", want, log.String())
		}
	}
}
