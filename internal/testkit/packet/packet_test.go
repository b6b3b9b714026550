package packet_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"testing"

	. "github.com/flowlens/flowlens/internal/testkit/packet"
)

// The builders this package replaced, copied verbatim: every frame the
// ported tests build must come out byte for byte as it did.

var (
	macA = []byte{0x02, 0, 0, 0, 0, 0xa}
	macB = []byte{0x02, 0, 0, 0, 0, 0xb}
)

func oldEth(ethType uint16, vlans ...uint16) []byte {
	b := append(append([]byte{}, macB...), macA...)
	for _, tpid := range vlans {
		b = binary.BigEndian.AppendUint16(b, tpid)
		b = binary.BigEndian.AppendUint16(b, 42)
	}
	return binary.BigEndian.AppendUint16(b, ethType)
}

func oldIPv4(proto uint8, src, dst string, tos uint8, fragOff uint16, payloadLen int) []byte {
	b := make([]byte, 20)
	b[0] = 0x45
	b[1] = tos
	binary.BigEndian.PutUint16(b[2:], uint16(20+payloadLen))
	binary.BigEndian.PutUint16(b[6:], fragOff)
	b[8] = 64
	b[9] = proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	return b
}

func oldIPv6(next uint8, src, dst string, payloadLen int) []byte {
	b := make([]byte, 40)
	b[0] = 0x60 | 0x0b
	b[1] = 0x80
	binary.BigEndian.PutUint16(b[4:], uint16(payloadLen))
	b[6] = next
	b[7] = 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return b
}

func oldUDP(sport, dport uint16, payload int) []byte {
	b := make([]byte, 8+payload)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+payload))
	return b
}

func oldTCP(sport, dport uint16, flags uint8, doff uint8) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = doff << 4
	b[13] = flags
	return b
}

// internal/agent/metrics' udpPacket.
func oldMetricsUDP(sport uint16) []byte {
	b := make([]byte, 14+20+8)
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 0xb})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 0xa})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 28)
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:16], []byte{10, 0, 0, 1})
	copy(ip[16:20], []byte{10, 0, 0, 2})
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], 53)
	binary.BigEndian.PutUint16(udp[4:], 8)
	return b
}

// internal/agent/exporter/grpc's udp4.
func oldGRPCUDP4(sport uint16, payload int) []byte {
	b := make([]byte, 14+20+8+payload)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(28+payload))
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:16], []byte{10, 9, 0, 1})
	copy(ip[16:20], []byte{10, 9, 0, 2})
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], 5353)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+payload))
	return b
}

