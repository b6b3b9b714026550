//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

const clusterName = "flowlens-kubelet"

// kwokctlConfig adds the kubernetes Service's address (the first of
// kwokctl's service range 10.0.0.0/24) to the API server's certificate:
// pods reach the API server through it.
const kwokctlConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  kubeApiserverCertSANs: ["10.0.0.1"]
`

func TestFlowlensOnKubelet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(start).Round(time.Second), what) }

	// 1. The cluster: a control plane without kwok's fake nodes, and a real
	// node.
	n, admin, cs := startCluster(ctx, t, images...)
	step("node " + nodeName + " Ready")

	// 2. flowlens, installed as README says: the operator, the
	// FlowCollector, the collector; then the agents export to it.
	installOperator(ctx, t, admin)
	step("operator rolled out")
	installFlowCollector(ctx, t, admin)
	agent := agentPod(ctx, t, admin)
	checkSecurityContext(ctx, t, admin, agent)
	checkAgentProcess(ctx, t, n, agent)
	step("FlowCollector Ready, agent " + agent.Name + " ready")
	installCollector(ctx, t, admin)
	collector := collectorPod(ctx, t, admin)
	// Who may write and read flows (security_test.go), before the agent
	// exports to the collector: no other sender moves its counters.
	checkForgedNode(ctx, t, admin, cs, agent, collector)
	step("agent " + agent.Name + "'s identity: flows of another node refused and counted, its own received")
	checkForeignPod(ctx, t, admin, cs, collector)
	step("a pod of another namespace: Export and GetFlows refused in plaintext, with its own certificate, with its own tokens")
	exportToCollector(ctx, t, admin)
	agent = agentPod(ctx, t, admin)
	step("collector rolled out, agent " + agent.Name + " exports to it")

	// 3. Known traffic between two ordinary pods of two namespaces.
	server := workload(ctx, t, admin, serverNamespace, "server", "server", strconv.Itoa(udpPort), strconv.Itoa(tcpPort))
	waitLog(ctx, t, cs, server, "listening")
	client1 := workload(ctx, t, admin, clientNamespace, "client", clientArgs(server.Status.PodIP, datagrams, tcpBytes)...)
	waitLog(ctx, t, cs, client1, "udp done")
	step(fmt.Sprintf("client %s (%s) sent to server %s (%s)", client1.Name, client1.Status.PodIP, server.Name, server.Status.PodIP))
	serverVeth, clientVeth := hostVeth(ctx, t, n, server), hostVeth(ctx, t, n, client1)
	checkUDPFlow(ctx, t, cs, collector, client1, server, datagrams, []string{clientVeth, serverVeth})
	checkTCPFlow(ctx, t, n, cs, collector, client1, server, []string{clientVeth, serverVeth})
	step("flows exact and named")
	checkObserve(ctx, t, n, client1, server, datagrams)
	step("flowlens observe, through its own port-forward, has the UDP flow exactly")
	checkObserveForbidden(ctx, t, n, collector)
	step("flowlens observe without flowlens-flows-reader: forbidden, naming the permission")

	// 4. The agent's probes passed (it is Ready); its metrics; a restart
	// leaves nothing of the old instance and counts exactly again.
	ours := []string{bridgeName, clientVeth, serverVeth}
	links := checkAttached(ctx, t, ours)
	checkMetrics(ctx, t, admin)
	old := programIDs(links)
	agent = restartAgent(ctx, t, admin, agent)
	links = checkAttached(ctx, t, ours)
	if again := slices.DeleteFunc(programIDs(links), func(id ebpf.ProgramID) bool { return !slices.Contains(old, id) }); len(again) != 0 {
		t.Errorf("programs %v of the old agent are attached to the new one's interfaces", again)
	}
	checkDetached(ctx, t, nil, old)
	step("agent restarted as " + agent.Name + ": the old one's programs are gone")
	client2 := workload(ctx, t, admin, clientNamespace, "client2", clientArgs(server.Status.PodIP, datagrams/2, 0)...)
	waitLog(ctx, t, cs, client2, "udp done")
	checkUDPFlow(ctx, t, cs, collector, client2, server, datagrams/2, []string{hostVeth(ctx, t, n, client2), serverVeth})
	step("counting resumed exactly")
	checkJobWorkloads(ctx, t, admin, cs, collector, server)
	step("Job pods: a CronJob's runs are its workload, generated Jobs their generateName's")

	// The agent's and the collector's metrics by default: HTTPS, /metrics
	// only to the scrape identity, probed by the kubelet; then the agent's
	// with Secrets of the user's, TLS and mutual TLS (metricstls_test.go).
	checkDefaultMetricsTLS(ctx, t, admin, agent, collector)
	step("agent " + agent.Name + " and collector " + collector.Name + ": /metrics refused without a client certificate, served to flowlens-metrics-client's, probes pass")
	agent = checkMetricsTLS(ctx, t, admin)
	step("agent " + agent.Name + ": metrics over TLS, then mutual TLS, probed by the kubelet; a missing Secret reported")

	// An exporter's Secret key read into an environment variable, missing
	// (configfailure_test.go).
	agent = checkConfigFailed(ctx, t, admin)
	step("agent " + agent.Name + ": a missing Secret, then key, of an environment variable reported")

	// The Kafka collectors' Secret missing, then created
	// (collectorstatus_test.go).
	checkCollectorMountFailed(ctx, t, admin)
	step("kafka collector: a missing Secret reported in CollectorReady, then ready")

	// 5. Deleting the FlowCollector removes everything the operator made,
	// and the agent's programs and links.
	deleteFlowCollector(ctx, t, admin)
	checkDetached(ctx, t, ours, programIDs(links))
	step("FlowCollector deleted: nothing of flowlens left on the node")
}

// startCluster starts the control plane and the node with images, and
// waits for the node to be Ready; it returns the node and two clients.
func startCluster(ctx context.Context, t *testing.T, images ...image) (*node, client.Client, kubernetes.Interface) {
	t.Helper()
	testkit.NeedRoot(t, "containerd, a kubelet, BPF")
	bins := cluster.NeedBins(t, "e2e-kubelet", "kubelet", "kube-proxy")
	dir := t.TempDir()
	kwokConfig := filepath.Join(dir, "kwokctl.yaml")
	writeFile(t, kwokConfig, kwokctlConfig)
	kubeconfig := cluster.Start(ctx, t, bins, clusterName, dir, "--config", kwokConfig,
		"--disable", "kwok-controller",
		// The node's name does not resolve: the API server reaches the
		// kubelet (pod logs) at its InternalIP.
		"--extra-args", "kube-apiserver=kubelet-preferred-address-types=InternalIP")
	n := startNode(ctx, t, dir)
	buildImages(ctx, t, n, dir, images...)
	n.startKubelet(ctx, t, bins, kubeconfig)
	admin := cluster.NewClient(t, kubeconfig, "")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(ctx, t, "the node to be Ready", 2*time.Minute, func() error {
		node := &corev1.Node{}
		if err := admin.Get(ctx, client.ObjectKey{Name: nodeName}, node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", node.Status.Conditions)
	})
	return n, admin, kubernetes.NewForConfigOrDie(cfg)
}

// checkUDPFlow waits until the collector has counted want datagrams from
// client to server, and checks that they are exactly that many, with
// their exact L2 bytes, crossing ifaces, named from the API server.
func checkUDPFlow(ctx context.Context, t *testing.T, cs kubernetes.Interface, collector, client, server *corev1.Pod, want int, ifaces []string) {
	t.Helper()
	var recs []record
	var totals map[int][2]uint64
	cluster.WaitFor(ctx, t, "the collector to count the UDP flow", time.Minute, func() error {
		var err error
		totals, recs, err = flowTotals(ctx, cs, collector, 17, client.Status.PodIP, server.Status.PodIP, udpPort)
		if err != nil {
			return err
		}
		for _, tot := range totals {
			if tot[0] >= uint64(want) {
				return nil
			}
		}
		return fmt.Errorf("UDP flows so far (source port: packets, bytes): %v", totals)
	})
	if len(totals) != 1 {
		t.Fatalf("UDP flows from %s to %s: %v, want one", client.Name, server.Name, totals)
	}
	for port, tot := range totals {
		if tot != [2]uint64{uint64(want), uint64(want * datagramL2)} {
			t.Errorf("UDP flow from port %d: %d packets, %d bytes; want %d, %d", port, tot[0], tot[1], want, want*datagramL2)
		}
	}
	checkNames(t, recs, client, server, ifaces)
}

// checkNames checks the records' Kubernetes context, and their interfaces
// if ifaces is not nil.
func checkNames(t *testing.T, recs []record, client, server *corev1.Pod, ifaces []string) {
	t.Helper()
	for _, r := range recs {
		wantSrc := k8sMeta{Kind: "pod", Namespace: client.Namespace, Name: client.Name, Workload: client.Labels["app"], WorkloadKind: "Deployment", Node: nodeName}
		wantDst := k8sMeta{Kind: "pod", Namespace: server.Namespace, Name: server.Name, Workload: server.Labels["app"], WorkloadKind: "Deployment", Node: nodeName}
		if r.SrcK8s != wantSrc || r.DstK8s != wantDst {
			t.Errorf("record %+v: src_k8s %+v, dst_k8s %+v; want %+v, %+v", r, r.SrcK8s, r.DstK8s, wantSrc, wantDst)
		}
		if ifaces == nil {
			continue
		}
		var names []string
		for _, i := range r.Interfaces {
			names = append(names, i.Name)
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(ifaces))
		if !slices.Equal(names, want) {
			t.Errorf("record %+v crossed %v, want %v", r, names, want)
		}
	}
}
