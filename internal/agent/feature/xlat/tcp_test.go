package xlat_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// A TCP client of a Service, host-network (DNAT in OUTPUT) or a pod
// (DNAT in PREROUTING). Host: after its first packets the node's egress
// counts them in the alias for the flow before NAT (bpf/xlat.h,
// xlat_delegate). Both: the tcp feature's markers (the connect, its
// handshake latency, the client's reset) are the flow's, on client ->
// Service's record: the SYN-ACK, keyed backend -> client before un-NAT,
// finds its connect through the request's alias (bpf/tcp.h); no record
// under the tuple after NAT; and the flow's packets are the segments the
// client's TCP sent (nstat), each once.
func TestServiceTCPClient(t *testing.T) {
	for _, c := range []struct {
		name, chain, src string
		client           func(*svcLab) *netlab.Netns
	}{
		{"host", "out", svcNodeB, func(l *svcLab) *netlab.Netns { return l.node }},
		{"pod", "pre", svcPod, func(l *svcLab) *netlab.Netns { return l.a }},
	} {
		t.Run(c.name, func(t *testing.T) { serviceTCPClient(t, c.chain, c.src, c.client) })
	}
}

func serviceTCPClient(t *testing.T, chain, src string, client func(*svcLab) *netlab.Netns) {
	l := newSvcLab(t, false)
	netlab.Run(t, l.node, "nft", "add rule ip svc "+chain+" ip daddr "+svcVIP+" tcp dport 80 dnat to "+svcBackend+":8080")
	cl := client(l)
	var ln net.Listener
	if err := l.b.Do(func() (err error) { ln, err = net.Listen("tcp", net.JoinHostPort(svcBackend, "8080")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	const writes = 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// One answer per write, so that every segment of the client is
		// acknowledged and none is in flight when it resets.
		buf := make([]byte, 5)
		for range writes {
			if _, err := io.ReadFull(c, buf); err != nil {
				break
			}
			c.Write([]byte("ok"))
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	h := agenttest.Start(t, svcWantIfaces, agent.Options{}, "--netns="+l.node.Name, "--features=xlat,tcp")
	c0 := netlab.NetCounters(t, cl, "snmp", "Tcp:")
	var sport uint16
	err := cl.Do(func() error {
		c, err := net.Dial("tcp", net.JoinHostPort(svcVIP, "80"))
		if err != nil {
			return err
		}
		sport = uint16(c.LocalAddr().(*net.TCPAddr).Port)
		for range writes {
			if _, err := c.Write([]byte("hello")); err != nil {
				return err
			}
			if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
				return err
			}
		}
		c.(*net.TCPConn).SetLinger(0)
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	time.Sleep(50 * time.Millisecond)
	c1 := netlab.NetCounters(t, cl, "snmp", "Tcp:")
	h.Stop()
	type tcpFlow struct {
		agenttest.JSONFlow
		TCPRole      string `json:"tcp_role"`
		TCPConnects  uint64 `json:"tcp_connects"`
		TCPResets    uint64 `json:"tcp_resets"`
		TCPHandshake uint64 `json:"tcp_handshake_ns"`
	}
	var req tcpFlow
	recs := 0
	sc := bufio.NewScanner(strings.NewReader(h.Output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var f tcpFlow
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		switch {
		case f.Proto != 6:
		case f.SrcAddr == src && f.SrcPort == sport && f.DstAddr == svcVIP && f.DstPort == 80:
			recs++
			req.Packets += f.Packets
			req.TCPConnects += f.TCPConnects
			req.TCPResets += f.TCPResets
			req.TCPHandshake += f.TCPHandshake
			if f.TCPRole != "client" || f.XlatDstAddr != svcBackend || f.XlatDstPort != 8080 {
				t.Errorf("client -> Service: role %q, translation %s:%d; want client, %s:8080", f.TCPRole, f.XlatDstAddr, f.XlatDstPort, svcBackend)
			}
		case f.SrcAddr == svcBackend: // the backend's reply, a flow of its own
		case f.SrcPort == sport || f.DstPort == sport:
			// Under the tuple after NAT: no record at all (the SYN-ACK,
			// keyed backend -> node, finds its connection through the
			// request's alias, bpf/tcp.h).
			t.Errorf("a record under the tuple after NAT: %s:%d -> %s:%d, %d packets, %d resets, %d connects, role %q",
				f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Packets, f.TCPResets, f.TCPConnects, f.TCPRole)
		}
	}
	sent, rsts := c1["OutSegs"]-c0["OutSegs"], c1["OutRsts"]-c0["OutRsts"]
	t.Logf("client -> Service: %d records, %d packets (TcpOutSegs +%d), %d connects, %d resets (TcpOutRsts +%d)",
		recs, req.Packets, sent, req.TCPConnects, req.TCPResets, rsts)
	if req.TCPHandshake == 0 {
		t.Errorf("client -> Service: no handshake latency (the SYN-ACK did not find the connect)")
	}
	if req.Packets != sent || req.TCPConnects != 1 || req.TCPResets != 1 || rsts != 1 {
		t.Errorf("client -> Service: %d packets, %d connects, %d resets (TcpOutRsts +%d); want %d, 1, 1, 1", req.Packets, req.TCPConnects, req.TCPResets, rsts, sent)
	}
}
