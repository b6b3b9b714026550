package main

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// generator is the one stream of flows both targets receive: flow i of
// the stream is the distinct flow i mod n (a TCP 5-tuple between two pods
// of the cluster) with counts that vary with i.
type generator struct {
	cl    *cluster
	n     int
	batch int
}

func newGenerator(cl *cluster, distinct, batch int) *generator {
	return &generator{cl: cl, n: distinct, batch: batch}
}

// spec is one flow of the stream.
type spec struct {
	src, dst       *pod
	sport, dport   uint32
	bytes, packets uint64
}

func (g *generator) spec(i int) spec {
	k := uint64(i % g.n)
	h := k*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	h ^= h >> 29
	p := uint64(len(g.cl.pods))
	src := &g.cl.pods[h%p]
	dst := &g.cl.pods[(h>>20)%p]
	pk := uint64(1 + i%17)
	return spec{src: src, dst: dst, sport: uint32(20000 + k%40000), dport: uint32(8080 + (h>>40)%4),
		packets: pk, bytes: pk * uint64(66+i%1400)}
}

// flows returns the stream's indices [from, from+n).
func (g *generator) flows(from, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = from + i
	}
	return s
}

// pair is a metric series' identity: source and destination namespace
// and workload.
type pair struct{ srcNS, srcW, dstNS, dstW string }

type counts struct{ bytes, packets float64 }

type totals map[pair]counts

func newTotals() totals { return totals{} }

// add adds the flows' counts to t, under their pods' pair.
func (g *generator) add(t totals, flows []int) {
	for _, i := range flows {
		s := g.spec(i)
		k := pair{s.src.ns, s.src.workload, s.dst.ns, s.dst.workload}
		c := t[k]
		c.bytes += float64(s.bytes)
		c.packets += float64(s.packets)
		t[k] = c
	}
}

var (
	srcMAC = []byte{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x01}
	dstMAC = []byte{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x02}
	agent  = []byte{192, 168, 0, 10}
)

// flowlensBatches encodes the flows as FlowBatch messages, as flowlens'
// agent sends them (one interface, sampling 1, the agent's identity per
// flow).
func (g *generator) flowlensBatches(flows []int) [][]byte {
	now := timestamppb.New(time.Now())
	var out [][]byte
	for len(flows) > 0 {
		n := min(g.batch, len(flows))
		b := &flowv1.FlowBatch{}
		for _, i := range flows[:n] {
			s := g.spec(i)
			sa, da := s.src.ip.As4(), s.dst.ip.As4()
			b.Flows = append(b.Flows, &flowv1.Flow{
				SrcAddr: sa[:], DstAddr: da[:], SrcPort: s.sport, DstPort: s.dport, Proto: 6,
				Bytes: s.bytes, Packets: s.packets, TcpFlags: 0x18, EthType: 0x0800,
				SrcMac: srcMAC, DstMac: dstMAC, StartTime: now, EndTime: now,
				Interfaces: []*flowv1.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", NetnsId: 4026531840,
					Direction: flowv1.Direction_DIRECTION_EGRESS}},
				Sampling: 1, NodeName: "node-0", AgentIp: agent,
			})
		}
		m, err := proto.Marshal(b)
		if err != nil {
			panic(err)
		}
		out = append(out, m)
		flows = flows[n:]
	}
	return out
}

// pbflowBatches encodes the flows as NetObserv's pbflow Records (the
// pinned agent's proto/flow.proto), by hand so that this module does not
// depend on NetObserv's: what its agent sends for the same flow (one
// interface in dup_list, sampling 1).
func (g *generator) pbflowBatches(flows []int) [][]byte {
	now := time.Now()
	ts := func(b []byte, num protowire.Number) []byte {
		var t []byte
		t = protowire.AppendTag(t, 1, protowire.VarintType)
		t = protowire.AppendVarint(t, uint64(now.Unix()))
		t = protowire.AppendTag(t, 2, protowire.VarintType)
		t = protowire.AppendVarint(t, uint64(now.Nanosecond()))
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, t)
	}
	ip := func(b []byte, num protowire.Number, a [4]byte) []byte {
		var t []byte
		t = protowire.AppendTag(t, 1, protowire.Fixed32Type)
		t = protowire.AppendFixed32(t, uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]))
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, t)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		b = protowire.AppendTag(b, num, protowire.VarintType)
		return protowire.AppendVarint(b, v)
	}
	mac := func(m []byte) uint64 {
		var v uint64
		for _, x := range m {
			v = v<<8 | uint64(x)
		}
		return v
	}
	var out [][]byte
	for len(flows) > 0 {
		n := min(g.batch, len(flows))
		var msg []byte
		for _, i := range flows[:n] {
			s := g.spec(i)
			var r []byte
			r = varint(r, 1, 0x0800) // eth_protocol
			r = varint(r, 2, 1)      // direction EGRESS
			r = ts(r, 3)
			r = ts(r, 4)
			var dl []byte
			dl = varint(dl, 1, mac(srcMAC))
			dl = varint(dl, 2, mac(dstMAC))
			r = protowire.AppendTag(r, 5, protowire.BytesType)
			r = protowire.AppendBytes(r, dl)
			var nw []byte
			nw = ip(nw, 1, s.src.ip.As4())
			nw = ip(nw, 2, s.dst.ip.As4())
			r = protowire.AppendTag(r, 6, protowire.BytesType)
			r = protowire.AppendBytes(r, nw)
			var tr []byte
			tr = varint(tr, 1, uint64(s.sport))
			tr = varint(tr, 2, uint64(s.dport))
			tr = varint(tr, 3, 6)
			r = protowire.AppendTag(r, 7, protowire.BytesType)
			r = protowire.AppendBytes(r, tr)
			r = varint(r, 8, s.bytes)
			r = varint(r, 9, s.packets)
			r = protowire.AppendTag(r, 10, protowire.BytesType)
			r = protowire.AppendString(r, "eth0")
			r = ip(r, 12, [4]byte(agent))
			r = varint(r, 13, 0x18) // flags
			var dup []byte
			dup = protowire.AppendTag(dup, 1, protowire.BytesType)
			dup = protowire.AppendString(dup, "eth0")
			dup = varint(dup, 2, 1)
			r = protowire.AppendTag(r, 26, protowire.BytesType)
			r = protowire.AppendBytes(r, dup)
			r = varint(r, 29, 1) // sampling
			msg = protowire.AppendTag(msg, 1, protowire.BytesType)
			msg = protowire.AppendBytes(msg, r)
		}
		out = append(out, msg)
		flows = flows[n:]
	}
	return out
}
