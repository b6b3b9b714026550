package flowpb_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// randRecords returns n records in which every field is, at random, zero,
// its largest value or anything in between; addresses are absent, IPv4,
// IPv6 or IPv4-mapped IPv6; times are zero, the Unix epoch, before 1970 or
// later; strings are empty, ASCII, non-ASCII or long enough for multi-byte
// lengths (once in a while a flow over 16 KiB).
func randRecords(rng *rand.Rand, n int) []flow.Record {
	u := func(max uint64) uint64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return max
		case 2:
			return 1 + rng.Uint64N(200) // one-byte varints and the 127/128 border
		}
		if max == math.MaxUint64 {
			return rng.Uint64()
		}
		return rng.Uint64N(max + 1)
	}
	addr := func() netip.Addr {
		var b [16]byte
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		switch rng.IntN(5) {
		case 0:
			return netip.Addr{}
		case 1, 2:
			return netip.AddrFrom4([4]byte(b[:4]))
		case 3:
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
	}
	words := []string{"eth0", "veth1a2b3c", "host", "pod-ä", "命名空间", "🙂", "cni-0f3a", "x"}
	str := func() string {
		switch rng.IntN(6) {
		case 0, 1:
			return ""
		case 2:
			return strings.Repeat(words[rng.IntN(len(words))], 1+rng.IntN(60)) // > 127 bytes often
		case 3:
			if rng.IntN(20) == 0 {
				return strings.Repeat("n", 16<<10) // the flow's length needs 3 bytes
			}
		}
		return words[rng.IntN(len(words))]
	}
	tm := func() time.Time {
		switch rng.IntN(6) {
		case 0:
			return time.Time{}
		case 1:
			return time.Unix(0, 0) // an empty Timestamp message
		case 2:
			return time.Unix(-rng.Int64N(1<<40), rng.Int64N(1e9)) // before 1970
		case 3:
			return time.Unix(rng.Int64N(1<<36), 0).Local()
		}
		return time.Unix(1_700_000_000+rng.Int64N(1e8), rng.Int64N(1e9))
	}
	out := make([]flow.Record, n)
	for i := range out {
		r := &out[i]
		r.SrcAddr, r.DstAddr = addr(), addr()
		r.SrcPort, r.DstPort = uint16(u(0xffff)), uint16(u(0xffff))
		r.Proto, r.IcmpType, r.IcmpCode = uint8(u(0xff)), uint8(u(0xff)), uint8(u(0xff))
		r.Bytes, r.Packets = u(math.MaxUint64), u(math.MaxUint64)
		r.TCPFlags, r.EthType, r.DSCP = uint16(u(0xffff)), uint16(u(0xffff)), uint8(u(63))
		if rng.IntN(3) > 0 {
			for j := range r.SrcMAC {
				r.SrcMAC[j], r.DstMAC[j] = byte(rng.Uint32()), byte(rng.Uint32())
			}
		}
		r.StartTime, r.EndTime = tm(), tm()
		for range rng.IntN(7) {
			r.Interfaces = append(r.Interfaces, flow.Interface{Name: str(), Ifindex: uint32(u(math.MaxUint32)),
				Netns: str(), NetnsID: u(math.MaxUint64), Direction: flow.Direction(rng.IntN(4))})
		}
		r.IfacesOverflow = rng.IntN(2) == 0
		r.FragUnmatched, r.L4Unread, r.ExtUnread = rng.IntN(2) == 0, rng.IntN(2) == 0, rng.IntN(2) == 0
		r.Sampling = uint32(u(math.MaxUint32))
		r.Partial = rng.IntN(2) == 0
		r.SrcDNSName, r.DstDNSName = str(), str()
		r.DropPackets, r.DropBytes = u(math.MaxUint64), u(math.MaxUint64)
		r.DropCause, r.DropTCPState = str(), str()
		r.DropTCPFlags = uint16(u(0xffff))
		r.RTT, r.RTTMax = time.Duration(u(math.MaxUint64)), time.Duration(u(math.MaxUint64)) // negative too
		r.Retransmits = u(math.MaxUint64)
		if rng.IntN(2) == 0 {
			r.Tunnel = flow.Tunnel{TunnelType: flow.TunnelType(1 + rng.IntN(3)), TunnelSrcAddr: addr(), TunnelDstAddr: addr(),
				TunnelVNI: uint32(u(0xffffff)), OverlayOuter: rng.IntN(2) == 0}
		}
		if rng.IntN(2) == 0 { // translated (feature xlat), or one side only
			r.XlatSrcAddr, r.XlatDstAddr = addr(), addr()
			r.XlatSrcPort, r.XlatDstPort = uint16(u(0xffff)), uint16(u(0xffff))
			r.XlatZoneID = uint16(u(0xffff))
		}
		if rng.IntN(2) == 0 { // a handshake or QUIC seen (feature tls), in any combination
			r.TLSVersion, r.TLSCipherSuite, r.TLSGroup = uint16(u(0xffff)), uint16(u(0xffff)), uint16(u(0xffff))
			r.TLSClientHello, r.QUIC = rng.IntN(2) == 0, rng.IntN(2) == 0
		}
		if rng.IntN(2) == 0 { // a DNS message seen (feature dns), any values
			r.DNSID, r.DNSFlags, r.DNSRcode = uint16(u(0xffff)), uint16(u(0xffff)), uint8(u(0xff))
			r.DNSName, r.DNSNameTruncated = str(), rng.IntN(2) == 0
			r.DNSLatency, r.DNSLatencyMax = time.Duration(u(math.MaxUint64)), time.Duration(u(math.MaxUint64))
			r.DNSTimeout = rng.IntN(2) == 0
		}
	}
	return out
}

