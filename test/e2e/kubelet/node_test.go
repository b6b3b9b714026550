//go:build e2e_kubelet

package kubelet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	criv1 "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// The node's names and addresses, unique on this machine (other tests run
// beside this one): the CNI bridge, the pod CIDR, the kubelet's ports.
const (
	nodeName    = "flowlens-kubelet-node"
	bridgeName  = "flkubelet0"
	podCIDR     = "10.218.0.0/24"
	kubeletPort = 10350
	proxyHealth = "127.0.0.1:10356"
	proxyMetric = "127.0.0.1:10349"
)

// node is one real Kubernetes node: containerd with the CRI, runc, the CNI
// bridge plugin, a kubelet and kube-proxy (nftables mode, for Service IPs),
// all in a private mount namespace whose mounts are shared within it (as
// on a systemd host), so that the kubelet's and containerd's mounts never
// reach this machine's and the agent's HostToContainer mounts work.
type node struct {
	dir  string // everything's state: containerd's, the kubelet's, CNI's, logs
	sock string // containerd's CRI socket
	ip   string // the node's InternalIP: this machine's address
	mnt  string // /proc/PID/ns/mnt of the mount namespace's holder
	// kubeconfig is the cluster's admin kubeconfig (set by startKubelet).
	kubeconfig string
	// tablesBefore are the nftables tables ("family name") before the node.
	tablesBefore []string
}

// startNode starts containerd, then (once the images are in) kube-proxy and
// the kubelet, registered to the API server of kubeconfig. Every Cleanup
// it registers undoes one step, in reverse.
func startNode(ctx context.Context, t *testing.T, dir string) *node {
	t.Helper()
	n := &node{dir: dir, sock: filepath.Join(dir, "containerd.sock"), ip: hostIP(t)}
	for _, d := range []string{"containerd/root", "containerd/state", "runc", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "volume-plugins", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.tablesBefore = nftTables(t)
	// containerd's shims keep their sockets under /run/containerd/s
	// whatever the state dir: remove the directories if the node made them
	// (os.Remove leaves them if another containerd has sockets there).
	if _, err := os.Stat("/run/containerd"); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() {
			_ = os.Remove("/run/containerd/s")
			_ = os.Remove("/run/containerd")
		})
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "pod-logs", "*", "*", "*.log"))
		for _, l := range logs {
			t.Logf("container log %s (end):\n%s", strings.TrimPrefix(l, filepath.Join(dir, "pod-logs")+"/"), tail(l, 15))
		}
	})
	// The bridge plugin (isGateway) turns IPv4 forwarding on: put back
	// this machine's setting when the node is gone.
	t.Cleanup(saveSysctls(t, "net/ipv4/ip_forward"))
	n.holdMountNamespace(t)
	t.Cleanup(func() { n.removeHostState(t) })
	n.writeCNI(t)
	n.writeContainerdConfig(t)
	n.start(ctx, t, "containerd", "containerd", "--config", filepath.Join(dir, "containerd.toml"))
	cluster.WaitFor(ctx, t, "containerd's socket", time.Minute, func() error {
		_, err := os.Stat(n.sock)
		return err
	})
	// Stops and removes every pod sandbox through the CRI (which also has
	// the CNI plugin release its address and veth) before containerd stops.
	t.Cleanup(func() { n.removeSandboxes(t) })
	return n
}

