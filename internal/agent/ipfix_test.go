package agent_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/pkg/flow"
)

// ipfixFlow is one data record decoded by goflow2.
type ipfixFlow struct {
	src, dst                  netip.Addr
	sport, dport              uint16
	proto                     uint8
	octets, packets, l2Octets uint64
	start, end                uint64
	ifaces                    string // the interfaces list: "name in out" per entry (ifaceList)
	rtt, rttMax               uint64 // flowlens's elements 1004 and 1009, 0 when the record has none
	pen                       map[uint16][]byte
}

// ipfixPEN is the enterprise number the agent is given (--ipfix-enterprise-number).
const ipfixPEN = 4242

// ifaceList decodes an interfaces list (a subTemplateList: semantic,
// template id, then entries of a name, ingressInterface, egressInterface)
// into "name in out" per entry, as ifaceString writes the agent's.
func ifaceList(b []byte) string {
	if len(b) < 3 {
		return fmt.Sprintf("bad list %x", b)
	}
	var out []string
	for b = b[3:]; len(b) > 0; {
		n := int(b[0])
		if len(b) < 1+n+8 {
			return fmt.Sprintf("bad entry %x", b)
		}
		out = append(out, fmt.Sprintf("%s %d %d", b[1:1+n], binary.BigEndian.Uint32(b[1+n:]), binary.BigEndian.Uint32(b[5+n:])))
		b = b[9+n:]
	}
	return strings.Join(out, ",")
}

// ifaceString is a JSON flow's interfaces as the IPFIX list carries them:
// the ifindex as ingressInterface when the interface saw the packets come
// in, as egressInterface when it saw them go out.
func ifaceString(f agenttest.JSONFlow) string {
	var out []string
	for _, it := range f.Interfaces {
		var in, eg uint32
		if it.Direction == "ingress" || it.Direction == "both" {
			in = it.Ifindex
		}
		if it.Direction == "egress" || it.Direction == "both" {
			eg = it.Ifindex
		}
		out = append(out, fmt.Sprintf("%s %d %d", it.Name, in, eg))
	}
	return strings.Join(out, ",")
}

// ipfixCollector receives IPFIX over UDP on loopback and decodes it with
// goflow2's decoder, as a collector nobody here wrote would.
type ipfixCollector struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  []ipfixFlow
	err  error
	done chan struct{}
}

func startIPFIXCollector(t *testing.T) *ipfixCollector {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c := &ipfixCollector{conn: conn, done: make(chan struct{})}
	go c.run()
	t.Cleanup(func() { conn.Close(); <-c.done })
	return c
}

func (c *ipfixCollector) run() {
	defer close(c.done)
	ts := netflow.CreateTemplateSystem()
	buf := make([]byte, 65536)
	for {
		n, err := c.conn.Read(buf)
		if err != nil {
			return
		}
		var p netflow.IPFIXPacket
		var v9 netflow.NFv9Packet
		if err := netflow.DecodeMessageVersion(bytes.NewBuffer(bytes.Clone(buf[:n])), ts, &v9, &p); err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			continue
		}
		for _, fs := range p.FlowSets {
			ds, ok := fs.(netflow.DataFlowSet)
			if !ok {
				continue
			}
			for _, rec := range ds.Records {
				f := ipfixFlow{pen: map[uint16][]byte{}}
				for _, v := range rec.Values {
					b := v.Value.([]byte)
					var u uint64
					for _, x := range b {
						u = u<<8 | uint64(x)
					}
					if v.PenProvided {
						// flowlens' own fields: the package tests check them all, here the RTT.
						switch {
						case v.Pen != ipfixPEN:
							c.mu.Lock()
							c.err = fmt.Errorf("element %d under PEN %d, want %d", v.Type, v.Pen, ipfixPEN)
							c.mu.Unlock()
						default:
							f.pen[v.Type] = b
						}
						switch {
						case v.Pen != ipfixPEN:
						case v.Type == 1004:
							f.rtt = u
						case v.Type == 1009:
							f.rttMax = u
						}
						continue
					}
					switch v.Type {
					case 292:
						f.ifaces = ifaceList(b)
					case 8, 27:
						f.src, _ = netip.AddrFromSlice(b)
					case 12, 28:
						f.dst, _ = netip.AddrFromSlice(b)
					case 7:
						f.sport = uint16(u)
					case 11:
						f.dport = uint16(u)
					case 4:
						f.proto = uint8(u)
					case 1:
						f.octets = u
					case 2:
						f.packets = u
					case 352:
						f.l2Octets = u
					case 152:
						f.start = u
					case 153:
						f.end = u
					}
				}
				c.mu.Lock()
				c.got = append(c.got, f)
				c.mu.Unlock()
			}
		}
	}
}

// flows waits until the collector has been quiet for a moment and returns
// what it decoded.
func (c *ipfixCollector) flows(t *testing.T, want int) []ipfixFlow {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c.mu.Lock()
		n := len(c.got)
		c.mu.Unlock()
		if n >= want {
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		t.Fatalf("goflow2 could not decode a message: %v", c.err)
	}
	return append([]ipfixFlow(nil), c.got...)
}

