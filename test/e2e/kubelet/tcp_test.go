//go:build e2e_kubelet

package kubelet

// The TCP transfer's flows, exact against the kernel's own counters.
//
// The UDP flows are exact by construction: the test knows every datagram.
// A TCP connection's packets are whatever TCP makes of the transfer (MSS,
// ACK pacing, delayed ACKs), so the test measures what each pod sent: the
// tx counters of the pod's eth0 (IFLA_STATS64), read from inside the pod's
// network namespace (/proc/PID/ns/net of its container: the test is root on
// the node) before and after the connection. The client→server flow's
// packets and bytes, summed over all the collector's records of its
// 5-tuple, must equal the client's deltas, and the server→client flow's the
// server's. For that equality to be exact:
//
//   - Offloads. veth's tx counters count socket buffers (veth_xmit adds one
//     packet and skb->len per skb), and with TSO/GSO (on by default on veth)
//     TCP hands the device buffers of up to 64 KB, one "packet" each there,
//     while the agent counts wire segments (a GSO buffer as its gso_segs,
//     each with its own Ethernet, IP and TCP headers: internal/agent's
//     TestGSOBulkTCP). With TSO and GSO off on the pod's eth0 (ethtool -K),
//     TCP still builds GSO buffers but the core segments them in software
//     before the driver (validate_xmit_skb), so veth counts one packet per
//     wire segment and its skb->len, Ethernet header included and no FCS:
//     exactly what the agent counts. (The alternative, keeping GSO and
//     comparing with the namespace's TcpOutSegs, would need the bytes
//     derived from the negotiated TCP options per extra segment; the
//     internal/agent tests do that, this test wants the kernel's own byte
//     count.) The namespace's TcpOutSegs+RetransSegs delta must equal the
//     tx packets delta (plus tx_dropped: segments veth did not pass on,
//     which the agent does not see either): a cross-check that every packet
//     the pod sent in the window was a TCP segment, one segment per packet.
//   - Nothing else leaves the pods in the window: IPv6 is off on their
//     interfaces (no MLD report, router or neighbour solicitation), the peer
//     pod's and the gateway's addresses have permanent neighbour entries (no
//     ARP request, no unicast reachability probe), neither pod has a probe,
//     the client sent its datagrams before and opens exactly one connection
//     after the test's go-ahead (SIGUSR1 to its process).
//   - The window closes when both pods' counters and TCP MIBs have stopped
//     moving (the FIN exchange and the last ACK have gone out).

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/test/e2e/cluster"
)

// podNet is a pod's network namespace, entered through its container's
// process, and its eth0.
type podNet struct {
	pid int // the container's process, in the node's PID namespace
	ns  *netlab.Netns
	ip  string
	mac net.HardwareAddr
}

func openPodNet(ctx context.Context, t *testing.T, n *node, pod *corev1.Pod) *podNet {
	t.Helper()
	pid := n.containerPID(ctx, t, pod.Status.ContainerStatuses[0].ContainerID)
	path := fmt.Sprintf("/proc/%d/ns/net", pid)
	fd, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatalf("network namespace of %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	t.Cleanup(func() { fd.Close() })
	// Not a bind mount of testnet's: never Delete it.
	ns := &netlab.Netns{Name: pod.Namespace + "/" + pod.Name, Path: path, Handle: fd}
	h, err := netlab.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatalf("eth0 of %s: %v", ns, err)
	}
	return &podNet{pid: pid, ns: ns, ip: pod.Status.PodIP, mac: l.Attrs().HardwareAddr}
}