// startKubelet starts kube-proxy and the kubelet.
func (n *node) startKubelet(ctx context.Context, t *testing.T, bins cluster.Bins, kubeconfig string) {
	t.Helper()
	proxyConf := filepath.Join(n.dir, "kube-proxy.yaml")
	writeFile(t, proxyConf, fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
clusterCIDR: %s
healthzBindAddress: %s
metricsBindAddress: %s
# Pod to Service IP to a pod on the same bridge: without br_netfilter the
# reply would go straight back over the bridge, un-NATed; SNAT sends it
# back through the node.
nftables:
  masqueradeAll: true
# 0: leave this machine's conntrack settings alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, nodeName, podCIDR, proxyHealth, proxyMetric))
	n.start(ctx, t, "kube-proxy", filepath.Join(bins.K8s, "kube-proxy"), "--config", proxyConf)

	// The kubelet sets a few kernel tunables (vm.overcommit_memory,
	// kernel.panic, ...) as it expects them on a node: put back this
	// machine's when it is done.
	restore := saveSysctls(t, "vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
	t.Cleanup(restore)
	n.kubeconfig = kubeconfig
	n.startDNS(ctx, t, kubeconfig)
	conf := filepath.Join(n.dir, "kubelet.yaml")
	writeFile(t, conf, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Pods resolve Service names through the node's dnsmasq (dns_test.go).
clusterDNS: [%[5]s]
clusterDomain: %[6]s
# This machine: cgroup v1, the cgroupfs driver, swap allowed.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
port: %[2]d
readOnlyPort: 0
healthzPort: 0
podLogsDir: %[3]s
volumePluginDir: %[4]s
# The API server reads pod logs and Prometheus scrapes /metrics/cadvisor
# without credentials: a test node, reachable from this machine only.
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
# Never evict the test's pods or collect its images for lack of disk.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, n.sock, kubeletPort, filepath.Join(n.dir, "pod-logs"), filepath.Join(n.dir, "volume-plugins"), n.ip, clusterDomain))
	n.start(ctx, t, "kubelet", filepath.Join(bins.K8s, "kubelet"),
		"--config", conf,
		"--kubeconfig", kubeconfig,
		"--root-dir", filepath.Join(n.dir, "kubelet"),
		"--hostname-override", nodeName,
		"--node-ip", n.ip,
		"--v", "1")
}

// holdMountNamespace starts a process in a new mount namespace that makes
// its mounts shared (within the namespace), and keeps it there until the
// test ends; containerd, the kubelet and kube-proxy join it.
func (n *node) holdMountNamespace(t *testing.T) {
	t.Helper()
	cmd := exec.Command("unshare", "--mount", "--propagation", "unchanged", "sh", "-c",
		`mount --make-rshared / && echo ready && exec sleep infinity`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("unshare: %v", err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("making the node's mount namespace shared failed (%q)", line)
	}
	n.mnt = fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid)
	t.Cleanup(func() {
		// Whatever still runs in the namespace (a shim of a container the
		// CRI could not remove) is the node's: end it with the namespace,
		// whose mounts then go.
		n.killNamespace(t, cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// killNamespace kills every process but holder in the node's mount
// namespace, and says so: after an orderly teardown there is none.
func (n *node) killNamespace(t *testing.T, holder int) {
	t.Helper()
	want, err := os.Readlink(n.mnt)
	if err != nil {
		t.Error(err)
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == holder {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == want {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("process %d (%s) was left in the node's mount namespace: killed", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// start runs a node process in the node's mount namespace, its output in
// logs/NAME.log, and registers its stop (SIGTERM, then SIGKILL after 20 s);
// the log's end is printed if the test failed.
func (n *node) start(ctx context.Context, t *testing.T, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(n.dir, "logs", name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", append([]string{"--mount=" + n.mnt, "--", bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop on SIGTERM within 20 s: killed", name)
		}
		logFile.Close()
		if t.Failed() {
			t.Logf("%s log (end):\n%s", name, tail(logPath, 40))
		}
	})
}

// ctr runs containerd's ctr in the CRI's namespace.
func (n *node) ctr(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--mount=" + n.mnt, "--", "ctr", "--address", n.sock, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (n *node) writeCNI(t *testing.T) {
	t.Helper()
	// No ipMasq and no portmap: the pods talk to each other and to this
	// machine only, so the CNI adds no iptables rule to this machine.
	writeFile(t, filepath.Join(n.dir, "cni/net.d/10-flowlens-e2e.conflist"), fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "flowlens-e2e",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "hairpinMode": false,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": %q}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": %q
    }
  }]
}
`, bridgeName, podCIDR, filepath.Join(n.dir, "cni/ipam")))
}

func (n *node) writeContainerdConfig(t *testing.T) {
	t.Helper()
	writeFile(t, filepath.Join(n.dir, "containerd.toml"), fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  # No image can be pulled here: the test imports its own pause image.
  sandbox_image = %[6]q
  # The test process lacks CAP_SYS_RESOURCE: no lowering of oom_score_adj.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[8]q
`, filepath.Join(n.dir, "containerd/root"), filepath.Join(n.dir, "containerd/state"), n.sock, n.sock+".ttrpc",
		filepath.Join(n.dir, "containerd/opt"), pauseImage, filepath.Join(n.dir, "runc"), filepath.Join(n.dir, "cni/net.d")))
}

// removeSandboxes stops and removes every pod sandbox left (the kubelet is
// stopped by then): the CRI kills their containers and has the CNI plugin
// release their addresses and veths.
func (n *node) removeSandboxes(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close()
	rt := criv1.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &criv1.ListPodSandboxRequest{})
	if err != nil {
		t.Errorf("listing the pod sandboxes: %v", err)
		return
	}
	for _, s := range list.Items {
		if _, err := rt.StopPodSandbox(ctx, &criv1.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			t.Errorf("stopping sandbox %s (%s/%s): %v", s.Id, s.Metadata.Namespace, s.Metadata.Name, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &criv1.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			t.Errorf("removing sandbox %s (%s/%s): %v", s.Id, s.Metadata.Namespace, s.Metadata.Name, err)
		}
	}
}

// containerPID returns the PID of the container id ("containerd://ID").
func (n *node) containerPID(ctx context.Context, t *testing.T, id string) int {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := criv1.NewRuntimeServiceClient(conn).ContainerStatus(ctx, &criv1.ContainerStatusRequest{
		ContainerId: strings.TrimPrefix(id, "containerd://"), Verbose: true})
	if err != nil {
		t.Fatalf("container %s: %v", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("container %s: no pid in %q (%v)", id, st.Info["info"], err)
	}
	return info.Pid
}

// removeHostState removes what the node leaves on this machine outside its
// directory and mount namespace: the CNI bridge, kube-proxy's nftables
// tables, the kubelet's iptables canary chains and its cgroups.
func (n *node) removeHostState(t *testing.T) {
	t.Helper()
	if _, err := net.InterfaceByName(bridgeName); err == nil {
		if out, err := exec.Command("ip", "link", "del", bridgeName).CombinedOutput(); err != nil {
			t.Errorf("deleting the CNI bridge: %v\n%s", err, out)
		}
	}
	for _, family := range []string{"ip", "ip6"} {
		if exec.Command("nft", "list", "table", family, "kube-proxy").Run() == nil {
			if out, err := exec.Command("nft", "delete", "table", family, "kube-proxy").CombinedOutput(); err != nil {
				t.Errorf("deleting kube-proxy's nftables table: %v\n%s", err, out)
			}
		}
	}
	// The kubelet's iptables chains: its canaries, KUBE-FIREWALL (which
	// drops DNATed traffic to loopback from outside) and the hint chain.
	for _, ipt := range []string{"iptables", "ip6tables"} {
		for _, hook := range []string{"INPUT", "OUTPUT"} {
			for exec.Command(ipt, "-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL").Run() == nil {
				// once per jump the kubelet added
			}
		}
		for _, tc := range [][2]string{{"filter", "KUBE-FIREWALL"}, {"mangle", "KUBE-IPTABLES-HINT"},
			{"mangle", "KUBE-KUBELET-CANARY"}, {"nat", "KUBE-KUBELET-CANARY"}, {"filter", "KUBE-KUBELET-CANARY"}} {
			if exec.Command(ipt, "-t", tc[0], "-n", "-L", tc[1]).Run() == nil {
				_ = exec.Command(ipt, "-t", tc[0], "-F", tc[1]).Run()
				if out, err := exec.Command(ipt, "-t", tc[0], "-X", tc[1]).CombinedOutput(); err != nil {
					t.Errorf("%s -t %s -X %s: %v\n%s", ipt, tc[0], tc[1], err, out)
				}
			}
		}
	}
	// The iptables-nft tables the kubelet created, if nothing else uses
	// them now: no rule left in them.
	for _, table := range nftTables(t) {
		if slices.Contains(n.tablesBefore, table) {
			continue
		}
		out, err := exec.Command("nft", append([]string{"list", "table"}, strings.Fields(table)...)...).CombinedOutput()
		if err == nil && !nftHasRules(string(out)) {
			_ = exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(table)...)...).Run()
		}
	}
	removeCgroups(t, "kubepods")
}

// nftTables lists this machine's nftables tables as "family name".
func nftTables(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list tables: %v\n%s", err, out)
	}
	var tables []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables
}

// nftHasRules reports whether a table's listing has a rule: a line in a
// chain other than its type and policy.
func nftHasRules(listing string) bool {
	for _, l := range strings.Split(listing, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "}" || strings.HasPrefix(l, "table ") || strings.HasPrefix(l, "chain ") || strings.HasPrefix(l, "type ") || strings.HasPrefix(l, "#") {
			continue
		}
		return true
	}
	return false
}

// removeCgroups removes the kubelet's cgroup tree name (empty once every
// container stopped) from every cgroup v1 hierarchy, leaves first.
func removeCgroups(t *testing.T, name string) {
	t.Helper()
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	for _, root := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("removing cgroup %s: %v", dirs[i], err)
			}
		}
	}
}

// hostIP is this machine's address on its default route: the node's
// InternalIP, which the pods reach the API server through.
func hostIP(t *testing.T) string {
	t.Helper()
	// A UDP "connection" only picks the route: no packet is sent.
	c, err := net.Dial("udp4", "198.51.100.1:9")
	if err != nil {
		t.Fatalf("finding this machine's address: %v", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

func saveSysctls(t *testing.T, names ...string) func() {
	t.Helper()
	saved := map[string][]byte{}
	for _, name := range names {
		v, err := os.ReadFile("/proc/sys/" + name)
		if err != nil {
			t.Fatal(err)
		}
		saved[name] = v
	}
	return func() {
		for name, v := range saved {
			if err := os.WriteFile("/proc/sys/"+name, v, 0o644); err != nil {
				t.Errorf("restoring %s: %v", name, err)
			}
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
