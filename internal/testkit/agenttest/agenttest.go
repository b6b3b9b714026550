// Package agenttest runs the agent's real code in-process for tests: Start
// loads a configuration from flags and runs an agent on it, Stop flushes it
// and returns the flows it printed (JSON lines, decoded with the public
// field names, so a test also checks the output contract); Pair builds two
// network namespaces joined by a veth (internal/testkit/netlab) and Match
// and Sum select flows. Feature tests (internal/agent/feature/<name>) and
// the agent's own tests share it. Most uses need root and a kernel.
package agenttest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// JSONFlow is one line of the agent's JSON output, decoded with the public
// field names (so the test also checks the output contract).
type JSONFlow struct {
	SrcAddr    string `json:"src_addr"`
	DstAddr    string `json:"dst_addr"`
	SrcPort    uint16 `json:"src_port"`
	DstPort    uint16 `json:"dst_port"`
	Proto      uint8  `json:"proto"`
	IcmpType   uint8  `json:"icmp_type"`
	IcmpCode   uint8  `json:"icmp_code"`
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	TCPFlags   uint16 `json:"tcp_flags"`
	EthType    uint16 `json:"eth_type"`
	DSCP       uint8  `json:"dscp"`
	SrcMAC     string `json:"src_mac"`
	DstMAC     string `json:"dst_mac"`
	StartTime  string `json:"start_time"`
	EndTime    string `json:"end_time"`
	Interfaces []struct {
		Name      string `json:"name"`
		Ifindex   uint32 `json:"ifindex"`
		Netns     string `json:"netns"`
		Direction string `json:"direction"`
	} `json:"interfaces"`
	Sampling      uint32 `json:"sampling"`
	Partial       *bool  `json:"partial"`
	FragUnmatched *bool  `json:"frag_unmatched"`

	DropPackets  uint64 `json:"drop_packets"`
	DropBytes    uint64 `json:"drop_bytes"`
	DropCause    string `json:"drop_cause"`
	DropTCPState string `json:"drop_tcp_state"`
	DropTCPFlags uint16 `json:"drop_tcp_flags"`
	RTTNs        uint64 `json:"rtt_ns"`
	RTTMaxNs     uint64 `json:"rtt_max_ns"`
	Retransmits  uint64 `json:"retransmits"`

	XlatSrcAddr string `json:"xlat_src_addr"`
	XlatSrcPort uint16 `json:"xlat_src_port"`
	XlatDstAddr string `json:"xlat_dst_addr"`
	XlatDstPort uint16 `json:"xlat_dst_port"`
	XlatZoneID  uint16 `json:"xlat_zone_id"`

	TLSVersion     string `json:"tls_version"`
	TLSCipherSuite string `json:"tls_cipher_suite"`
	TLSGroup       string `json:"tls_group"`
	TLSClientHello bool   `json:"tls_client_hello"`
	QUIC           bool   `json:"quic"`

	DNSID        uint16 `json:"dns_id"`
	DNSFlags     uint16 `json:"dns_flags"`
	DNSRcode     string `json:"dns_rcode"`
	DNSName      string `json:"dns_name"`
	DNSLatencyNs uint64 `json:"dns_latency_ns"`
	DNSTimeout   bool   `json:"dns_timeout"`
}

// Ifaces lists the flow's interfaces as netns/name:direction.
func (f JSONFlow) Ifaces() string {
	var s []string
	for _, i := range f.Interfaces {
		s = append(s, i.Netns+"/"+i.Name+":"+i.Direction)
	}
	return strings.Join(s, " ")
}

// ParseFlows decodes the agent's JSON lines, failing t on a line that lacks
// the contract fields.
func ParseFlows(t *testing.T, out string) []JSONFlow {
	t.Helper()
	var flows []JSONFlow
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var f JSONFlow
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		if err := dec.Decode(&f); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		if f.Partial == nil || f.StartTime == "" || f.EndTime == "" {
			t.Fatalf("line lacks contract fields: %q", sc.Text())
		}
		if _, err := time.Parse(time.RFC3339Nano, f.StartTime); err != nil {
			t.Fatalf("start_time %q: %v", f.StartTime, err)
		}
		flows = append(flows, f)
	}
	return flows
}