// silence makes p's eth0 count wire packets and send nothing by itself:
// TSO and GSO off, IPv6 off, permanent neighbour entries for peers (IPv4
// address to MAC).
func (p *podNet) silence(t *testing.T, peers map[string]net.HardwareAddr) {
	t.Helper()
	if out, err := netlab.RunIn(p.ns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off"); err != nil {
		t.Fatalf("ethtool -K eth0 tso off gso off in %s: %v\n%s", p.ns, err, out)
	}
	out, err := netlab.RunIn(p.ns, "ethtool", "-k", "eth0")
	if err != nil {
		t.Fatalf("ethtool -k eth0 in %s: %v\n%s", p.ns, err, out)
	}
	for _, f := range []string{"tcp-segmentation-offload", "generic-segmentation-offload"} {
		if !strings.Contains(string(out), f+": off") {
			t.Fatalf("%s of eth0 in %s is not off:\n%s", f, p.ns, out)
		}
	}
	netlab.Quiet(t, p.ns)
	for ip, mac := range peers {
		netlab.Neigh(t, p.ns, "eth0", ip, mac)
	}
}

// txState is what a pod has sent: its eth0's tx counters (packets and
// bytes veth passed on to its peer, and those it dropped: a full backlog
// queue of the receiving CPU), and the TCP segments its namespace sent
// (OutSegs + RetransSegs of /proc/net/snmp; retrans of them RetransSegs).
type txState struct {
	packets, bytes, dropped, tcpSegs, retrans uint64
}

func (p *podNet) tx(t *testing.T) txState {
	t.Helper()
	h, err := netlab.Handle(p.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatalf("eth0 of %s: %v", p.ns, err)
	}
	st := l.Attrs().Statistics
	if st == nil {
		t.Fatalf("eth0 of %s: the kernel sent no statistics", p.ns)
	}
	// /proc/thread-self: Do switches only the calling thread into the
	// namespace.
	var text []byte
	if err := p.ns.Do(func() (err error) { text, err = os.ReadFile("/proc/thread-self/net/snmp"); return }); err != nil {
		t.Fatal(err)
	}
	mib := map[string]uint64{}
	var names []string
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, v := range f[1:] {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && i < len(names) { // MaxConn is -1
				mib[names[i]] = uint64(n)
			}
		}
	}
	out, ok := mib["OutSegs"]
	if !ok {
		t.Fatalf("no Tcp: OutSegs in the snmp of %s:\n%s", p.ns, text)
	}
	return txState{st.TxPackets, st.TxBytes, st.TxDropped, out + mib["RetransSegs"], mib["RetransSegs"]}
}

func (s txState) minus(o txState) txState {
	return txState{s.packets - o.packets, s.bytes - o.bytes, s.dropped - o.dropped, s.tcpSegs - o.tcpSegs, s.retrans - o.retrans}
}

// settle waits until the pods' txStates have not moved for 600 ms and
// returns them.
func settle(t *testing.T, pods ...*podNet) []txState {
	t.Helper()
	read := func() []txState {
		var s []txState
		for _, p := range pods {
			s = append(s, p.tx(t))
		}
		return s
	}
	last, stable := read(), 0
	for deadline := time.Now().Add(15 * time.Second); stable < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the pods' tx counters still move after 15 s: %+v", last)
		}
		time.Sleep(200 * time.Millisecond)
		cur := read()
		if fmt.Sprint(cur) == fmt.Sprint(last) {
			stable++
		} else {
			stable = 0
		}
		last = cur
	}
	return last
}

// gateway returns the CNI bridge's IPv4 address (the pods' gateway) and MAC.
func gateway(t *testing.T) (string, net.HardwareAddr) {
	t.Helper()
	br, err := net.InterfaceByName(bridgeName)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := br.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			return ipn.IP.String(), br.HardwareAddr
		}
	}
	t.Fatalf("%s has no IPv4 address: %v", bridgeName, addrs)
	return "", nil
}

