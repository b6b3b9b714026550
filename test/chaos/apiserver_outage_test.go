//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/envtest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// apiOutage is how long the API server stays down (issue #28: 60 s).
const apiOutage = 60 * time.Second

// catchUpBound is how soon after the API server is back a pod created then
// must enrich flows: the collector's caches list and watch again within
// about a second of its return (internal/collector/k8smeta), the agent
// evicts every second, and the pod's creation itself takes a moment.
const catchUpBound = 10 * time.Second

// The addresses of TestAPIServerOutage: pods shop/client, shop/during
// (created during the outage, through another API server) and shop/late
// (created right after it) on veth-a, Service shop/web's ClusterIP on
// veth-b (envtest's service range is 10.0.0.0/24).
const (
	clientIP = "10.99.0.1"
	lateIP   = "10.99.0.3"
	duringIP = "10.99.0.4"
	webIP    = "10.0.0.50"
)

// TestAPIServerOutage: a real agent exports UDP flows (kafkaPer packets
// each, three new flows every 250 ms: client, during and late -> web) over
// gRPC to the real collector, which authorizes it (--auth kubernetes, the
// cluster default: a pod-bound ServiceAccount token) and enriches from a
// real kube-apiserver (envtest). The API server is killed for 60 s while
// flows keep coming, then started again (same etcd); meanwhile pod
// shop/during is created through a second API server on the same etcd
// (as in a cluster of several), and pod shop/late right after the return.
//
//   - Flows keep their Kubernetes context from the caches: every record of
//     client (those evicted during the outage too) says pod shop/client to
//     Service shop/web, and the flow metrics count their packets exactly.
//   - Nothing is dropped: the records the collector printed carry every
//     packet the kernel counted on veth-a; the agent dropped and refused
//     nothing, and its stream never failed.
//   - The collector neither exits nor goes unready (/readyz polled every
//     second of the outage).
//   - Catch-up: during's flows are enriched as shop/during within
//     catchUpBound of the return, late's as shop/late within catchUpBound
//     of its creation, and all of them after that.
func TestAPIServerOutage(t *testing.T) {
	testkit.NeedRoot(t, "network namespaces, BPF")
	env := envtest.StartT(t, envtest.Options{})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	other, err := kubernetes.NewForConfig(env.AnotherAPIServer(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := writeKubeconfig(t, env.Config, filepath.Join(dir, "kubeconfig"))
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(agentToken(t, cs, "node-a")), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, cs, "shop")
	createPod(t, cs, "client", clientIP)
	if _, err := cs.CoreV1().Services("shop").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{ClusterIP: webIP, Ports: []corev1.ServicePort{{Port: 9000, Protocol: corev1.ProtocolUDP}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p := agenttest.NewPair(t)
	netlab.AddAddr(t, p.A, p.IfA, lateIP+"/24")
	netlab.AddAddr(t, p.A, p.IfA, duringIP+"/24")
	netlab.AddAddr(t, p.B, p.IfB, webIP+"/32")
	netlab.Run(t, p.A, "ip", "route", "add", webIP+"/32", "dev", p.IfA)
	h, err := netlab.Handle(p.B)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := h.LinkByName(p.IfB)
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	netlab.Neigh(t, p.A, p.IfA, webIP, lb.Attrs().HardwareAddr)
	agenttest.MustListen(t, p.B, webIP+":9000")

	listen := testkit.FreeAddr(t)
	coll := startProc(t, "collector", bin["flowlens-collector"], "--listen="+listen, "--auth=kubernetes", "--kubeconfig="+kubeconfig,
		"--k8s-enrich=true", "--output=json")
	coll.waitReady(t, 60*time.Second)
	agent := startProc(t, "agent", bin["flowlens-agent"], "--netns="+p.A.Name, "--interfaces="+p.IfA, "--node-name=node-a",
		"--cache-active-timeout=1s", "--export=grpc", "--target="+listen, "--insecure-plaintext", "--token-file="+token,
		"--features=none") // no host-wide hooks: other tests' traffic stays out of the counts
	agent.waitReady(t, 30*time.Second)
	waitFor(t, 30*time.Second, "agent attached", func() (bool, string) {
		agent.alive(t)
		return agent.logHas("watching 1 interface"), "no 'watching 1 interface' line"
	})
	k0 := agentKernel(t, p)

	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			port := kafkaPort0 + int(sent.Load())
			for _, src := range []string{clientIP, duringIP, lateIP} {
				if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", src, port), webIP+":9000", []byte("chaos-apiserver"), kafkaPer); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
			sent.Add(1)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	time.Sleep(5 * time.Second) // traffic before the outage
	down := time.Now()
	start := env.StopAPIServer(t)
	// The outage: /readyz polled every second meanwhile.
	var polls int
	var unready []string
	var duringCreated bool
	for time.Since(down) < apiOutage {
		if !duringCreated && time.Since(down) > apiOutage/2 {
			createPod(t, other, "during", duringIP)
			duringCreated = true
		}
		agent.alive(t)
		coll.alive(t)
		polls++
		if code, body := get("http://" + coll.metrics + "/readyz"); code != 200 {
			unready = append(unready, fmt.Sprintf("%v: %d %s", time.Since(down).Round(time.Second), code, body))
		}
		time.Sleep(time.Second)
	}
	start()
	up := time.Now()
	createPod(t, cs, "late", lateIP)
	created := time.Now()
	t.Logf("API server down %v (stop to ready), pod shop/late created %v after", up.Sub(down).Round(100*time.Millisecond),
		created.Sub(up).Round(10*time.Millisecond))
	if len(unready) > 0 {
		t.Errorf("collector unready in %d of %d polls during the outage: %s", len(unready), polls, strings.Join(unready, "; "))
	}

	// Catch-up: during's and late's flows enriched as their pods.
	caughtUp := map[string]time.Duration{}
	waitFor(t, catchUpBound, "flows of pods shop/during and shop/late enriched", func() (bool, string) {
		for _, f := range coll.flows(t) {
			for ip, name := range map[string]string{duringIP: "during", lateIP: "late"} {
				if _, ok := caughtUp[name]; !ok && f.SrcAddr == ip && k8sIs(f.SrcK8s, "pod", "shop", name) {
					caughtUp[name] = time.Since(up)
				}
			}
		}
		return len(caughtUp) == 2, fmt.Sprintf("enriched so far: %v", caughtUp)
	})
	t.Logf("after the return: pod shop/during (created during the outage) used for enrichment %v after it, shop/late %v after it (%v after its creation)",
		caughtUp["during"].Round(100*time.Millisecond), caughtUp["late"].Round(100*time.Millisecond), (caughtUp["late"] - created.Sub(up)).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second) // traffic after it
	close(stop)
	wg.Wait()
	flows := int(sent.Load())

	kernel := agentKernel(t, p) - k0
	if want := uint64(3 * kafkaPer * flows); kernel != want {
		t.Errorf("the kernel counted %d packets, %d sent", kernel, want)
	}
	var recs []outFlow
	waitFor(t, 30*time.Second, "every packet the kernel counted printed by the collector", func() (bool, string) {
		recs = coll.flows(t)
		var n uint64
		for _, f := range recs {
			n += f.Packets
		}
		return n == kernel, fmt.Sprintf("%d packets printed, the kernel counted %d", n, kernel)
	})

	var clientPackets, latePackets, duringPackets, inOutage, lateExternal, lateAfter, duringExternal, duringAfter uint64
	var sawLate bool
	for _, f := range recs {
		switch f.SrcAddr {
		case clientIP:
			clientPackets += f.Packets
			if !k8sIs(f.SrcK8s, "pod", "shop", "client") || !k8sIs(f.DstK8s, "service", "shop", "web") {
				t.Errorf("client's record without its context: src %+v dst %+v (%s)", f.SrcK8s, f.DstK8s, f.key("node-a"))
			}
			if end, _ := time.Parse(time.RFC3339Nano, f.EndTime); end.After(down) && end.Before(up) {
				inOutage++
			}
		case lateIP:
			latePackets += f.Packets
			switch {
			case k8sIs(f.SrcK8s, "pod", "shop", "late"):
				sawLate = true
				lateAfter++
			case f.SrcK8s != nil && f.SrcK8s.Kind == "external":
				// Before its creation. Once enriched, never again.
				if start, _ := time.Parse(time.RFC3339Nano, f.StartTime); start.After(created.Add(catchUpBound)) {
					t.Errorf("late's record external %v after its creation: %s", start.Sub(created), f.key("node-a"))
				}
				lateExternal++
			default:
				t.Errorf("late's record: src %+v", f.SrcK8s)
			}
		case duringIP:
			duringPackets += f.Packets
			switch {
			case k8sIs(f.SrcK8s, "pod", "shop", "during"):
				duringAfter++
			case f.SrcK8s != nil && f.SrcK8s.Kind == "external":
				// Created while the API server was gone: unknown to the
				// caches until it came back.
				if start, _ := time.Parse(time.RFC3339Nano, f.StartTime); start.After(up.Add(catchUpBound)) {
					t.Errorf("during's record external %v after the return: %s", start.Sub(up), f.key("node-a"))
				}
				duringExternal++
			default:
				t.Errorf("during's record: src %+v", f.SrcK8s)
			}
		default:
			t.Errorf("a record of an address the test did not send from: %s", f.key("node-a"))
		}
	}
	if !sawLate {
		t.Error("no record of late enriched")
	}
	if want := kafkaPer * uint64(flows); clientPackets != want || latePackets != want || duringPackets != want {
		t.Errorf("packets printed: client %d, during %d, late %d; %d each sent", clientPackets, duringPackets, latePackets, want)
	}
	// One every 250 ms: at least half of them, whatever the load.
	if inOutage < uint64(apiOutage/(250*time.Millisecond))/2 {
		t.Errorf("only %d of client's records ended during the outage", inOutage)
	}

	cf := coll.scrape(t)
	if n := sumSeries(cf, "flowlens_collector_flow_packets_total", "src_namespace=shop", "src_workload=client", "dst_namespace=shop", "dst_workload=web"); n != clientPackets {
		t.Errorf("flow_packets_total client -> web: %d, %d printed", n, clientPackets)
	}
	af := agent.scrape(t)
	for _, m := range []string{"flowlens_agent_export_dropped_flows_total", "flowlens_agent_export_refused_total", "flowlens_agent_export_errors_total",
		"flowlens_agent_export_send_errors_total"} {
		if n := value(af, m, "exporter=grpc"); n != 0 {
			t.Errorf("agent %s{exporter=grpc} = %d", m, n)
		}
	}
	t.Logf("%d flows of each pod, %d packets (the kernel's count, all printed); client's records: %d ended during the outage, all enriched; during's: %d external, %d as shop/during; late's: %d external, %d as shop/late; /readyz 200 at %d polls",
		flows, kernel, inOutage, duringExternal, duringAfter, lateExternal, lateAfter, polls)
}

// agentKernel is veth-a's count of transmitted packets.
func agentKernel(t *testing.T, p *agenttest.Pair) uint64 {
	t.Helper()
	st, err := netlab.ReadLinkStats(p.A, p.IfA)
	if err != nil {
		t.Fatal(err)
	}
	return st.TxPackets
}

func k8sIs(k *k8sField, kind, ns, name string) bool {
	return k != nil && k.Kind == kind && k.Namespace == ns && k.Name == name
}

// sumSeries adds the values of name's series that have every label of want ("k=v").
func sumSeries(fams map[string]*dto.MetricFamily, name string, want ...string) uint64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		have := map[string]bool{}
		for _, l := range m.GetLabel() {
			have[l.GetName()+"="+l.GetValue()] = true
		}
		ok := true
		for _, w := range want {
			ok = ok && have[w]
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return uint64(sum)
}

func mustCreate(t *testing.T, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPod creates pod shop/name, running with address ip (its status
// written as the kubelet would).
func createPod(t *testing.T, cs *kubernetes.Clientset, name, ip string) {
	t.Helper()
	ctx := context.Background()
	pod, err := cs.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "example.com/app:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// agentToken sets up what the operator renders for the agents (their
// ServiceAccount, allowed to export) and returns the token the kubelet
// would project into an agent pod on node: bound to the pod, audience
// flowlens-collector.
func agentToken(t *testing.T, cs *kubernetes.Clientset, node string) string {
	t.Helper()
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, cs, "flowlens")
	must(cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}))
	must(cs.CoreV1().ServiceAccounts("flowlens").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}))
	must(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: kubeauth.AgentClusterRole},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{kubeauth.Group}, Resources: []string{kubeauth.Resource + "/" + kubeauth.Subresource},
			ResourceNames: []string{kubeauth.Name}, Verbs: []string{kubeauth.VerbExport}}}}, metav1.CreateOptions{}))
	must(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: kubeauth.AgentClusterRole},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kubeauth.AgentClusterRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "agent", Namespace: "flowlens"}}}, metav1.CreateOptions{}))
	pod, err := cs.CoreV1().Pods("flowlens").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: "flowlens"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "agent", AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("flowlens").CreateToken(ctx, "agent", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:      []string{kubeauth.Audience},
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// writeKubeconfig writes cfg (envtest's administrator) as a kubeconfig file.
func writeKubeconfig(t *testing.T, cfg *rest.Config, path string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}
