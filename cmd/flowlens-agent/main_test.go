package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flowlens-agent")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Bad configuration: exit status 2 and a message naming the field.
func TestBadConfigExits(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	badRules := filepath.Join(dir, "rules.yaml")
	badInline := filepath.Join(dir, "agent.yaml")
	for path, content := range map[string]string{
		badRules:  "- {name: web, action: accept, ports: 443}\n- {name: no-health, action: reject, destination_ports: 100-80}\n",
		badInline: "filter_rules:\n  - name: pings\n    action: accept\n    protocol: tcp\n    icmp_type: 8\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--sampling=0"}, "", `invalid --sampling "0": must be >= 1`},
		{[]string{"--cache-active-timeout=soon"}, "", "--cache-active-timeout"},
		{[]string{"--export=kafka"}, "", "--export"},
		{[]string{"--interfaces=/eth[/"}, "", "--interfaces"},
		{[]string{"--log-level=loud"}, "", "--log-level"},
		{nil, "FLOWLENS_AGENT_CACHE_MAX_FLOWS=0", "--cache-max-flows"},
		{[]string{"--no-such-flag"}, "", "no-such-flag"},
		{[]string{"--filter-rules", badRules}, "",
			`invalid --filter-rules "` + badRules + `": line 2: filter rule 1 ("no-health"): destination_ports "100-80": range is upside down`},
		{[]string{"--config", badInline}, "",
			badInline + `:5: filter rule 0 ("pings"): icmp_type "8": needs protocol icmp or icmpv6, not tcp`},
		{[]string{"--filter-default", "drop"}, "", `invalid --filter-default "drop": must be accept or reject`},
	} {
		cmd := exec.Command(bin, tc.args...)
		if tc.env != "" {
			cmd.Env = append(os.Environ(), tc.env)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v %s: got %v, want exit status 2", tc.args, tc.env, err)
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v %s: stderr %q does not mention %q", tc.args, tc.env, stderr.String(), tc.want)
		}
	}
}

// SIGTERM while traffic runs: the process exits 0 after flushing the flows
// still in the kernel, and leaves no tcx program on the interfaces.
func TestSIGTERMFlushesAndDetaches(t *testing.T) {
	netlab.Require(t) // before the build: a skipped test builds nothing
	bin := buildAgent(t)
	a, b := netlab.NewNetns(t, "ta"), netlab.NewNetns(t, "tb")
	netlab.Quiet(t, a)
	netlab.Quiet(t, b)
	la, lb := netlab.Veth(t, a, "veth-a", b, "veth-b")
	netlab.AddAddr(t, a, "veth-a", "10.95.0.1/24")
	netlab.AddAddr(t, b, "veth-b", "10.95.0.2/24")
	netlab.Neigh(t, a, "veth-a", "10.95.0.2", lb.Attrs().HardwareAddr)
	netlab.Neigh(t, b, "veth-b", "10.95.0.1", la.Attrs().HardwareAddr)

	cmd := exec.Command(bin, "--netns="+a.Name+","+b.Name, "--cache-active-timeout=1h", "--metrics-address=", "--log-level=debug")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitAttached(t, a, la.Attrs().Index, &stderr)
	waitAttached(t, b, lb.Attrs().Index, &stderr)

	var sent atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := netlab.UDPSend(a, "10.95.0.1:4000", "10.95.0.2:9000", []byte("payload"), 10); err != nil {
				done <- err
				return
			}
			sent.Add(10)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	sentBefore := sent.Load()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("agent exited with %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("agent did not exit 30s after SIGTERM; stderr:\n%s", stderr.String())
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var packets uint64
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var f struct {
			SrcAddr string `json:"src_addr"`
			DstPort uint16 `json:"dst_port"`
			Packets uint64 `json:"packets"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		if f.SrcAddr == "10.95.0.1" && f.DstPort == 9000 {
			packets += f.Packets
		}
	}
	if packets < uint64(sentBefore) || packets > uint64(sent.Load()) {
		t.Fatalf("flushed %d packets; %d were sent before SIGTERM, %d in all", packets, sentBefore, sent.Load())
	}
	for _, x := range []struct {
		ns  *netlab.Netns
		idx int
	}{{a, la.Attrs().Index}, {b, lb.Attrs().Index}} {
		if n := tcxPrograms(t, x.ns, x.idx); n != 0 {
			t.Fatalf("%d tcx programs left on %s/%d after exit", n, x.ns, x.idx)
		}
	}
	t.Logf("sent %d before SIGTERM, %d in all; flushed %d", sentBefore, sent.Load(), packets)
}

func tcxPrograms(t *testing.T, ns *netlab.Netns, ifindex int) int {
	t.Helper()
	n := 0
	err := ns.Do(func() error {
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: at})
			if err != nil {
				return err
			}
			n += len(res.Programs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitAttached(t *testing.T, ns *netlab.Netns, ifindex int, stderr *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for tcxPrograms(t, ns, ifindex) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("agent did not attach to %s/%d; stderr:\n%s", ns, ifindex, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
