package datapath

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
	"github.com/flowlens/flowlens/internal/agent/ifaces"
)

// The flow rules' kernel tables (bpf/filter.h, the kernel's flow filter),
// filled from a compiled flowrules.Table before any program is attached,
// and their per-rule counters. The kernel side keeps its "filter" names
// (maps, structs: generated from the C); the Go side is named after
// package flowrules.

// FlowRuleDefault is the index of the default action in ReadFlowRuleCounters.
const FlowRuleDefault = int(datapathFilterSizeFILTER_DEFAULT)

// filterIfaceEntries bounds the interfaces a rule set naming interfaces can
// hold at once, per node; more are attached without their rule bits (counted
// by the attach error).
const filterIfaceEntries = 65536

// sizeFlowRules sets the filter maps' sizes and the programs' filter constants
// in spec: one entry each without rules, so a node without rules pays no
// memory for them. It returns the IPv4 table (nil without address rules),
// built once here and written by writeFlowRules.
func sizeFlowRules(spec *ebpf.CollectionSpec, t *flowrules.Table) ([]datapathFilterV4Entry, error) {
	var v4tbl []datapathFilterV4Entry
	on, used := uint32(0), uint64(0)
	addrs, ports, ifs, v4 := uint32(1), uint32(1), uint32(1), uint32(1)
	if t != nil && len(t.Rules) > 0 {
		on = 1
		if t.Used&flowrules.FieldAddr != 0 {
			used |= uint64(datapathFilterUseFILTER_USE_ADDR)
			addrs = uint32(len(t.Addrs))
			v4tbl = v4Table(t.Addrs)
			v4 = uint32(len(v4tbl))
		}
		if t.Used&flowrules.FieldPorts != 0 {
			used |= uint64(datapathFilterUseFILTER_USE_PORTS)
			ports = 1 << 16
		}
		if t.Used&flowrules.FieldICMP != 0 {
			used |= uint64(datapathFilterUseFILTER_USE_ICMP)
		}
		if t.Used&flowrules.FieldTCPFlags != 0 {
			used |= uint64(datapathFilterUseFILTER_USE_TCP_FLAGS)
		}
		if t.Used&flowrules.FieldIface != 0 {
			used |= uint64(datapathFilterUseFILTER_USE_IFACES)
			ifs = filterIfaceEntries
		}
	}
	spec.Maps[datapathMapFilterAddr].MaxEntries = addrs
	spec.Maps[datapathMapFilterV4].MaxEntries = v4

	spec.Maps[datapathMapFilterPorts].MaxEntries = ports
	spec.Maps[datapathMapFilterIfaces].MaxEntries = ifs
	if err := spec.Variables[datapathVarFilterOn].Set(on); err != nil {
		return nil, fmt.Errorf("set filter_on: %w", err)
	}
	if err := spec.Variables[datapathVarFilterUsed].Set(used); err != nil {
		return nil, fmt.Errorf("set filter_used: %w", err)
	}
	return v4tbl, nil
}

// writeFlowRules fills the filter maps from t; sampling is the rate of rules
// without their own and of the default action. A drops rule's packets are
// not accounted at the TC hooks: its flows are the ones the drop hook
// reports (enrichment entries, exported as partial records when no TC
// hook counted the flow), so it keeps exactly the flows that saw a drop.
func (m *Maps) writeFlowRules(t *flowrules.Table, v4 []datapathFilterV4Entry, sampling uint32) error {
	if t == nil || len(t.Rules) == 0 {
		return nil
	}
	var c datapathFilterConf
	c.Proto, c.IcmpType, c.IcmpCode, c.TcpFlags, c.Dir = t.Proto, t.ICMPType, t.ICMPCode, t.TCPFlags, t.Dir
	c.NoAnyPorts, c.PortFree, c.IcmpFree, c.TcpFree, c.IfaceFree, c.Accept =
		t.NoAnyPorts, t.PortFree, t.ICMPFree, t.TCPFree, t.IfaceFree, t.Accept&^t.Drops
	for i, r := range t.Rules {
		c.Sampling[i] = RuleRate(r.Sampling, sampling)
	}
	c.DefaultSampling = sampling
	if t.Default == flowrules.Accept {
		c.DefaultAccept = 1
	}
	if err := m.FilterTables.Put(uint32(0), &c); err != nil {
		return fmt.Errorf("write filter tables: %w", err)
	}
	if t.Used&flowrules.FieldAddr != 0 {
		keys := make([]uint32, len(v4))
		for i := range keys {
			keys[i] = uint32(i)
		}
		if _, err := m.FilterV4.BatchUpdate(keys, v4, nil); err != nil {
			return fmt.Errorf("write filter IPv4 table: %w", err)
		}
		for _, e := range t.Addrs {
			k := datapathFilterAddrKey{Prefixlen: uint32(e.Len), Addr: e.Addr}
			if err := m.FilterAddr.Put(&k, &datapathFilterAddrBits{Cidr: e.CIDR, Peer: e.Peer}); err != nil {
				return fmt.Errorf("write filter prefix %s: %w", e.Prefix(), err)
			}
		}
	}
	if t.Used&flowrules.FieldPorts != 0 {
		keys := make([]uint32, 0, 1<<16)
		vals := make([]datapathFilterPortBits, 0, 1<<16)
		for _, r := range t.Ports {
			for p := uint32(r.First); p <= uint32(r.Last); p++ {
				keys = append(keys, p)
				vals = append(vals, datapathFilterPortBits{Src: r.Src, Dst: r.Dst, Any: r.Any})
			}
		}
		if _, err := m.FilterPorts.BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("write filter ports: %w", err)
		}
	}
	return nil
}