func randIdentity(rng *rand.Rand) flowpb.Identity {
	var id flowpb.Identity
	switch rng.IntN(3) {
	case 1:
		id = flowpb.Identity{NodeName: "node-1", AgentIP: netip.MustParseAddr("192.0.2.7")}
	case 2:
		id = flowpb.Identity{NodeName: "nœud-日本-" + strings.Repeat("k", rng.IntN(200)), AgentIP: netip.MustParseAddr("2001:db8::42")}
	}
	return id
}

// AppendBatch produces exactly proto.Marshal's bytes for the FlowBatch of
// ToProto's messages, and the generated code decodes them into messages
// equal to ToProto's. The exact equality also checks that proto.Marshal
// writes this message's fields in field-number order (generated Go code
// does, for messages without oneofs, extensions or unknown fields), with
// Deterministic (which only orders map entries) and without.
func TestAppendBatchMatchesProtoMarshal(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed) // rerun a failure with this seed
	rng := rand.New(rand.NewPCG(1, seed))
	var buf []byte
	for round := range 50 {
		recs := randRecords(rng, 1+rng.IntN(200))
		id := randIdentity(rng)
		enc := flowpb.NewEncoder(id)
		want := &flowv1.FlowBatch{Flows: enc.Encode(recs)}
		wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if plain, _ := proto.Marshal(want); !bytes.Equal(plain, wire) {
			t.Fatalf("round %d: deterministic and default marshal differ", round)
		}
		buf = flowpb.AppendBatch(buf[:0], recs, id.NodeName, flowpb.AddrBytes(id.AgentIP))
		if !bytes.Equal(buf, wire) {
			// Find the first flow that differs, for the message.
			for i := range recs {
				one, _ := proto.Marshal(&flowv1.FlowBatch{Flows: want.Flows[i : i+1]})
				got := flowpb.AppendFlow(nil, &recs[i], id.NodeName, flowpb.AddrBytes(id.AgentIP))
				if !bytes.Equal(got, one) {
					t.Fatalf("round %d, flow %d (%+v):\n got %x\nwant %x", round, i, recs[i], got, one)
				}
			}
			t.Fatalf("round %d: batch bytes differ, yet every flow matches", round)
		}
		var back flowv1.FlowBatch
		if err := proto.Unmarshal(buf, &back); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !proto.Equal(&back, want) {
			t.Fatalf("round %d: decoded batch differs from ToProto's", round)
		}
	}
}

