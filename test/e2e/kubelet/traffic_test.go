//go:build e2e_kubelet

package kubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// The known traffic: client pods send datagrams UDP datagrams of
// datagramSize bytes of payload to the server pod, and one TCP connection
// carrying tcpBytes (its packets and bytes are whatever TCP makes of it:
// checkTCPFlow compares them with the pods' interface counters).
const (
	serverNamespace = "e2e-server"
	clientNamespace = "e2e-client"
	udpPort         = 7000
	tcpPort         = 7001
	datagrams       = 40
	datagramSize    = 1000
	tcpBytes        = 1 << 20
	// datagramL2 is one datagram's length on the veth: Ethernet (14), IPv4
	// (20) and UDP (8) headers and the payload, what the agent counts.
	datagramL2 = 14 + 20 + 8 + datagramSize
)

// workload creates namespace ns and a one-pod Deployment name running
// podtool with args, and returns its ready pod.
func workload(ctx context.Context, t *testing.T, c client.Client, ns, name string, args ...string) *corev1.Pod {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name:            name,
						Image:           podtoolImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            args,
					}},
				},
			},
		},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	waitDeployment(ctx, t, c, ns, name)
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s/%s: %d (%v)", ns, name, len(pods.Items), err)
	}
	return &pods.Items[0]
}

// clientArgs are the arguments of a client of the server at ip that sends
// n datagrams and then, on the test's SIGUSR1, a TCP connection carrying
// tcp bytes (none if 0).
func clientArgs(ip string, n, tcp int) []string {
	return []string{"client", ip, strconv.Itoa(udpPort), strconv.Itoa(tcpPort), strconv.Itoa(n), strconv.Itoa(datagramSize), strconv.Itoa(tcp)}
}

// waitLog waits until the log of pod's container has a line containing s.
func waitLog(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, s string) {
	t.Helper()
	cluster.WaitFor(ctx, t, fmt.Sprintf("%q in the log of %s/%s", s, pod.Namespace, pod.Name), time.Minute, func() error {
		log, err := podLog(ctx, cs, pod)
		if err != nil {
			return err
		}
		if !strings.Contains(log, s) {
			return fmt.Errorf("log:\n%s", log)
		}
		return nil
	})
}

// podLog reads the log of pod's first container through the API server
// (which reads it from the kubelet).
func podLog(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) (string, error) {
	b, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).Do(ctx).Raw()
	return string(b), err
}

// record is what the test reads of the collector's JSON lines.
type record struct {
	SrcAddr    string `json:"src_addr"`
	DstAddr    string `json:"dst_addr"`
	SrcPort    int    `json:"src_port"`
	DstPort    int    `json:"dst_port"`
	Proto      int    `json:"proto"`
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	Interfaces []struct {
		Name      string `json:"name"`
		Direction string `json:"direction"`
	} `json:"interfaces"`
	SrcK8s k8sMeta `json:"src_k8s"`
	DstK8s k8sMeta `json:"dst_k8s"`
}

type k8sMeta struct {
	Kind         string `json:"kind"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Workload     string `json:"workload"`
	WorkloadKind string `json:"workload_kind"`
	Node         string `json:"node"`
}

// flowTotals sums, over the collector's records from src to dst:port,
// packets and bytes per source port, and returns the records too.
func flowTotals(ctx context.Context, cs kubernetes.Interface, collector *corev1.Pod, proto int, src, dst string, dstPort int) (map[int][2]uint64, []record, error) {
	log, err := podLog(ctx, cs, collector)
	if err != nil {
		return nil, nil, err
	}
	totals := map[int][2]uint64{}
	var recs []record
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, nil, fmt.Errorf("collector line %q: %v", line, err)
		}
		if r.Proto != proto || r.SrcAddr != src || r.DstAddr != dst || r.DstPort != dstPort {
			continue
		}
		tot := totals[r.SrcPort]
		totals[r.SrcPort] = [2]uint64{tot[0] + r.Packets, tot[1] + r.Bytes}
		recs = append(recs, r)
	}
	return totals, recs, sc.Err()
}

// hostVeth returns the name of the host side of pod's eth0: the veth whose
// ifindex its eth0 names as its peer (eth0@ifN).
func hostVeth(ctx context.Context, t *testing.T, n *node, pod *corev1.Pod) string {
	t.Helper()
	pid := n.containerPID(ctx, t, pod.Status.ContainerStatuses[0].ContainerID)
	out, err := exec.CommandContext(ctx, "nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "ip", "-o", "link", "show", "eth0").CombinedOutput()
	if err != nil {
		t.Fatalf("eth0 of %s: %v\n%s", pod.Name, err, out)
	}
	m := regexp.MustCompile(`eth0@if(\d+):`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("eth0 of %s has no peer: %s", pod.Name, out)
	}
	out, err = exec.CommandContext(ctx, "ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == m[1]+":" {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			return name
		}
	}
	t.Fatalf("no interface %s on this machine (peer of %s's eth0)", m[1], pod.Name)
	return ""
}
