package evictor

import (
	"net/netip"
	"time"

	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/pkg/flow"
)

// The record model's directions and TCP flag markers are the datapath's
// (bpf/types.h, generated): these fail to compile if they ever differ, so
// conversion can stay a plain cast.
var (
	_ [flow.DirIngress - flow.Direction(datapath.DirIngress)]struct{}
	_ [flow.Direction(datapath.DirIngress) - flow.DirIngress]struct{}
	_ [flow.DirEgress - flow.Direction(datapath.DirEgress)]struct{}
	_ [flow.Direction(datapath.DirEgress) - flow.DirEgress]struct{}
	_ [flow.DirBoth - flow.Direction(datapath.DirBoth)]struct{}
	_ [flow.Direction(datapath.DirBoth) - flow.DirBoth]struct{}
	_ [flow.TCPFlagSynAck - datapath.TCPSynAck]struct{}
	_ [datapath.TCPSynAck - flow.TCPFlagSynAck]struct{}
	_ [flow.TCPFlagFinAck - datapath.TCPFinAck]struct{}
	_ [datapath.TCPFinAck - flow.TCPFlagFinAck]struct{}
	_ [flow.TCPFlagRstAck - datapath.TCPRstAck]struct{}
	_ [datapath.TCPRstAck - flow.TCPFlagRstAck]struct{}
)

// Clock converts the datapath's timestamps (jiffies) to wall-clock time:
// to CLOCK_MONOTONIC with the datapath's timebase, then with an offset
// taken once per eviction.
type Clock struct {
	tb     datapath.Timebase
	offset int64
}

// NewClock samples the wall and monotonic clocks now.
func NewClock(tb datapath.Timebase) Clock {
	wall := time.Now().UnixNano()
	return Clock{tb: tb, offset: wall - monotonicNow()}
}

// Wall converts a timestamp in jiffies.
func (c Clock) Wall(j uint64) time.Time {
	return time.Unix(0, c.offset+int64(c.tb.MonoNs(j)))
}

// addr converts a 16-byte datapath address; IPv4-mapped ones become plain IPv4.
func addr(b [16]byte) netip.Addr {
	return netip.AddrFrom16(b).Unmap()
}

func fillKey(r *flow.Record, k *datapath.FlowKey) {
	r.SrcAddr = addr(k.SrcIp)
	r.DstAddr = addr(k.DstIp)
	r.SrcPort = k.SrcPort
	r.DstPort = k.DstPort
	r.Proto = k.Proto
	r.IcmpType = k.IcmpType
	r.IcmpCode = k.IcmpCode
}

// fromValue fills r from a flow map entry. ifs is where r.Interfaces is
// carved from (a per-batch backing array), so conversion allocates nothing.
func fromValue(r *flow.Record, k *datapath.FlowKey, v *datapath.FlowValue, clk Clock, res *nameCache, b *flow.Batch) {
	fillKey(r, k)
	r.Bytes = v.Bytes
	r.Packets = v.Packets
	r.TCPFlags = v.TcpFlags
	r.EthType = v.EthType
	r.DSCP = v.Dscp
	r.SrcMAC = v.SrcMac
	r.DstMAC = v.DstMac
	r.StartTime = clk.Wall(v.FirstSeen)
	r.EndTime = clk.Wall(v.LastSeen)
	r.IfacesOverflow = v.Flags&datapath.FlowFlagIfacesOverflow != 0
	r.FragUnmatched = v.Flags&datapath.FlowFlagFragUnmatched != 0
	r.L4Unread = v.Flags&datapath.FlowFlagL4Unread != 0
	r.ExtUnread = v.Flags&datapath.FlowFlagExtUnread != 0
	r.Interfaces = b.Interfaces(ifaceCount(v))
	for i := range r.Interfaces {
		r.Interfaces[i] = iface(&v.Ifaces[i], res)
	}
}

func iface(o *datapath.IfaceObs, res *nameCache) flow.Interface {
	name, netns := res.Lookup(IfaceKey{o.Netns, o.Ifindex})
	return flow.Interface{Name: name, Ifindex: o.Ifindex, Netns: netns, NetnsID: o.Netns, Direction: flow.Direction(o.Dir)}
}

// ifaceCount is the number of valid entries in v.Ifaces.
func ifaceCount(v *datapath.FlowValue) int {
	return min(int(v.N_ifaces), len(v.Ifaces))
}
