package flowkafka_test

import (
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowkafka"
)

// TestHashIsStable pins the hash to its documented definition (FNV-1a 64,
// here the standard library's, of the 7-tuple's bytes): agents of
// different versions must send one flow to one partition.
func TestHashIsStable(t *testing.T) {
	r := flow.Record{SrcAddr: netip.MustParseAddr("10.0.0.1"), DstAddr: netip.MustParseAddr("fd00::2"),
		SrcPort: 40000, DstPort: 443, Proto: 6, IcmpType: 3, IcmpCode: 4}
	h := fnv.New64a()
	s, d := r.SrcAddr.As16(), r.DstAddr.As16()
	h.Write(s[:])
	h.Write(d[:])
	h.Write([]byte{40000 >> 8, 40000 & 0xff, 443 >> 8, 443 & 0xff, 6, 3, 4})
	if got, want := flowkafka.Hash(&r), h.Sum64(); got != want {
		t.Errorf("Hash = %#x, want FNV-1a 64 %#x", got, want)
	}
	// Only the 7-tuple counts.
	r2 := r
	r2.Packets, r2.Bytes, r2.Interfaces = 9, 999, []flow.Interface{{Name: "eth0"}}
	if flowkafka.Hash(&r2) != flowkafka.Hash(&r) {
		t.Error("Hash depends on more than the 7-tuple")
	}
	r2 = r
	r2.SrcPort++
	if flowkafka.Hash(&r2) == flowkafka.Hash(&r) {
		t.Error("Hash ignores the source port")
	}
	for n := 1; n < 64; n++ {
		if p := flowkafka.PartitionOf(&r, n); p < 0 || int(p) >= n {
			t.Fatalf("PartitionOf(_, %d) = %d", n, p)
		}
	}
}

// TestHashEveryAddressKind checks Hash against the standard library's
// FNV-1a 64 of the tuple's bytes for every kind of address (IPv4 takes a
// shortcut, IPv6, IPv4-mapped IPv6 and the zero Addr do not) and random
// tuples of each kind.
func TestHashEveryAddressKind(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	addrs := []func() netip.Addr{
		func() netip.Addr { return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), 0, 255}) },
		func() netip.Addr {
			var b [16]byte
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			return netip.AddrFrom16(b)
		},
		func() netip.Addr {
			return netip.AddrFrom16(netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.Uint32())}).As16())
		},
		func() netip.Addr { return netip.IPv6Unspecified() },
		func() netip.Addr { return netip.IPv4Unspecified() },
		func() netip.Addr { return netip.Addr{} },
	}
	for i := range 10_000 {
		r := flow.Record{SrcAddr: addrs[i%len(addrs)](), DstAddr: addrs[(i/len(addrs))%len(addrs)](),
			SrcPort: uint16(rng.Uint32()), DstPort: uint16(rng.Uint32()), Proto: byte(rng.Uint32()),
			IcmpType: byte(rng.Uint32()), IcmpCode: byte(rng.Uint32())}
		h := fnv.New64a()
		s, d := r.SrcAddr.As16(), r.DstAddr.As16()
		h.Write(s[:])
		h.Write(d[:])
		h.Write([]byte{byte(r.SrcPort >> 8), byte(r.SrcPort), byte(r.DstPort >> 8), byte(r.DstPort), r.Proto, r.IcmpType, r.IcmpCode})
		if got, want := flowkafka.Hash(&r), h.Sum64(); got != want {
			t.Fatalf("Hash(%v) = %#x, want FNV-1a 64 %#x", r.SrcAddr, got, want)
		}
	}
}

// BenchmarkHash is the partition hash of a node's mix of tuples (nine in
// ten IPv4).
func BenchmarkHash(b *testing.B) {
	recs := make([]flow.Record, 1000)
	for i := range recs {
		recs[i] = flow.Record{SrcAddr: netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)}),
			DstAddr: netip.AddrFrom4([4]byte{10, 96, 0, 10}), SrcPort: uint16(30000 + i), DstPort: 8080, Proto: 6}
		if i%10 == 9 {
			recs[i].SrcAddr = netip.AddrFrom16([16]byte{0xfd, 15: byte(i)})
			recs[i].DstAddr = netip.MustParseAddr("fd00::10")
		}
	}
	var sum uint64
	for b.Loop() {
		for i := range recs {
			sum += flowkafka.Hash(&recs[i])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/flow")
	_ = sum
}

func TestClientOptsErrors(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("p\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		conn flowkafka.Conn
		want string // "" = ok
	}{
		{flowkafka.Conn{}, "no brokers"},
		{flowkafka.Conn{Brokers: []string{"k:9092"}}, ""},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, SASL: "gssapi"}, `unknown SASL mechanism "gssapi"`},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, SASL: flowkafka.SASLPlain, SASLUser: "u"}, "needs a username and a password file"},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, SASL: flowkafka.SASLScramSHA512, SASLUser: "u", SASLPasswordFile: filepath.Join(dir, "none")}, "read the SASL password"},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, SASL: flowkafka.SASLScramSHA512, SASLUser: "u", SASLPasswordFile: pass}, ""},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, TLSCert: pass}, "certificate and key must be given together"},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, TLSCA: pass}, "no certificate in"},
		{flowkafka.Conn{Brokers: []string{"k:9092"}, TLS: true}, ""},
	} {
		_, err := tc.conn.ClientOpts(nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.conn, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want %q", tc.conn, err, tc.want)
		}
	}
}