// checkTCPFlow has client open its TCP connection to server and checks
// that the collector's flows of both directions count exactly what the
// pods' interfaces sent for it (see the top of this file), crossing
// ifaces, named from the API server.
func checkTCPFlow(ctx context.Context, t *testing.T, n *node, cs kubernetes.Interface, collector, client, server *corev1.Pod, ifaces []string) {
	t.Helper()
	c, s := openPodNet(ctx, t, n, client), openPodNet(ctx, t, n, server)
	gwIP, gwMAC := gateway(t)
	c.silence(t, map[string]net.HardwareAddr{s.ip: s.mac, gwIP: gwMAC})
	s.silence(t, map[string]net.HardwareAddr{c.ip: c.mac, gwIP: gwMAC})
	before := settle(t, c, s)

	if err := unix.Kill(c.pid, unix.SIGUSR1); err != nil {
		t.Fatalf("go-ahead to %s (pid %d): %v", c.ns, c.pid, err)
	}
	waitLog(ctx, t, cs, client, "tcp done")
	log, err := podLog(ctx, cs, client)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`tcp from ` + regexp.QuoteMeta(c.ip) + `:(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no local address of the TCP connection in the log of %s:\n%s", c.ns, log)
	}
	port, _ := strconv.Atoi(m[1])
	waitLog(ctx, t, cs, server, fmt.Sprintf("tcp: %d bytes from %s:%d ", tcpBytes, c.ip, port))
	after := settle(t, c, s)
	up, down := after[0].minus(before[0]), after[1].minus(before[1])
	t.Logf("TCP %s:%d -> %s:%d: client eth0 sent %d packets, %d bytes, dropped %d (TCP segments %d, %d of them retransmitted); server eth0 sent %d packets, %d bytes, dropped %d (TCP segments %d, %d retransmitted)",
		c.ip, port, s.ip, tcpPort, up.packets, up.bytes, up.dropped, up.tcpSegs, up.retrans, down.packets, down.bytes, down.dropped, down.tcpSegs, down.retrans)
	for _, d := range []struct {
		who string
		tx  txState
	}{{"client", up}, {"server", down}} {
		// A segment veth dropped (not passed on, so not seen by the
		// agent either) is one TCP sent but not in tx_packets.
		if d.tx.tcpSegs != d.tx.packets+d.tx.dropped {
			t.Errorf("the %s's eth0 sent %d packets and dropped %d in the window but its TCP %d segments: something else was sent, or an skb was not one segment",
				d.who, d.tx.packets, d.tx.dropped, d.tx.tcpSegs)
		}
	}
	if up.bytes < tcpBytes {
		t.Errorf("the client's eth0 sent %d bytes, less than the %d of payload", up.bytes, tcpBytes)
	}

	var ups, downs map[int][2]uint64
	var upRecs, downRecs []record
	cluster.WaitFor(ctx, t, "the collector to count both directions of the TCP connection", time.Minute, func() error {
		var err error
		if ups, upRecs, err = flowTotals(ctx, cs, collector, 6, c.ip, s.ip, tcpPort); err != nil {
			return err
		}
		if downs, downRecs, err = flowTotals(ctx, cs, collector, 6, s.ip, c.ip, port); err != nil {
			return err
		}
		if ups[port][0] < up.packets || downs[tcpPort][0] < down.packets {
			return fmt.Errorf("TCP flows so far (source port: packets, bytes): client->server %v, server->client %v; want %d and %d packets",
				ups, downs, up.packets, down.packets)
		}
		return nil
	})
	t.Logf("collector: client->server %d packets, %d bytes in %d records; server->client %d packets, %d bytes in %d records",
		ups[port][0], ups[port][1], len(upRecs), downs[tcpPort][0], downs[tcpPort][1], len(downRecs))
	if len(ups) != 1 || len(downs) != 1 {
		t.Errorf("TCP flows (source port: packets, bytes): client->server %v, server->client %v; want one connection, from port %d", ups, downs, port)
	}
	if got := ups[port]; got != [2]uint64{up.packets, up.bytes} {
		t.Errorf("TCP flow client->server: %d packets, %d bytes; the client's eth0 sent %d, %d", got[0], got[1], up.packets, up.bytes)
	}
	if got := downs[tcpPort]; got != [2]uint64{down.packets, down.bytes} {
		t.Errorf("TCP flow server->client: %d packets, %d bytes; the server's eth0 sent %d, %d", got[0], got[1], down.packets, down.bytes)
	}
	checkNames(t, upRecs, client, server, ifaces)
	checkNames(t, downRecs, server, client, ifaces)
}