// An Appender writes what AppendFlow writes, its interface cache warm from
// earlier flows: interfaces met before (shared between flows, as a node's
// are), others taking their slots, names that are not UTF-8; and its
// identity changed (the agent IP learned from a connection).
func TestAppenderMatchesAppendFlow(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed) // rerun a failure with this seed
	rng := rand.New(rand.NewPCG(4, seed))
	a := flowpb.NewAppender("", nil)
	var got, want []byte
	for round := range 50 {
		id := randIdentity(rng)
		ip := flowpb.AddrBytes(id.AgentIP)
		a.SetIdentity(id.NodeName, ip)
		recs := randRecords(rng, 1+rng.IntN(200))
		for i := 1; i < len(recs); i++ {
			if rng.IntN(2) == 0 {
				recs[i].Interfaces = recs[rng.IntN(i)].Interfaces
			}
		}
		for i := range recs {
			got = a.Append(got[:0], &recs[i])
			want = flowpb.AppendFlow(want[:0], &recs[i], id.NodeName, ip)
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d, flow %d (%+v):\n got %x\nwant %x", round, i, recs[i], got, want)
			}
		}
	}
}

// Any run of consecutive AppendFlow elements is a FlowBatch on its own: the
// exporter cuts batches into messages that way.
func TestAppendFlowElementsSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	recs := randRecords(rng, 50)
	var buf []byte
	ends := []int{0}
	for i := range recs {
		buf = flowpb.AppendFlow(buf, &recs[i], "n", nil)
		ends = append(ends, len(buf))
	}
	enc := flowpb.NewEncoder(flowpb.Identity{NodeName: "n"})
	want := enc.Encode(recs)
	for i := 0; i+7 <= len(recs); i += 7 {
		var part flowv1.FlowBatch
		if err := proto.Unmarshal(buf[ends[i]:ends[i+7]], &part); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&part, &flowv1.FlowBatch{Flows: want[i : i+7]}) {
			t.Fatalf("flows %d..%d differ", i, i+7)
		}
	}
}

// Strings that are not valid UTF-8 make proto.Marshal fail (and any proto3
// decoder reject the message); AppendFlow sends them with each run of
// invalid bytes replaced by U+FFFD instead.
func TestAppendFlowInvalidUTF8(t *testing.T) {
	bad := "eth\xff\xfe0\xc3"
	r := flow.Record{
		SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("10.0.0.2"),
		Interfaces:  []flow.Interface{{Name: bad, Netns: "ns\x80", Direction: flow.DirIngress}},
		DropsFields: flow.DropsFields{DropCause: bad, DropTCPState: "\xff"},
		DNSFields:   flow.DNSFields{DNSName: "a.\xc0b"},
	}
	enc := flowpb.NewEncoder(flowpb.Identity{NodeName: "node\xff"})
	if _, err := proto.Marshal(&flowv1.FlowBatch{Flows: enc.Encode([]flow.Record{r})}); err == nil {
		t.Fatal("proto.Marshal accepted invalid UTF-8: the premise of the replacement is gone")
	}
	got := flowpb.AppendFlow(nil, &r, "node\xff", nil)
	var back flowv1.FlowBatch
	if err := proto.Unmarshal(got, &back); err != nil {
		t.Fatalf("a consumer rejects the bytes: %v", err)
	}

	fix := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	clean := r
	clean.Interfaces = []flow.Interface{{Name: fix(bad), Netns: fix("ns\x80"), Direction: flow.DirIngress}}
	clean.DropCause, clean.DropTCPState = fix(bad), fix("\xff")
	clean.DNSName = fix("a.\xc0b")
	enc.SetIdentity(flowpb.Identity{NodeName: fix("node\xff")})
	want, err := proto.Marshal(&flowv1.FlowBatch{Flows: enc.Encode([]flow.Record{clean})})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %x\nwant %x", got, want)
	}
	if n := back.Flows[0].Interfaces[0].Name; n != "eth\uFFFD0\uFFFD" {
		t.Fatalf("name %q", n)
	}
}

// Appending into a buffer with room allocates nothing.
func TestAppendBatchAllocs(t *testing.T) {
	recs := randRecords(rand.New(rand.NewPCG(4, 5)), 500)
	ip := flowpb.AddrBytes(netip.MustParseAddr("fd00::9"))
	buf := flowpb.AppendBatch(nil, recs, "node", ip)
	if a := testing.AllocsPerRun(20, func() { buf = flowpb.AppendBatch(buf[:0], recs, "node", ip) }); a != 0 {
		t.Fatalf("AppendBatch allocated %.1f times per batch, want 0", a)
	}
}