// The agent exports to stdout and IPFIX at once, over real traffic on a veth
// pair (UDP and TCP), with 1024-byte messages and its own enterprise
// number: goflow2 decodes exactly the flows the agent evicted, with the same
// keys, packets, L2 bytes, interfaces (names, ifindexes, directions) and
// RTTs, octetDeltaCount being the bytes without the Ethernet headers, and
// the test flows' packets equal what was sent.
func TestIPFIXExportDecodedByGoflow2(t *testing.T) {
	col := startIPFIXCollector(t)
	p := agenttest.NewPair(t)
	agenttest.MustListen(t, p.B, p.IPB+":9000")
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--export=stdout,ipfix", "--cache-active-timeout=200ms",
		"--ipfix-target="+col.conn.LocalAddr().String(), "--node-name=node-test",
		"--ipfix-max-message-size=1024", fmt.Sprint("--ipfix-enterprise-number=", ipfixPEN))
	const flows, per = 40, 5
	for i := 0; i < flows; i++ {
		if err := netlab.UDPSend(p.A, fmt.Sprintf("%s:%d", p.IPA, 30000+i), p.IPB+":9000", []byte("ipfix"), per); err != nil {
			t.Fatal(err)
		}
	}
	sink := agenttest.TCPSink(t, p.B, "tcp4", p.IPB+":9001")
	agenttest.TCPSend(t, p.A, "tcp4", p.IPB+":9001", 200_000)
	agenttest.AwaitReceived(t, sink, 200_000)
	time.Sleep(300 * time.Millisecond) // at least one timer eviction
	local := h.Stop()
	got := col.flows(t, len(local))
	if len(got) != len(local) {
		t.Fatalf("goflow2 decoded %d flows, the agent exported %d to stdout", len(got), len(local))
	}
	t.Logf("%d flows decoded by goflow2", len(got))
	type key struct {
		src, dst     string
		sport, dport uint16
		proto        uint8
		packets      uint64
		bytes        uint64
		ifaces       string
		rtt, rttMax  uint64
	}
	want := map[key]int{}
	rtts := 0
	for _, f := range local {
		want[key{f.SrcAddr, f.DstAddr, f.SrcPort, f.DstPort, f.Proto, f.Packets, f.Bytes, ifaceString(f), f.RTTNs, f.RTTMaxNs}]++
		if f.RTTNs != 0 {
			rtts++
		}
	}
	if rtts == 0 {
		t.Error("no flow with an RTT: the enterprise elements were not checked")
	}
	for _, f := range got {
		k := key{f.src.String(), f.dst.String(), f.sport, f.dport, f.proto, f.packets, f.l2Octets, f.ifaces, f.rtt, f.rttMax}
		if want[k] == 0 {
			t.Errorf("IPFIX flow %+v not among the agent's", f)
			continue
		}
		want[k]--
		if f.octets != f.l2Octets-14*f.packets {
			t.Errorf("%+v: octetDeltaCount %d, want %d", k, f.octets, f.l2Octets-14*f.packets)
		}
		if f.start == 0 || f.end < f.start {
			t.Errorf("%+v: start %d end %d ms", k, f.start, f.end)
		}
	}
	var udp, tcp uint64
	for _, f := range got {
		if f.src.String() == p.IPA && f.dport == 9000 && f.proto == 17 {
			udp += f.packets
		}
		if f.proto == 6 && (f.dport == 9001 || f.sport == 9001) {
			tcp += f.packets
		}
	}
	if udp != flows*per {
		t.Errorf("IPFIX has %d packets of the UDP test flows, want %d sent", udp, flows*per)
	}
	lp, _, _ := agenttest.Sum(local, agenttest.Match{Proto: 6, Dport: 9001})
	lq, _, _ := agenttest.Sum(local, agenttest.Match{Proto: 6, Sport: 9001})
	if tcp == 0 || tcp != lp+lq {
		t.Errorf("IPFIX has %d TCP packets, the agent counted %d", tcp, lp+lq)
	}
}