// Harness is a running agent.
type Harness struct {
	t      *testing.T
	A      *agent.Agent
	out    *testkit.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

// Start runs the agent's real code in-process with the given flags and
// waits until it has attached to want interfaces.
func Start(t *testing.T, want int, opts agent.Options, args ...string) *Harness {
	t.Helper()
	cfg, err := config.Load(append([]string{"--metrics-address="}, args...), nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	out := &testkit.SyncBuffer{}
	opts.Stdout = out
	a, err := agent.New(cfg, opts)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Harness{t: t, A: a, out: out, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- a.Run(ctx) }()
	t.Cleanup(func() { h.Stop() })
	deadline := time.Now().Add(10 * time.Second)
	for a.DP.Attached() < want {
		if time.Now().After(deadline) {
			t.Fatalf("agent attached to %d interfaces, want %d", a.DP.Attached(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h
}

// Output is what the agent has printed so far (its JSON lines).
func (h *Harness) Output() string { return h.out.String() }

// Stop stops the agent (flushing the flows) and returns every flow it exported.
func (h *Harness) Stop() []JSONFlow {
	h.t.Helper()
	if h.cancel == nil {
		return ParseFlows(h.t, h.out.String())
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("agent stopped with error: %v", err)
		}
	case <-time.After(30 * time.Second):
		h.t.Fatal("agent did not stop within 30s")
	}
	return ParseFlows(h.t, h.out.String())
}

// Match selects flows by 5-tuple (zero fields match anything).
type Match struct {
	Src, Dst     string
	Sport, Dport uint16
	Proto        uint8
}

// OK says whether f matches.
func (m Match) OK(f JSONFlow) bool {
	return (m.Src == "" || f.SrcAddr == m.Src) && (m.Dst == "" || f.DstAddr == m.Dst) &&
		(m.Sport == 0 || f.SrcPort == m.Sport) && (m.Dport == 0 || f.DstPort == m.Dport) &&
		(m.Proto == 0 || f.Proto == m.Proto)
}

// Sum adds up the packets and bytes of the flows m selects, and returns them.
func Sum(flows []JSONFlow, m Match) (packets, bytes uint64, recs []JSONFlow) {
	for _, f := range flows {
		if m.OK(f) {
			packets += f.Packets
			bytes += f.Bytes
			recs = append(recs, f)
		}
	}
	return
}

// Pair is two namespaces joined by a veth, with static neighbours and IPv6
// off, so the veth counters see only the test's traffic.
type Pair struct {
	A, B     *netlab.Netns
	IfA, IfB string
	IPA, IPB string
}

// NewPair joins two namespaces, a (10.99.0.1) and b (10.99.0.2), quiet.
func NewPair(t *testing.T) *Pair {
	t.Helper()
	return PairOf(t, "a", "b", "10.99.0.1", "10.99.0.2", "/24", netlab.Quiet)
}

// PairOf joins two new namespaces with a veth pair (veth-a, veth-b)
// addressed ipA and ipB (prefix: "/24"), with static neighbours; quiet
// silences each namespace's own traffic.
func PairOf(t *testing.T, nameA, nameB, ipA, ipB, prefix string, quiet func(netlab.T, *netlab.Netns)) *Pair {
	t.Helper()
	p := &Pair{A: netlab.NewNetns(t, nameA), B: netlab.NewNetns(t, nameB), IfA: "veth-a", IfB: "veth-b", IPA: ipA, IPB: ipB}
	quiet(t, p.A)
	quiet(t, p.B)
	la, lb := netlab.Veth(t, p.A, p.IfA, p.B, p.IfB)
	netlab.AddAddr(t, p.A, p.IfA, p.IPA+prefix)
	netlab.AddAddr(t, p.B, p.IfB, p.IPB+prefix)
	netlab.Neigh(t, p.A, p.IfA, p.IPB, lb.Attrs().HardwareAddr)
	netlab.Neigh(t, p.B, p.IfB, p.IPA, la.Attrs().HardwareAddr)
	return p
}

// TCPSend connects from ns to addr, writes size bytes and closes; it
// returns the connection's local port.
func TCPSend(t *testing.T, ns *netlab.Netns, network, addr string, size int) (port int) {
	t.Helper()
	err := ns.Do(func() error {
		c, err := net.Dial(network, addr)
		if err != nil {
			return err
		}
		port = c.LocalAddr().(*net.TCPAddr).Port
		if _, err := c.Write(make([]byte, size)); err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TCPSink listens on addr in ns and reports on the returned channel how
// many bytes its first connection carried (-1 if none came).
func TCPSink(t *testing.T, ns *netlab.Netns, network, addr string) <-chan int64 {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen(network, addr); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	return got
}

// NetnsArg is the --netns flag that watches both namespaces.
func (p *Pair) NetnsArg() string { return "--netns=" + p.A.Name + "," + p.B.Name }

// MustListen opens a UDP socket on addr in ns, closed with the test.
func MustListen(t *testing.T, ns *netlab.Netns, addr string) *net.UDPConn {
	t.Helper()
	c, err := netlab.UDPListen(ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// AwaitReceived waits up to 60s for the byte count a transfer's receiver
// reports on got, and fails unless it is size.
func AwaitReceived(t *testing.T, got <-chan int64, size int) {
	t.Helper()
	select {
	case n := <-got:
		if n != int64(size) {
			t.Fatalf("received %d bytes, want %d", n, size)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("transfer did not finish in 60s")
	}
}

// EnrichSum adds up the enrichment fields of the matching records.
func EnrichSum(flows []JSONFlow, m Match) (drops, dropBytes, retrans, rttMax uint64, causes map[string]bool, partial int) {
	causes = map[string]bool{}
	for _, f := range flows {
		if !m.OK(f) {
			continue
		}
		drops += f.DropPackets
		dropBytes += f.DropBytes
		retrans += f.Retransmits
		rttMax = max(rttMax, f.RTTMaxNs)
		if f.DropCause != "" {
			causes[f.DropCause] = true
		}
		if *f.Partial {
			partial++
		}
	}
	return
}

// HookStatus is the status of the named feature's hook in the running agent
// (zero when the feature is not enabled).
func (h *Harness) HookStatus(name string) datapath.HookStatus {
	for _, st := range h.A.DP.Hooks() {
		if st.Name == name {
			return st
		}
	}
	return datapath.HookStatus{}
}

// Transfer sends size bytes from A to B over TCP on port and returns when B
// has read them all.
func (p *Pair) Transfer(t *testing.T, port, size int) {
	t.Helper()
	addr := net.JoinHostPort(p.IPB, strconv.Itoa(port))
	got := TCPSink(t, p.B, "tcp", addr)
	TCPSend(t, p.A, "tcp", addr, size)
	AwaitReceived(t, got, size)
}
