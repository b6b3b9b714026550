//go:build e2e_kubelet

package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/flowlens/flowlens/internal/testkit"
)

// checkObserve asks the collector's history, as README shows, with
// `flowlens observe` and the kubeconfig alone: it finds the collector pod
// and port-forwards to it through the API server and the real kubelet
// itself. The client's UDP flow must come back with exactly want packets
// and its pods' names, and nothing outside the filters.
func checkObserve(ctx context.Context, t *testing.T, n *node, client, server *corev1.Pod, want int) {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	bin := filepath.Join(n.dir, "flowlens")
	build := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/flowlens")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building flowlens: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "observe", "--kubeconfig", n.kubeconfig,
		"--namespace", client.Namespace, "--protocol", "udp", "--to-port", strconv.Itoa(udpPort),
		"--last", "1000", "-o", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("flowlens observe: %v\n%s", err, stderr.String())
	}
	var packets, bytesSeen uint64
	var recs []record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("observe line %q: %v", sc.Text(), err)
		}
		if r.Proto != 17 || r.DstPort != udpPort || (r.SrcK8s.Namespace != client.Namespace && r.DstK8s.Namespace != client.Namespace) {
			t.Errorf("observe returned a flow outside its filters: %+v", r)
			continue
		}
		if r.SrcAddr == client.Status.PodIP && r.DstAddr == server.Status.PodIP {
			packets += r.Packets
			bytesSeen += r.Bytes
			recs = append(recs, r)
		}
	}
	if packets != uint64(want) || bytesSeen != uint64(want*datagramL2) {
		t.Fatalf("flowlens observe: the UDP flow has %d packets, %d bytes; want %d, %d\n%s", packets, bytesSeen,
			want, want*datagramL2, strings.TrimSpace(string(out)))
	}
	checkNames(t, recs, client, server, nil)
}