// DNS and TLS the agent saw on real traffic (features dns and tls: a DNS
// query answered by a responder in the other namespace, a TLS 1.3 handshake
// between openssl's s_client and s_server) reach the IPFIX collector in the
// DNS and TLS groups: for every flow the agent evicted with those fields,
// goflow2 decodes the same values under the enterprise number.
func TestIPFIXDNSAndTLSDecodedByGoflow2(t *testing.T) {
	dir := t.TempDir()
	keyPEM, cert := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem")
	if out, err := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
		"-nodes", "-keyout", keyPEM, "-out", cert, "-subj", "/CN=flowlens-test", "-days", "1").CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v\n%s", err, out)
	}
	col := startIPFIXCollector(t)
	p := agenttest.NewPair(t)
	netlab.SlowDNS(t, p.B, p.IPB+":53", 20*time.Millisecond) // answers NOERROR after 20 ms
	var srv *exec.Cmd
	if err := p.B.Do(func() error {
		srv = exec.Command("openssl", "s_server", "-accept", p.IPB+":4433", "-cert", cert, "-key", keyPEM, "-naccept", "1", "-quiet")
		return srv.Start()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	h := agenttest.Start(t, 2, agent.Options{}, p.NetnsArg(), "--export=stdout,ipfix", "--features=dns,tls",
		"--cache-active-timeout=200ms", "--ipfix-target="+col.conn.LocalAddr().String(),
		fmt.Sprint("--ipfix-enterprise-number=", ipfixPEN))

	if rc, err := netlab.AskDNS(p.A, p.IPA+":40053", p.IPB+":53", netlab.DNSQuery(0x5151, "ipfix.example"), time.Second); err != nil || rc != 0 {
		t.Fatalf("DNS query: rcode %d, %v", rc, err)
	}
	var out []byte
	var err error
	for range 50 { // until the server listens
		out, err = netlab.RunIn(p.A, "openssl", "s_client", "-connect", p.IPB+":4433", "-tls1_3", "-groups", "X25519")
		if err == nil && strings.Contains(string(out), "TLSv1.3") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(string(out), "TLSv1.3") {
		t.Fatalf("s_client: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond) // at least one timer eviction
	local := h.Stop()
	got := col.flows(t, len(local))
	if len(got) != len(local) {
		t.Fatalf("goflow2 decoded %d flows, the agent exported %d to stdout", len(got), len(local))
	}

	type key struct {
		src, dst     string
		sport, dport uint16
		proto        uint8
		packets      uint64
		bytes        uint64
	}
	byKey := map[key][]ipfixFlow{}
	for _, f := range got {
		k := key{f.src.String(), f.dst.String(), f.sport, f.dport, f.proto, f.packets, f.l2Octets}
		byKey[k] = append(byKey[k], f)
	}
	u := func(b []byte) uint64 {
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		return v
	}
	boolean := func(b []byte) bool { return len(b) == 1 && b[0] == 1 }
	tlsName := func(b []byte, name func(uint16) (string, bool)) string {
		v := uint16(u(b))
		if v == 0 {
			return ""
		}
		if n, ok := name(v); ok {
			return n
		}
		return fmt.Sprintf("0x%04x", v)
	}
	dns, tls := 0, 0
	for _, l := range local {
		fs := byKey[key{l.SrcAddr, l.DstAddr, l.SrcPort, l.DstPort, l.Proto, l.Packets, l.Bytes}]
		if len(fs) == 0 {
			t.Errorf("flow %s:%d -> %s:%d not decoded by goflow2", l.SrcAddr, l.SrcPort, l.DstAddr, l.DstPort)
			continue
		}
		f := fs[0]
		if l.DNSID != 0 || l.DNSName != "" {
			dns++
			rcode := ""
			if uint16(u(f.pen[1021]))&flow.DNSFlagQR != 0 || u(f.pen[1025]) > 0 {
				rcode = flow.DNSRcodeName(uint8(u(f.pen[1022])))
			}
			g := fmt.Sprintln(u(f.pen[1020]), u(f.pen[1021]), rcode, string(f.pen[1023]), u(f.pen[1025]), boolean(f.pen[1027]))
			w := fmt.Sprintln(l.DNSID, l.DNSFlags, l.DNSRcode, l.DNSName, l.DNSLatencyNs, l.DNSTimeout)
			if g != w {
				t.Errorf("%s:%d -> %s:%d DNS: IPFIX %q, agent %q", l.SrcAddr, l.SrcPort, l.DstAddr, l.DstPort, g, w)
			}
		} else if _, ok := f.pen[1020]; ok {
			t.Errorf("%s:%d -> %s:%d: DNS group without DNS fields", l.SrcAddr, l.SrcPort, l.DstAddr, l.DstPort)
		}
		if l.TLSVersion != "" || l.TLSCipherSuite != "" || l.TLSClientHello || l.QUIC {
			tls++
			g := fmt.Sprintln(tlsName(f.pen[1030], flow.TLSVersionName), tlsName(f.pen[1031], flow.TLSCipherSuiteName),
				tlsName(f.pen[1032], flow.TLSGroupName), boolean(f.pen[1033]), boolean(f.pen[1034]))
			w := fmt.Sprintln(l.TLSVersion, l.TLSCipherSuite, l.TLSGroup, l.TLSClientHello, l.QUIC)
			if g != w {
				t.Errorf("%s:%d -> %s:%d TLS: IPFIX %q, agent %q", l.SrcAddr, l.SrcPort, l.DstAddr, l.DstPort, g, w)
			}
		} else if _, ok := f.pen[1030]; ok {
			t.Errorf("%s:%d -> %s:%d: TLS group without TLS fields", l.SrcAddr, l.SrcPort, l.DstAddr, l.DstPort)
		}
	}
	if dns == 0 || tls < 2 {
		t.Errorf("%d flows with DNS, %d with TLS: want the query's and both sides of the handshake", dns, tls)
	}
	t.Logf("%d flows, %d with DNS, %d with TLS, decoded by goflow2", len(got), dns, tls)
}
