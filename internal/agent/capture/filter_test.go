package capture_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/capture"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// The kernel's filter, case by case through BPF_PROG_TEST_RUN: each packet
// runs once through a program instance loaded with the filter; a match is
// counted and copied (its metadata and first bytes read back from the
// ring), a miss neither. The program always returns TC_ACT_UNSPEC.

func udp4Frame(src, dst string, sport, dport uint16, n int) []byte {
	return packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, src, dst, packet.UDPLen+n),
		packet.UDP(sport, dport, n)) // UDP carries its n zero bytes
}

func udp6Frame(src, dst string, sport, dport uint16, n int) []byte {
	return packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(packet.ProtoUDP, src, dst, packet.UDPLen+n),
		packet.UDP(sport, dport, n)) // UDP carries its n zero bytes
}

func tcp4Frame(sport, dport uint16, flags uint8) []byte {
	return packet.Pad(packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoTCP, "10.0.0.1", "10.0.0.2", packet.TCPLen),
		packet.TCP(sport, dport, flags)))
}

func TestFilterInKernel(t *testing.T) {
	testkit.NeedRoot(t, "BPF_PROG_TEST_RUN")
	pfx := func(s ...string) (out []netip.Prefix) {
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	u4 := udp4Frame("10.0.0.1", "10.0.0.2", 5000, 7001, 100)
	u6 := udp6Frame("fd00::1", "fd00::2", 5000, 7001, 100)
	arp := packet.Pad(packet.Cat(packet.Eth(0x0806), make([]byte, 28)))
	syn, ack := tcp4Frame(40000, 443, packet.SYN), tcp4Frame(40000, 443, packet.ACK)
	synack := tcp4Frame(443, 40000, packet.SYN|packet.ACK)
	frag := packet.Cat(packet.Eth(packet.EtherTypeIPv4), packet.IPv4(packet.ProtoUDP, "10.0.0.1", "10.0.0.2", 100, packet.Frag(0, 64)),
		packet.Payload(100))
	v6ext := packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(0, "fd00::1", "fd00::2", 8+packet.UDPLen+10),
		packet.Options(packet.ProtoUDP, 0), packet.UDP(5000, 7001, 10))
	// The UDP header 566 bytes in: read with bpf_skb_load_bytes, not
	// straight from the packet (bpf/capture.c, load).
	v6far := packet.Cat(packet.Eth(packet.EtherTypeIPv6), packet.IPv6(0, "fd00::1", "fd00::2", 512+packet.UDPLen+10),
		packet.Options(packet.ProtoUDP, 63), packet.UDP(5000, 7001, 10))
	for _, c := range []struct {
		name string
		f    capture.Filter
		pkt  []byte
		want bool
	}{
		{"zero filter, ARP", capture.Filter{}, arp, true},
		{"a CIDR, ARP", capture.Filter{CIDRs: pfx("0.0.0.0/0")}, arp, false},
		{"any CIDR, source", capture.Filter{CIDRs: pfx("10.0.0.1/32")}, u4, true},
		{"any CIDR, destination", capture.Filter{CIDRs: pfx("10.0.0.2/32")}, u4, true},
		{"any CIDR, neither", capture.Filter{CIDRs: pfx("10.0.1.0/24", "fd00::/8")}, u4, false},
		{"source CIDR", capture.Filter{SrcCIDRs: pfx("10.0.0.0/31")}, u4, true},
		{"source CIDR is not destination", capture.Filter{SrcCIDRs: pfx("10.0.0.2/32")}, u4, false},
		{"destination CIDR", capture.Filter{DstCIDRs: pfx("192.168.0.0/16", "10.0.0.2/32")}, u4, true},
		{"IPv4 prefix, IPv6 packet", capture.Filter{CIDRs: pfx("0.0.0.0/0")}, u6, false},
		{"IPv6 prefix", capture.Filter{SrcCIDRs: pfx("fd00::/64")}, u6, true},
		{"IPv6 prefix, other", capture.Filter{DstCIDRs: pfx("fd00::1/128")}, u6, false},
		// A pair (PeerCIDRs with CIDRs): one end in each, either way.
		{"pair, forward", capture.Filter{CIDRs: pfx("10.0.0.1/32"), PeerCIDRs: pfx("10.0.0.2/32")}, u4, true},
		{"pair, reverse", capture.Filter{CIDRs: pfx("10.0.0.2/32"), PeerCIDRs: pfx("10.0.0.0/31")}, u4, true},
		{"pair, a third address", capture.Filter{CIDRs: pfx("10.0.0.1/32"), PeerCIDRs: pfx("10.0.0.3/32")},
			udp4Frame("10.0.0.1", "10.0.0.2", 5000, 7001, 100), false},
		{"pair, the third address to the peer", capture.Filter{CIDRs: pfx("10.0.0.1/32"), PeerCIDRs: pfx("10.0.0.2/32")},
			udp4Frame("10.0.0.3", "10.0.0.2", 5000, 7001, 100), false},
		{"pair, both ends in CIDRs only", capture.Filter{CIDRs: pfx("10.0.0.0/24"), PeerCIDRs: pfx("10.9.0.0/16")}, u4, false},
		{"pair, one of several peers", capture.Filter{CIDRs: pfx("192.168.0.0/16", "10.0.0.1/32"), PeerCIDRs: pfx("fd00::/8", "10.0.0.2/32")}, u4, true},
		{"pair and ports", capture.Filter{CIDRs: pfx("10.0.0.2/32"), PeerCIDRs: pfx("10.0.0.1/32"), SrcPorts: []uint16{5001}}, u4, false},
		{"peer alone is either end", capture.Filter{PeerCIDRs: pfx("10.0.0.2/32")}, u4, true},
		{"peer alone, neither end", capture.Filter{PeerCIDRs: pfx("10.0.0.3/32")}, u4, false},
		{"IPv6 pair, forward", capture.Filter{CIDRs: pfx("fd00::1/128"), PeerCIDRs: pfx("fd00::2/128")}, u6, true},
		{"IPv6 pair, reverse", capture.Filter{CIDRs: pfx("fd00::2/128"), PeerCIDRs: pfx("fd00::1/128")}, u6, true},
		{"IPv6 pair, a third address", capture.Filter{CIDRs: pfx("fd00::1/128"), PeerCIDRs: pfx("fd00::3/128")}, u6, false},
		{"IPv6 pair, an IPv4 peer", capture.Filter{CIDRs: pfx("fd00::1/128"), PeerCIDRs: pfx("0.0.0.0/0")}, u6, false},
		{"IPv6 after an extension header", capture.Filter{DstPorts: []uint16{7001}}, v6ext, true},
		{"IPv6, ports past the straight read", capture.Filter{DstPorts: []uint16{7001}}, v6far, true},
		{"IPv6, ports past the straight read, other", capture.Filter{DstPorts: []uint16{7002}}, v6far, false},
		{"any port", capture.Filter{Ports: []uint16{1, 5000}}, u4, true},
		{"source port", capture.Filter{SrcPorts: []uint16{7001}}, u4, false},
		{"destination port", capture.Filter{DstPorts: []uint16{7001}}, u6, true},
		{"protocol", capture.Filter{Protocols: []uint8{6, 17}}, u4, true},
		{"protocol, other", capture.Filter{Protocols: []uint8{6}}, u4, false},
		{"a later fragment has no ports", capture.Filter{DstPorts: []uint16{7001}}, frag, false},
		{"a later fragment, protocol", capture.Filter{Protocols: []uint8{17}}, frag, true},
		{"SYN mask, SYN", capture.Filter{TCPFlags: []uint16{0x02}}, syn, true},
		{"SYN mask, SYN-ACK", capture.Filter{TCPFlags: []uint16{0x02}}, synack, true},
		{"SYN|ACK mask, SYN", capture.Filter{TCPFlags: []uint16{0x12}}, syn, false},
		{"SYN or ACK masks, ACK", capture.Filter{TCPFlags: []uint16{0x02, 0x10}}, ack, true},
		{"flags, UDP", capture.Filter{TCPFlags: []uint16{0x02}}, u4, false},
		{"all fields", capture.Filter{CIDRs: pfx("10.0.0.0/8"), SrcPorts: []uint16{40000}, DstPorts: []uint16{443},
			Protocols: []uint8{6}, TCPFlags: []uint16{0x02}}, syn, true},
		{"all fields but one", capture.Filter{CIDRs: pfx("10.0.0.0/8"), SrcPorts: []uint16{40000}, DstPorts: []uint16{443},
			Protocols: []uint8{6}, TCPFlags: []uint16{0x02}}, ack, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			const snaplen = 64
			in, err := capture.LoadInstance(c.f, snaplen, 4096)
			testkit.Need(t, "the capture program", err)
			defer in.Close()
			ret, err := in.Prog.Run(&ebpf.RunOptions{Data: c.pkt})
			if err != nil {
				t.Fatal(err)
			}
			if int32(ret) != -1 {
				t.Errorf("returned %d, want TC_ACT_UNSPEC (-1)", int32(ret))
			}
			matched, full, err := in.Counts()
			if err != nil {
				t.Fatal(err)
			}
			if (matched == 1) != c.want || full != 0 || matched > 1 {
				t.Fatalf("matched %d, ring full %d; want match %v", matched, full, c.want)
			}
			in.Ring.SetDeadline(time.Now().Add(100 * time.Millisecond))
			rec, err := in.Ring.Read()
			if !c.want {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("a miss copied something: %v %v", rec, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			raw := rec.RawSample
			wire, capLen := binary.NativeEndian.Uint32(raw[20:]), binary.NativeEndian.Uint32(raw[24:])
			want := min(len(c.pkt), snaplen)
			if int(wire) != len(c.pkt) || int(capLen) != want || string(raw[capture.MetaSize:capture.MetaSize+want]) != string(c.pkt[:want]) {
				t.Errorf("copied %d of %d bytes (%d in the sample), want the frame's first %d of %d", capLen, wire,
					len(raw)-capture.MetaSize, want, len(c.pkt))
			}
		})
	}
}
