//go:build chaos

package chaos

import (
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// SIGTERM with one dead exporter beside stdout. The real agent binary
// watches a veth pair and exports to stdout and over IPFIX/TCP to a
// collector that is hung: its socket takes one connection into a backlog of
// one and never reads it (nor accepts another). Known UDP traffic, one flow
// per destination port, crosses the veth in two waves: the first is evicted
// while the agent runs (the IPFIX exporter's socket buffers fill, then its
// queue), the second is still in the kernel when SIGTERM comes. Then:
//   - stdout carries every packet the kernel counted on the veth, exactly;
//   - the agent exits cleanly (status 0) within its worst-case shutdown
//     (config.ShutdownWorstCase, which the operator's grace period covers);
//   - the dead exporter's flows are all accounted for in its final counts
//     (the "exporter stopped" log line): exported, dropped for
//     backpressure, lost in failed exports, and the leftovers still queued
//     when its shutdown budget ran out, counted, not silently released.
func TestShutdownWithDeadExporter(t *testing.T) {
	netlab.Require(t)
	p := agenttest.NewPair(t)
	dead := hungCollector(t)

	var out, log testkit.SyncBuffer
	cmd := exec.Command(bin["flowlens-agent"], p.NetnsArg(), "--cache-active-timeout=2s", "--metrics-address=",
		"--export=stdout,ipfix", "--ipfix-transport=tcp", "--ipfix-target="+dead)
	cmd.Stdout, cmd.Stderr = &out, &log
	if err := testkit.StartOwned(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", log.String())
		}
	})
	waitLog(t, &log, "watching 2 interfaces", 30*time.Second)

	const wave = 60000 // flows per wave: one UDP packet to each of as many ports
	sendWave(t, p, 20000, wave)
	waitLog(t, &log, "export queue full", 30*time.Second) // the dead exporter is behind: its queue dropped
	sendWave(t, p, 20001, wave)

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(2 * config.ShutdownWorstCase()):
		t.Fatalf("agent still running %v after SIGTERM", 2*config.ShutdownWorstCase())
	}
	took := time.Since(start)
	if err != nil {
		t.Errorf("agent exited with %v, want status 0", err)
	}
	if took > config.ShutdownWorstCase() {
		t.Errorf("agent took %v to exit after SIGTERM, more than its worst case %v", took, config.ShutdownWorstCase())
	}

	// stdout: every packet the kernel counted, exactly.
	_, _, txA, _ := netlab.LinkStats(p.A, p.IfA)
	_, _, txB, _ := netlab.LinkStats(p.B, p.IfB)
	flows := agenttest.ParseFlows(t, out.String())
	var packets uint64
	for _, f := range flows {
		packets += f.Packets
	}
	if packets != txA+txB {
		t.Errorf("stdout: %d packets in %d flows, the kernel counted %d (veth-a sent %d, veth-b %d)", packets, len(flows), txA+txB, txA, txB)
	}
	if txA < 2*wave {
		t.Errorf("veth-a sent %d packets, want at least the %d of the traffic", txA, 2*wave)
	}

	// The final counts each exporter logged.
	std, ipfix := stopped(t, log.String(), "stdout"), stopped(t, log.String(), "ipfix")
	if std["exported_flows"] != uint64(len(flows)) || std["dropped_flows"] != 0 || std["shutdown_lost_flows"] != 0 || std["failed_exports"] != 0 {
		t.Errorf("stdout's final counts %v: want %d flows exported, none lost", std, len(flows))
	}
	// Every batch went to both exporters: what stdout was given.
	given := std["exported_flows"] + std["dropped_flows"] + std["shutdown_lost_flows"] + std["failed_export_flows"]
	if sum := ipfix["exported_flows"] + ipfix["dropped_flows"] + ipfix["shutdown_lost_flows"] + ipfix["failed_export_flows"]; sum != given {
		t.Errorf("dead exporter's final counts %v add up to %d flows, want the %d it was given", ipfix, sum, given)
	}
	if ipfix["shutdown_lost_flows"] == 0 || !strings.Contains(log.String(), "exporter stopped with batches not delivered") {
		t.Errorf("dead exporter: %d flows counted lost at shutdown, want its leftovers counted and logged", ipfix["shutdown_lost_flows"])
	}
	if ipfix["failed_flows"] > ipfix["failed_export_flows"] {
		t.Errorf("dead exporter: %d flows lost in failed writes, more than the %d of its failed exports", ipfix["failed_flows"], ipfix["failed_export_flows"])
	}
	t.Logf("SIGTERM to exit: %v (worst case %v); kernel %d packets, stdout %d packets in %d flows; ipfix %v",
		took, config.ShutdownWorstCase(), txA+txB, packets, len(flows), ipfix)
}

// hungCollector is an IPFIX/TCP collector that has hung: a listening socket
// with a backlog of one and a small receive buffer, never accepted from.
// The kernel completes the first connection and buffers a little of it;
// further connection attempts time out. It returns its address.
func hungCollector(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

// sendWave sends one UDP packet from a's port sport to each of n ports of b:
// n flows (b answers some with ICMP port unreachable, counted by the
// kernel on veth-b like any packet).
func sendWave(t *testing.T, p *agenttest.Pair, sport, n int) {
	t.Helper()
	err := p.A.Do(func() error {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(p.IPA), Port: sport})
		if err != nil {
			return err
		}
		defer c.Close()
		payload := make([]byte, 64)
		for i := 0; i < n; i++ {
			if _, err := c.WriteToUDP(payload, &net.UDPAddr{IP: net.ParseIP(p.IPB), Port: 1024 + i}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitLog waits until the agent's log says s.
func waitLog(t *testing.T, log *testkit.SyncBuffer, s string, wait time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(wait); !strings.Contains(log.String(), s); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("agent did not log %q in %v", s, wait)
		}
	}
}

// stopped reads the counts of the exporter's "exporter stopped" log line.
func stopped(t *testing.T, log, exporter string) map[string]uint64 {
	t.Helper()
	re := regexp.MustCompile(`msg="exporter stopped" exporter=` + exporter + ` (.*)`)
	m := re.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no \"exporter stopped\" line for %s", exporter)
	}
	counts := map[string]uint64{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", exporter, kv, err)
		}
		counts[k] = n
	}
	return counts
}
