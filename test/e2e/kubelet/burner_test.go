//go:build e2e_kubelet

package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// prometheusAddr is where the bench's Prometheus listens (this machine's
// loopback, a port no other test uses).
const prometheusAddr = "127.0.0.1:19490"

// TestKubeBurnerOnKubelet runs hack/kube-burner's job on the real node,
// with a real Prometheus scraping the agent and the kubelet's cAdvisor,
// and logs what its metrics profile collected. `make bench-kubelet` runs
// it (FLOWLENS_KUBE_BURNER names the kube-burner binary).
func TestKubeBurnerOnKubelet(t *testing.T) {
	burner := os.Getenv("FLOWLENS_KUBE_BURNER")
	if burner == "" {
		t.Skip("run by make bench-kubelet (FLOWLENS_KUBE_BURNER unset)")
	}
	for _, bin := range []string{"prometheus", "/usr/bin/busybox"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s: %v (make deps-prometheus; hack/install-deps.sh bench-kubelet)", bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	n, admin, _ := startCluster(ctx, t, append(images, busybox)...)
	installOperator(ctx, t, admin)
	installFlowCollector(ctx, t, admin)
	agent := agentPod(ctx, t, admin)

	// The job's clients reach their servers through Service IPs: packets
	// the node routes back onto its bridge, with the forwarding the bridge
	// plugin turned on (startNode puts this machine's setting back).
	startPrometheus(ctx, t, n, admin, agent.Name)

	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// A copy of the job, as kwok.sh does: kube-burner writes its log into
	// the working directory.
	job := filepath.Join(n.dir, "kube-burner")
	if err := os.CopyFS(job, os.DirFS(filepath.Join(root, "hack", "kube-burner"))); err != nil {
		t.Fatal(err)
	}
	metricsDir := filepath.Join(n.dir, "collected-metrics")
	cmd := exec.CommandContext(ctx, burner, "init", "-c", "flowlens-node-density-heavy.yml", "--uuid", "flowlens-bench-kubelet")
	cmd.Dir = job
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+filepath.Join(n.dir, "kubeconfig"),
		"PROMETHEUS_URL=http://"+prometheusAddr,
		"PROMETHEUS_STEP=5s",
		"METRICS_DIR="+metricsDir,
		"ITERATIONS="+envOr("ITERATIONS", "3"),
		"SERVER_REPLICAS="+envOr("SERVER_REPLICAS", "1"),
		"CLIENT_REPLICAS="+envOr("CLIENT_REPLICAS", "2"),
		"REQUEST_INTERVAL="+envOr("REQUEST_INTERVAL", "0.05"),
		"JOB_PAUSE="+envOr("JOB_PAUSE", "2m"),
		"SERVER_IMAGE="+podtoolImage,
		"CLIENT_IMAGE="+busyboxImage)
	out, err := cmd.CombinedOutput()
	logFile := filepath.Join(n.dir, "logs", "kube-burner.log")
	_ = os.WriteFile(logFile, out, 0o644)
	if err != nil {
		t.Fatalf("kube-burner: %v\n%s", err, tail(logFile, 40))
	}
	reportMetrics(t, metricsDir)
}

// startPrometheus runs Prometheus, scraping the agent (labelled with its
// namespace and pod, as a ServiceMonitor would; over HTTPS at the node's
// address with the scrape identity, as the ServiceMonitor's tlsConfig
// says) and the kubelet's cAdvisor every 5 s, until the test ends.
func startPrometheus(ctx context.Context, t *testing.T, n *node, c client.Client, agentPod string) {
	t.Helper()
	s, cm := &corev1.Secret{}, &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: certs.MetricsClientName}, s); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: certs.CAName}, cm); err != nil {
		t.Fatal(err)
	}
	identity := filepath.Join(n.dir, "scrape-identity")
	must(t, os.MkdirAll(identity, 0o700))
	writeFile(t, filepath.Join(identity, "tls.crt"), string(s.Data[corev1.TLSCertKey]))
	writeFile(t, filepath.Join(identity, "tls.key"), string(s.Data[corev1.TLSPrivateKeyKey]))
	writeFile(t, filepath.Join(identity, "ca.crt"), cm.Data[certs.BundleKey])
	conf := filepath.Join(n.dir, "prometheus.yml")
	writeFile(t, conf, fmt.Sprintf(`global:
  scrape_interval: 5s
scrape_configs:
- job_name: flowlens-agent
  scheme: https
  tls_config:
    ca_file: %[8]s/ca.crt
    cert_file: %[8]s/tls.crt
    key_file: %[8]s/tls.key
    server_name: %[9]s.%[2]s.svc
  static_configs:
  - targets: ["%[5]s:%[1]d"]
    labels: {namespace: %[2]s, pod: %[3]s, node: %[4]s}
- job_name: cadvisor
  scheme: https
  tls_config: {insecure_skip_verify: true}
  metrics_path: /metrics/cadvisor
  static_configs:
  - targets: ["%[5]s:%[6]d"]
    labels: {node: %[7]s}
`, agentMetricsPort, agentNamespace, agentPod, nodeName, n.ip, kubeletPort, nodeName, identity, render.MetricsServiceName))
	logFile, err := os.Create(filepath.Join(n.dir, "logs", "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("prometheus", "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(n.dir, "prometheus"),
		"--web.listen-address="+prometheusAddr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logFile.Close()
	})
	cluster.WaitFor(ctx, t, "Prometheus to be ready", time.Minute, func() error {
		resp, err := http.Get("http://" + prometheusAddr + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
}

// reportMetrics logs, for each metric file kube-burner wrote, its values'
// average and maximum, by their labels.
func reportMetrics(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		t.Fatalf("kube-burner wrote no metrics into %s", dir)
	}
	sort.Strings(files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var docs []map[string]any
		if err := json.Unmarshal(data, &docs); err != nil {
			continue // not a list of samples
		}
		type agg struct {
			sum, max float64
			n        int
		}
		by := map[string]*agg{}
		for _, d := range docs {
			v, ok := d["value"].(float64)
			if !ok {
				continue
			}
			labels, _ := json.Marshal(d["labels"])
			a := by[string(labels)]
			if a == nil {
				a = &agg{}
				by[string(labels)] = a
			}
			a.sum += v
			a.n++
			if v > a.max || a.n == 1 {
				a.max = v
			}
		}
		var lines []string
		for l, a := range by {
			lines = append(lines, fmt.Sprintf("  %s: avg %.6g max %.6g (%d samples)", l, a.sum/float64(a.n), a.max, a.n))
		}
		sort.Strings(lines)
		if len(lines) > 0 {
			t.Logf("%s\n%s", strings.TrimSuffix(filepath.Base(f), ".json"), strings.Join(lines, "\n"))
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