// hack/bench/bpf's packet.
func oldBench(fam string) []byte {
	b := []byte{0x02, 0, 0, 0, 0, 0xb, 0x02, 0, 0, 0, 0, 0xa}
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 80)
	tcp[12] = 5 << 4
	tcp[13] = 0x10
	payload := make([]byte, 32)
	if fam == "ipv6" {
		b = binary.BigEndian.AppendUint16(b, 0x86dd)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)+len(payload)))
		ip[6] = 6
		ip[7] = 64
		ip[8], ip[9] = 0xfd, 0x00
		ip[24], ip[25], ip[39] = 0xfd, 0x00, 1
		b = append(b, ip...)
	} else {
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(tcp)+len(payload)))
		ip[8] = 64
		ip[9] = 6
		binary.BigEndian.PutUint32(ip[12:], 0x0a000000)
		binary.BigEndian.PutUint32(ip[16:], 0x0a640001)
		b = append(b, ip...)
	}
	return append(append(b, tcp...), payload...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

const v4a, v4b, v6a, v6b = "10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"

// Every frame the ported callers build, new builder beside old.
func TestSameBytesAsTheBuildersItReplaced(t *testing.T) {
	tc := TOS(0xb8)
	for _, c := range []struct {
		name     string
		got, old []byte
	}{
		{"ipv4 udp dscp", Cat(Eth(EtherTypeIPv4), IPv4(ProtoUDP, v4a, v4b, 8+100, TOS(0xb8)), UDP(1234, 53, 100)),
			cat(oldEth(0x0800), oldIPv4(17, v4a, v4b, 0xb8, 0, 8+100), oldUDP(1234, 53, 100))},
		{"802.1Q tcp", Cat(Eth(EtherTypeIPv4, Dot1Q(42)), IPv4(ProtoTCP, v4a, v4b, 20), TCP(80, 40000, SYN|ACK)),
			cat(oldEth(0x0800, 0x8100), oldIPv4(6, v4a, v4b, 0, 0, 20), oldTCP(80, 40000, 0x12, 5))},
		{"QinQ tcp", Cat(Eth(EtherTypeIPv4, QinQ(42, 42)), IPv4(ProtoTCP, v4a, v4b, 20), TCP(80, 40000, RST|ACK)),
			cat(oldEth(0x0800, 0x88a8, 0x8100), oldIPv4(6, v4a, v4b, 0, 0, 20), oldTCP(80, 40000, 0x14, 5))},
		{"three tags", Eth(EtherTypeIPv4, Dot1Q(42), Dot1Q(42), Dot1Q(42)), oldEth(0x0800, 0x8100, 0x8100, 0x8100)},
		{"icmp echo", Cat(Eth(EtherTypeIPv4), IPv4(ProtoICMP, v4a, v4b, 8), ICMP(ICMPEchoRequest, 0, 1, 1)),
			cat(oldEth(0x0800), oldIPv4(1, v4a, v4b, 0, 0, 8), []byte{8, 0, 0, 0, 0, 1, 0, 1})},
		{"ipv4 fragment", IPv4(ProtoUDP, v4a, v4b, 8, Frag(0, 185)), oldIPv4(17, v4a, v4b, 0, 185, 8)},
		{"gre", Cat(IPv4(ProtoGRE, v4a, v4b, 4), GRE(EtherTypeIPv4)), cat(oldIPv4(47, v4a, v4b, 0, 0, 4), []byte{0, 0, 8, 0})},
		{"ipv6 udp", Cat(Eth(EtherTypeIPv6), IPv6(ProtoUDP, v6a, v6b, 8, tc), UDP(5000, 6000, 0)),
			cat(oldEth(0x86dd), oldIPv6(17, v6a, v6b, 8), oldUDP(5000, 6000, 0))},
		{"ipv6 extension headers", Cat(IPv6(ProtoHopByHop, v6a, v6b, 52, tc), Options(ProtoDstOpts, 0), Options(ProtoFragment, 1), Fragment6(ProtoTCP, 0, true, 7), TCP(443, 50000, ACK)),
			cat(oldIPv6(0, v6a, v6b, 52), []byte{60, 0, 1, 4, 0, 0, 0, 0}, []byte{44, 1, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{6, 0, 0, 1, 0, 0, 0, 7}, oldTCP(443, 50000, 0x10, 5))},
		{"ipv6 non-first fragment", Fragment6(ProtoUDP, 32, false, 7), []byte{17, 0, 0x01, 0x00, 0, 0, 0, 7}},
		{"icmpv6 echo", ICMPv6(ICMPv6EchoRequest, 0, 1, 1), []byte{128, 0, 0, 0, 0, 1, 0, 1}},
		{"bare dstopts", ExtHeader(ProtoDstOpts, 0), []byte{60, 0, 0, 0, 0, 0, 0, 0}},
		{"ext header past the end", ExtHeader(ProtoUDP, 9)[:8], []byte{17, 9, 0, 0, 0, 0, 0, 0}},
		{"tcp doff 3", TCP(1, 2, SYN, DataOffset(3)), oldTCP(1, 2, 2, 3)},
		{"truncated vlan tag", Pad(Eth(EtherTypeIPv4, Dot1Q(1))[:16]), cat(macB, macA, []byte{0x81, 0x00, 0, 1})},
		{"metrics udpPacket", Cat(Eth(EtherTypeIPv4), IPv4(ProtoUDP, v4a, v4b, UDPLen), UDP(1000, 53, 0)), oldMetricsUDP(1000)},
		{"grpc udp4", Cat(Eth(EtherTypeIPv4, MACs(MAC{}, MAC{})), IPv4(ProtoUDP, "10.9.0.1", "10.9.0.2", UDPLen+17), UDP(1017, 5353, 17)), oldGRPCUDP4(1017, 17)},
		{"bench ipv4", Cat(Eth(EtherTypeIPv4), IPv4(ProtoTCP, "10.0.0.0", "10.100.0.1", TCPLen+32), TCP(40000, 80, ACK), Payload(32)), oldBench("ipv4")},
		{"bench ipv6", Cat(Eth(EtherTypeIPv6), IPv6(ProtoTCP, "fd00::", "fd00::1", TCPLen+32), TCP(40000, 80, ACK), Payload(32)), oldBench("ipv6")},
	} {
		if !bytes.Equal(c.got, c.old) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, hex.EncodeToString(c.got), hex.EncodeToString(c.old))
		}
	}
}

