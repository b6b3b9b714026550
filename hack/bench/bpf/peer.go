package main

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/flowlens/flowlens/internal/agent/datapath"
)

// The peer: NetObserv's TC flow program, run beside flowlens' in the same
// repetitions (make bench-bpf passes -peer, the committed object of the
// version hack/bench/peer pins). Its maps are created for it alone, sized
// like ours and holding the same N flows; its sampling is every packet;
// nothing is pinned. It has no generations and no listed hooks: on the
// carry and inherit paths it inserts, as on new.

// peerProgram is the program NetObserv's agent attaches at TC ingress
// (tc_egress_flow_parse is its egress twin; the ingress one is what ours
// runs against here, as flowlens_ingress).
const peerProgram = "tc_ingress_flow_parse"

type peer struct {
	coll *ebpf.Collection
	prog *ebpf.Program
	ret  uint32 // what it returns (TC_ACT_OK), checked on every run
}

func loadPeer(path string, maxFlows int, pkt []byte) (*peer, error) {
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, err
	}
	if _, ok := spec.Programs[peerProgram]; !ok {
		return nil, fmt.Errorf("%s: no program %s", path, peerProgram)
	}
	for name := range spec.Programs {
		if name != peerProgram {
			delete(spec.Programs, name)
		}
	}
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinNone
		if m.Type == ebpf.Hash || m.Type == ebpf.PerCPUHash {
			m.MaxEntries = uint32(maxFlows)
		}
	}
	if v, ok := spec.Variables["sampling"]; ok {
		if err := v.Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("set sampling: %w", err)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", peerProgram, err)
	}
	p := &peer{coll: coll, prog: coll.Programs[peerProgram]}
	ret, _, err := p.prog.Benchmark(pkt, 1, nil)
	if err != nil {
		coll.Close()
		return nil, err
	}
	p.ret = ret
	return p, nil
}

func (p *peer) Close() { p.coll.Close() }

// peerFlowMap is NetObserv's flow map. Its key has flowlens' layout (the
// addresses IPv4-mapped, ports, protocol, ICMP type and code, one zero
// byte), so the same keys name the same flows in both.
const peerFlowMap = "aggregated_flows"

// warm puts flows [0, n) in the peer's map, as ours is prefilled: one pass
// of the driver over them.
func (p *peer) warm(fam string, n int, pkt []byte) error {
	d, closeD, err := driver(p.prog, fam, 0, n)
	if err != nil {
		return err
	}
	defer closeD()
	_, _, err = measure(d, pkt, n, p.ret)
	return err
}

// forget deletes the flows a repetition of an insert path created. Its
// keys' last byte is zero where ours holds the zone (bpf/zone.h: 255, on
// the loopback device the bench runs on).
func (p *peer) forget(ks []datapath.FlowKey) error {
	m, ok := p.coll.Maps[peerFlowMap]
	if !ok {
		return fmt.Errorf("no map %s", peerFlowMap)
	}
	if m.KeySize() != uint32(binary.Size(datapath.FlowKey{})) {
		return fmt.Errorf("%s: %d-byte keys, not flowlens' layout", peerFlowMap, m.KeySize())
	}
	ks = slices.Clone(ks)
	for i := range ks {
		ks[i].Zone = 0
	}
	n, err := m.BatchDelete(ks, nil)
	if err != nil {
		return err
	}
	if n != len(ks) {
		return fmt.Errorf("%s: deleted %d of the %d flows a repetition created", peerFlowMap, n, len(ks))
	}
	return nil
}
