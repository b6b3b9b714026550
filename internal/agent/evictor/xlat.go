package evictor

import (
	"unsafe"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// viaFold gives feature xlat's delegated counts to their flow. A flow
// map entry with FlowFlagXlatAlias is no flow: it names one (bpf/xlat.h).
// Most count nothing; one that its flow's counting hook after NAT counts
// in (xlat_delegate: a host-network client's egress after an OUTPUT DNAT,
// an uplink that sees a forwarded packet after NAT) holds that hook's
// packets of the flow it names, which carries FlowFlagXlatVia, also once
// a hand-over took the delegation back (xlat_handover). A flow's note
// (its key with ICMP type and code 255, naming the alias) is an alias
// with no packets: no record either. So a Via flow's entry is held back until the whole
// map is read, then handed on with its aliases' counts added: one record,
// its packets counted once (docs/design/counting.md, "The alias in the
// flow map"). Both maps are reused: steady state allocates nothing.
type viaFold struct {
	flows  map[datapath.FlowKey]datapath.FlowValue // Via flows held back
	counts map[datapath.FlowKey]datapath.FlowValue // aliases' counts, by the key of the flow they name
}

var _ [unsafe.Sizeof(datapath.FlowValue{}) - unsafe.Sizeof(datapath.XlatFlowAlias{})]struct{}
var _ [unsafe.Sizeof(datapath.XlatFlowAlias{}) - unsafe.Sizeof(datapath.FlowValue{})]struct{}

// viaFlags are the alias's flags a record carries (the packets' own).
const viaFlags = datapath.FlowFlagFragUnmatched | datapath.FlowFlagL4Unread | datapath.FlowFlagExtUnread

// take keeps an entry of the ended flow map: a Via flow, or an alias.
func (f *viaFold) take(k *datapath.FlowKey, v *datapath.FlowValue) {
	if f.flows == nil {
		f.flows, f.counts = map[datapath.FlowKey]datapath.FlowValue{}, map[datapath.FlowKey]datapath.FlowValue{}
	}
	if v.Flags&datapath.FlowFlagXlatAlias == 0 {
		f.flows[*k] = *v
		return
	}
	if v.Packets == 0 && v.Bytes == 0 {
		return // counts nothing (listed hooks only)
	}
	// The same 168 bytes read as an alias: the counters are at a flow's
	// offsets (bpf/xlat.h), the key it names after the hooks.
	a := (*datapath.XlatFlowAlias)(unsafe.Pointer(v))
	c, ok := f.counts[a.To.Key]
	if !ok {
		// Its first counting alias: the hook it counted at, for a flow
		// that has no entry of its own (see flush).
		c.Ifaces[0], c.N_ifaces, c.FirstSeen, c.Rule = a.Ifaces[0], 1, v.LastSeen, v.Rule
	}
	addVia(&c, v)
	f.counts[a.To.Key] = c
}

// addVia adds the counts of alias a to v.
func addVia(v, a *datapath.FlowValue) {
	v.Packets += a.Packets
	v.Bytes += a.Bytes
	v.LastSeen = max(v.LastSeen, a.LastSeen)
	v.TcpFlags |= a.TcpFlags
	v.Flags |= a.Flags & viaFlags
}

// flush hands on the held flows with their aliases' counts, once the
// whole ended map is read. An alias whose flow has no entry (none is
// expected: the flow's entry exists from before the alias counts, and
// the map is not deleted from within its generation) is a record of its
// own under the flow's key, so that no counted packet is dropped.
func (f *viaFold) flush(out *output) {
	for k, v := range f.flows {
		if c, ok := f.counts[k]; ok {
			addVia(&v, &c)
			delete(f.counts, k)
		}
		out.add(&k, &v)
	}
	for k, c := range f.counts {
		out.add(&k, &c)
	}
	clear(f.flows)
	clear(f.counts)
}
