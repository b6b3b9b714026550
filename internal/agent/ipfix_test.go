package agent_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsampler/goflow2/v2/decoders/netflow"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testnet"
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
func ifaceString(f jsonFlow) string {
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
				var f ipfixFlow
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
	p := newPair(t)
	mustListen(t, p.B, p.ipB+":9000")
	h := startAgent(t, 2, agent.Options{}, p.netnsArg(), "--export=stdout,ipfix", "--cache-active-timeout=200ms",
		"--ipfix-target="+col.conn.LocalAddr().String(), "--node-name=node-test",
		"--ipfix-max-message-size=1024", fmt.Sprint("--ipfix-enterprise-number=", ipfixPEN))
	const flows, per = 40, 5
	for i := 0; i < flows; i++ {
		if err := testnet.UDPSend(p.A, fmt.Sprintf("%s:%d", p.ipA, 30000+i), p.ipB+":9000", []byte("ipfix"), per); err != nil {
			t.Fatal(err)
		}
	}
	sink := tcpSink(t, p.B, "tcp4", p.ipB+":9001")
	tcpSend(t, p.A, "tcp4", p.ipB+":9001", 200_000)
	awaitReceived(t, sink, 200_000)
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
		if f.src.String() == p.ipA && f.dport == 9000 && f.proto == 17 {
			udp += f.packets
		}
		if f.proto == 6 && (f.dport == 9001 || f.sport == 9001) {
			tcp += f.packets
		}
	}
	if udp != flows*per {
		t.Errorf("IPFIX has %d packets of the UDP test flows, want %d sent", udp, flows*per)
	}
	lp, _, _ := sum(local, match{proto: 6, dport: 9001})
	lq, _, _ := sum(local, match{proto: 6, sport: 9001})
	if tcp == 0 || tcp != lp+lq {
		t.Errorf("IPFIX has %d TCP packets, the agent counted %d", tcp, lp+lq)
	}
}