func TestEthernet(t *testing.T) {
	b := Eth(EtherTypeIPv6, QinQ(100, 200))
	if len(b) != EthLen+2*TagLen {
		t.Fatalf("length %d", len(b))
	}
	want := "02000000000b" + "02000000000a" + "88a80064" + "810000c8" + "86dd"
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	b = Eth(EtherTypeARP, MACs(MAC{1, 2, 3, 4, 5, 6}, MAC{7, 8, 9, 10, 11, 12}), Tag(0x9100, 0xe00a))
	if got, want := hex.EncodeToString(b), "010203040506"+"0708090a0b0c"+"9100e00a"+"0806"; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func TestIPv4(t *testing.T) {
	b := IPv4(ProtoTCP, "192.0.2.1", "198.51.100.2", 100, TOS(0x2e<<2), TTL(3), ID(0xbeef), Frag(DF|MF, 0x1abc), Checksum())
	if len(b) != IPv4Len {
		t.Fatalf("length %d", len(b))
	}
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"version/ihl", uint64(b[0]), 0x45},
		{"tos", uint64(b[1]), 0xb8},
		{"total length", uint64(binary.BigEndian.Uint16(b[2:])), 120},
		{"id", uint64(binary.BigEndian.Uint16(b[4:])), 0xbeef},
		{"flags", uint64(b[6] >> 5), 3},
		{"fragment offset", uint64(binary.BigEndian.Uint16(b[6:]) & 0x1fff), 0x1abc},
		{"ttl", uint64(b[8]), 3},
		{"protocol", uint64(b[9]), 6},
		{"src", uint64(binary.BigEndian.Uint32(b[12:])), 0xc0000201},
		{"dst", uint64(binary.BigEndian.Uint32(b[16:])), 0xc6336402},
		{"checksum verifies", uint64(Sum(b)), 0},
	} {
		if f.got != f.want {
			t.Errorf("%s = %#x, want %#x", f.name, f.got, f.want)
		}
	}
	// RFC 1071's classic example header (Wikipedia's "IPv4 header
	// checksum"): checksum 0xb861.
	h, _ := hex.DecodeString("450000730000400040110000c0a80001c0a800c7")
	if s := Sum(h); s != 0xb861 {
		t.Errorf("checksum %#x, want 0xb861", s)
	}
	if got := IPv4(ProtoUDP, "", "", 0); binary.BigEndian.Uint16(got[10:]) != 0 || binary.BigEndian.Uint64(got[12:]) != 0 {
		t.Errorf("default header: %x", got)
	}
}

func TestIPv6(t *testing.T) {
	b := IPv6(ProtoUDP, "2001:db8::1", "2001:db8::2", 8, TOS(0xb8), FlowLabel(0xabcde), TTL(1))
	if len(b) != IPv6Len {
		t.Fatalf("length %d", len(b))
	}
	if got, want := hex.EncodeToString(b[:8]), "6b8abcde"+"0008"+"11"+"01"; got != want {
		t.Errorf("first 8 bytes %s, want %s", got, want)
	}
	if netip.AddrFrom16([16]byte(b[8:24])) != netip.MustParseAddr("2001:db8::1") ||
		netip.AddrFrom16([16]byte(b[24:40])) != netip.MustParseAddr("2001:db8::2") {
		t.Errorf("addresses %x", b[8:])
	}
	if o := Options(ProtoTCP, 2); len(o) != 24 || o[0] != 6 || o[1] != 2 || o[2] != 1 || o[3] != 4 {
		t.Errorf("options header %x", o)
	}
}

func TestTransport(t *testing.T) {
	u := UDP(1, 2, 5)
	if len(u) != UDPLen+5 || binary.BigEndian.Uint16(u[4:]) != 13 {
		t.Errorf("udp %x", u)
	}
	tc := TCP(443, 1024, SYN|ECE|CWR, Seq(1), AckNum(2), Window(3))
	if got, want := hex.EncodeToString(tc), "01bb0400"+"00000001"+"00000002"+"50c2"+"0003"+"00000000"; got != want {
		t.Errorf("tcp %s, want %s", got, want)
	}
	if f := Cat(Eth(EtherTypeIPv4), IPv4(ProtoUDP, v4a, v4b, 8), UDP(1, 2, 0)); len(f) != 42 || len(PadTo(f, MinEthLen)) != 60 {
		t.Errorf("frame lengths %d, padded %d", len(f), len(PadTo(f, MinEthLen)))
	}
	if p := Pad([]byte{1}); len(p) != MinTestRunLen || p[0] != 1 {
		t.Errorf("pad %x", p)
	}
}
