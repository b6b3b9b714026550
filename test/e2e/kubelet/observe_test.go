//go:build e2e_kubelet

package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlens/flowlens/internal/operator/render"
	"github.com/flowlens/flowlens/internal/testkit"
)

// readerKubeconfig writes a kubeconfig for a ServiceAccount that may do
// what `flowlens observe` needs and nothing more: find the collector pods
// and port-forward to one, read the CA bundle (the shipped Role
// flowlens-observe of the agent namespace), and read flows (the ClusterRole
// flowlens-flows-reader), both bound as docs/security.md says. The
// collector authorizes readers by bearer token: the admin kubeconfig's
// client certificate is no identity it can check.
func readerKubeconfig(ctx context.Context, t *testing.T, n *node) string {
	return observerKubeconfig(ctx, t, n, "flows-reader", true)
}

// observerKubeconfig writes the kubeconfig of ServiceAccount default/name,
// bound to the Role flowlens-observe of manifests/flowlens-operator.yaml
// (not one of its own: that Role must be enough), and to
// flowlens-flows-reader only if reader.
func observerKubeconfig(ctx context.Context, t *testing.T, n *node, name string, reader bool) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "default"
	must(t, ignoreExists(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})))
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	must(t, ignoreExists(cs.RbacV1().RoleBindings(agentNamespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: render.ObserveRoleName}, Subjects: subject}, metav1.CreateOptions{})))
	if reader {
		must(t, ignoreExists(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: render.ReaderRoleName}, Subjects: subject}, metav1.CreateOptions{})))
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(n.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.ClientCertificate, ai.ClientKey, ai.ClientCertificateData, ai.ClientKeyData = "", "", nil, nil
		ai.Token = tr.Status.Token
	}
	path := filepath.Join(n.dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// ignoreExists is err, but nil when the object exists already (a second
// call in one run).
func ignoreExists[T any](_ T, err error) error {
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("creating: %w", err)
	}
	return nil
}

// checkObserve asks the collector's history, as README shows, with
// `flowlens observe` and the kubeconfig alone: it finds the collector pod
// and port-forwards to it through the API server and the real kubelet
// itself, verifies it with the ConfigMap flowlens-ca and sends the
// kubeconfig's token, of a user bound to flowlens-flows-reader as README
// says (readerKubeconfig). The client's UDP flow must come back with exactly want packets
// and its pods' names, and nothing outside the filters.
func checkObserve(ctx context.Context, t *testing.T, n *node, client, server *corev1.Pod, want int) {
	t.Helper()
	bin := flowlensBin(ctx, t, n)
	cmd := exec.CommandContext(ctx, bin, "observe", "--kubeconfig", readerKubeconfig(ctx, t, n),
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

// flowlensBin builds cmd/flowlens into the node's directory, once.
func flowlensBin(ctx context.Context, t *testing.T, n *node) string {
	t.Helper()
	bin := filepath.Join(n.dir, "flowlens")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	build := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/flowlens")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building flowlens: %v\n%s", err, out)
	}
	return bin
}

// checkObserveForbidden runs `flowlens observe` as a second user,
// ServiceAccount default/flows-nobody: bound to flowlens-observe (it finds
// the collector, port-forwards to it, reads its CA) but not
// flowlens-flows-reader. The collector's SubjectAccessReview says no:
// observe exits 1 without a flow, and says "forbidden", who, and the
// permission and the ClusterRole to bind, as README tells administrators.
func checkObserveForbidden(ctx context.Context, t *testing.T, n *node, collector *corev1.Pod) {
	t.Helper()
	cmd := exec.CommandContext(ctx, flowlensBin(ctx, t, n), "observe", "--kubeconfig", observerKubeconfig(ctx, t, n, "flows-nobody", false),
		"--last", "10", "-o", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := `flowlens observe: pod ` + agentNamespace + `/` + collector.Name + `: forbidden: User "system:serviceaccount:default:flows-nobody" ` +
		`cannot get flowcollectors/flows in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it`
	if code != 1 || len(out) != 0 || lines[len(lines)-1] != want {
		t.Fatalf("flowlens observe without flowlens-flows-reader: exit %d, stdout %q, stderr:\n%s\nwant exit 1, no flow, and last line\n%s",
			code, out, stderr.String(), want)
	}
	t.Logf("without flowlens-flows-reader: %s", lines[len(lines)-1])
}