// FlowRuleRates are the sampling rates by FlowValue.Rule: [0] the default
// action's (the agent's rate), [i+1] rule i's; nil without rules.
func FlowRuleRates(t *flowrules.Table, sampling uint32) []uint32 {
	if t == nil || len(t.Rules) == 0 {
		return nil
	}
	out := []uint32{max(sampling, 1)}
	for _, r := range t.Rules {
		out = append(out, RuleRate(r.Sampling, sampling))
	}
	return out
}

// v4Table expands the IPv4 entries of the address trie (IPv4-mapped, length
// 96 to 128) into bpf/filter.h's multibit trie: 65536 entries for the first
// 16 bits, then a block of 256 for the third byte under each /16 a longer
// prefix splits, and another for the fourth byte under each /24 a prefix
// longer than 24 bits splits. Prefixes go in from the shortest, so a longer
// one overwrites what a shorter one wrote, and a new block starts as a copy
// of the entry it splits: each address ends up with the bits of its longest
// prefix, what the LPM trie gives.
func v4Table(addrs []flowrules.AddrEntry) []datapathFilterV4Entry {
	var v4 []flowrules.AddrEntry
	for _, e := range addrs {
		if e.Len >= 96 && [12]byte(e.Addr[:12]) == [12]byte{10: 0xff, 11: 0xff} {
			v4 = append(v4, e)
		}
	}
	slices.SortStableFunc(v4, func(a, b flowrules.AddrEntry) int { return a.Len - b.Len })
	tbl := make([]datapathFilterV4Entry, 1<<16)
	// block returns the block under entry i, made as 256 copies of it.
	block := func(i uint32) uint32 {
		if tbl[i].Next == 0 {
			n := uint32(len(tbl))
			fill := tbl[i]
			for range 256 {
				tbl = append(tbl, fill)
			}
			tbl[i].Next = n
		}
		return tbl[i].Next
	}
	set := func(first, count uint32, e flowrules.AddrEntry) {
		for i := first; i < first+count; i++ {
			tbl[i].Cidr, tbl[i].Peer = e.CIDR, e.Peer
		}
	}
	for _, e := range v4 {
		a, n := binary.BigEndian.Uint32(e.Addr[12:]), uint32(e.Len-96)
		switch {
		case n <= 16:
			set(a>>16, 1<<(16-n), e)
		case n <= 24:
			set(block(a>>16)+(a>>8)&0xff, 1<<(24-n), e)
		default:
			b := block(a>>16) + (a>>8)&0xff
			set(block(b)+a&0xff, 1<<(32-n), e)
		}
	}
	return tbl
}

// RuleRate is the sampling rate a rule applies: its own, or the agent's.
func RuleRate(rule, agent uint32) uint32 {
	if rule == 0 {
		return max(agent, 1)
	}
	return rule
}

// FlowRules are the compiled flow rules the datapath was loaded with (nil:
// none).
func (d *Datapath) FlowRules() *flowrules.Table { return d.cfg.FlowRules }

// flowRulesAttach gives an attached interface its rules' bits, when rules
// name interfaces.
func (d *Datapath) flowRulesAttach(iface ifaces.Interface) error {
	t := d.cfg.FlowRules
	if t == nil || t.Used&flowrules.FieldIface == 0 {
		return nil
	}
	k := datapathFilterIfaceKey{Netns: iface.NetnsCookie, Ifindex: uint32(iface.Index)}
	bits := t.IfaceBits(iface.Name)
	if err := d.Maps.FilterIfaces.Put(&k, &bits); err != nil {
		return fmt.Errorf("filter rules for %s: %w", iface.Name, err)
	}
	return nil
}

// flowRulesDetach forgets an interface's rule bits.
func (d *Datapath) flowRulesDetach(iface ifaces.Interface) {
	t := d.cfg.FlowRules
	if t == nil || t.Used&flowrules.FieldIface == 0 {
		return
	}
	k := datapathFilterIfaceKey{Netns: iface.NetnsCookie, Ifindex: uint32(iface.Index)}
	_ = d.Maps.FilterIfaces.Delete(&k) // absent when the attach failed
}

// ReadFlowRuleCounters returns the packets each rule matched, by precedence
// position, and at FlowRuleDefault those no rule matched.
func (d *Datapath) ReadFlowRuleCounters() ([]uint64, error) {
	out := make([]uint64, FlowRuleDefault+1)
	d.Maps.mu.Lock()
	defer d.Maps.mu.Unlock()
	for i := range out {
		v, err := d.Maps.sumPerCPU(d.Maps.FilterCounters, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("read filter counter %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}
