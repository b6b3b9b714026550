package evictor

import (
	"sync"

	"github.com/flowlens/flowlens/internal/datapath"
)

// overflowFlow aggregates the single-packet records the datapath sends
// through the ring buffer when the flow map is full. It applies the kernel's
// dedup rule: only packets seen on the first (interface, direction) count.
type overflowFlow struct {
	first datapath.IfaceObs
	v     datapath.FlowValue
}

// overflowAgg collects overflow records between two evictions.
type overflowAgg struct {
	mu    sync.Mutex
	flows map[datapath.FlowKey]*overflowFlow
	spare map[datapath.FlowKey]*overflowFlow
}

func newOverflowAgg() *overflowAgg {
	return &overflowAgg{flows: map[datapath.FlowKey]*overflowFlow{}, spare: map[datapath.FlowKey]*overflowFlow{}}
}

func (a *overflowAgg) add(r *datapath.OverflowRec) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, ok := a.flows[r.Key]
	if !ok {
		f = &overflowFlow{first: r.Iface}
		f.v.FirstSeenNs = r.TsNs
		f.v.EthType = r.EthType
		f.v.Dscp = r.Dscp
		f.v.SrcMac = r.SrcMac
		f.v.DstMac = r.DstMac
		f.v.Ifaces[0] = r.Iface
		f.v.N_ifaces = 1
		a.flows[r.Key] = f
	}
	v := &f.v
	if r.Iface.Netns == f.first.Netns && r.Iface.Ifindex == f.first.Ifindex && r.Iface.Dir == f.first.Dir {
		v.Bytes += uint64(r.Bytes)
		v.Packets++
		v.TcpFlags |= r.TcpFlags
		if r.TsNs > v.LastSeenNs {
			v.LastSeenNs = r.TsNs
		}
		return
	}
	for i := 0; i < int(v.N_ifaces); i++ {
		o := &v.Ifaces[i]
		if o.Netns == r.Iface.Netns && o.Ifindex == r.Iface.Ifindex {
			if o.Dir != r.Iface.Dir {
				o.Dir = datapath.DirBoth
			}
			return
		}
	}
	if int(v.N_ifaces) < len(v.Ifaces) {
		v.Ifaces[v.N_ifaces] = r.Iface
		v.N_ifaces++
	} else {
		v.Flags |= datapath.FlowFlagIfacesOverflow
	}
}

// take returns the aggregated flows and starts a new period. The returned
// map is valid until the next call.
func (a *overflowAgg) take() map[datapath.FlowKey]*overflowFlow {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.spare)
	a.flows, a.spare = a.spare, a.flows
	return a.spare
}
