package datapath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
)

// The flow maps come in two families per generation (bpf/flowmap.h): an
// IPv4 flow, whose two addresses are IPv4-mapped in its FlowKey, lives in
// Maps.Flows4 under its 16-byte FlowKey4; every other key in Maps.Flows
// under the FlowKey itself. The choice is a function of the key alone, the
// kernel's and this file's alike, so a key has one entry, and a reader of
// both maps that turns each FlowKey4 back into its FlowKey (Generations,
// ReadFlows) sees what one map of FlowKeys held.
//
// Capacity: each map has Config.MaxFlows entries (--cache-max-flows). The
// IPv4 maps are preallocated, as the one map of each generation was; the
// IPv6 maps are not (BPF_F_NO_PREALLOC), so a node of IPv4 flows pays no
// memory for them. The new-flows counter, and so the fill the pressure
// check and flow_map_entries read, counts both families' entries: eviction
// starts when the two together reach the fill, before either map is full.

// v4Mapped is the ::ffff:0:0/96 prefix of an IPv4-mapped address.
var v4Mapped = [12]byte{10: 0xff, 11: 0xff}

// Key4 returns k's key in the IPv4 flow maps, and whether k is an IPv4
// flow's (both addresses IPv4-mapped: bpf/flowmap.h, fm_key4).
func Key4(k *FlowKey) (FlowKey4, bool) {
	if [12]byte(k.SrcIp[:12]) != v4Mapped || [12]byte(k.DstIp[:12]) != v4Mapped {
		return FlowKey4{}, false
	}
	return FlowKey4{
		// The addresses' bytes as they are in memory (network order).
		SrcIp:   binary.NativeEndian.Uint32(k.SrcIp[12:]),
		DstIp:   binary.NativeEndian.Uint32(k.DstIp[12:]),
		SrcPort: k.SrcPort, DstPort: k.DstPort,
		Proto: k.Proto, IcmpType: k.IcmpType, IcmpCode: k.IcmpCode, Zone: k.Zone,
	}, true
}

// KeyOf4 is the FlowKey of an IPv4 flow map's key: Key4's inverse.
func KeyOf4(k4 *FlowKey4) FlowKey {
	k := FlowKey{
		SrcPort: k4.SrcPort, DstPort: k4.DstPort,
		Proto: k4.Proto, IcmpType: k4.IcmpType, IcmpCode: k4.IcmpCode, Zone: k4.Zone,
	}
	copy(k.SrcIp[:], v4Mapped[:])
	copy(k.DstIp[:], v4Mapped[:])
	binary.NativeEndian.PutUint32(k.SrcIp[12:], k4.SrcIp)
	binary.NativeEndian.PutUint32(k.DstIp[12:], k4.DstIp)
	return k
}

// FlowMap is one generation's flow maps, both families, addressed by
// FlowKey: what tests and benchmarks use to read and write a generation's
// flows (the evictor reads in batches: Ended.ReadFlows).
type FlowMap struct {
	V4 *ebpf.Map // Maps.Flows4[idx]: FlowKey4 -> FlowValue4
	V6 *ebpf.Map // Maps.Flows[idx]: FlowKey -> FlowValue
}

// Gen returns the flow maps of generation parity idx (0 or 1; only the
// parity matters).
func (m *Maps) Gen(idx int) FlowMap { return FlowMap{m.Flows4[idx&1], m.Flows[idx&1]} }

// valueSize is the size of a flow map value as the Go side reads it:
// FlowValue's and XlatFlowAlias's (the IPv4 maps' padding aside).
const valueSize = int(unsafe.Sizeof(FlowValue{}))

// valueBytes is v, a *FlowValue or *XlatFlowAlias, as its bytes.
func valueBytes(v any) ([]byte, error) {
	switch p := v.(type) {
	case *FlowValue:
		return unsafe.Slice((*byte)(unsafe.Pointer(p)), valueSize), nil
	case *XlatFlowAlias:
		return unsafe.Slice((*byte)(unsafe.Pointer(p)), valueSize), nil
	}
	return nil, fmt.Errorf("flow map value of type %T: want *FlowValue or *XlatFlowAlias", v)
}

// Lookup reads k's value into v (a *FlowValue or *XlatFlowAlias).
func (f FlowMap) Lookup(k *FlowKey, v any) error {
	b, err := valueBytes(v)
	if err != nil {
		return err
	}
	if k4, ok := Key4(k); ok {
		var v4 FlowValue4
		if err := f.V4.Lookup(&k4, &v4); err != nil {
			return err
		}
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&v4.V)), valueSize))
		return nil
	}
	return f.V6.Lookup(k, b)
}

// Put writes v (a *FlowValue or *XlatFlowAlias) under k.
func (f FlowMap) Put(k *FlowKey, v any) error {
	b, err := valueBytes(v)
	if err != nil {
		return err
	}
	if k4, ok := Key4(k); ok {
		var v4 FlowValue4
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&v4.V)), valueSize), b)
		return f.V4.Put(&k4, &v4)
	}
	return f.V6.Put(k, b)
}

// Delete deletes k.
func (f FlowMap) Delete(k *FlowKey) error {
	if k4, ok := Key4(k); ok {
		return f.V4.Delete(&k4)
	}
	return f.V6.Delete(k)
}

// First returns a key of the maps, the IPv4 map's first (ErrKeyNotExist:
// both are empty).
func (f FlowMap) First() (FlowKey, error) {
	var k4 FlowKey4
	if err := f.V4.NextKey(nil, &k4); err == nil {
		return KeyOf4(&k4), nil
	} else if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return FlowKey{}, err
	}
	var k FlowKey
	err := f.V6.NextKey(nil, &k)
	return k, err
}

// Each calls fn with every entry, the IPv4 map's first, until fn returns
// false.
func (f FlowMap) Each(fn func(k FlowKey, v FlowValue) bool) error {
	var k4 FlowKey4
	var v4 FlowValue4
	it := f.V4.Iterate()
	for it.Next(&k4, &v4) {
		if !fn(KeyOf4(&k4), v4.V) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	var k FlowKey
	var v FlowValue
	it = f.V6.Iterate()
	for it.Next(&k, &v) {
		if !fn(k, v) {
			return nil
		}
	}
	return it.Err()
}

// split returns ks's IPv4 keys (as FlowKey4s) with their positions, and
// the positions of the others.
func split(ks []FlowKey) (k4 []FlowKey4, at4, at6 []int) {
	for i := range ks {
		if k, ok := Key4(&ks[i]); ok {
			k4, at4 = append(k4, k), append(at4, i)
		} else {
			at6 = append(at6, i)
		}
	}
	return k4, at4, at6
}

// BatchUpdate writes vals[i] under ks[i] (BPF_ANY), in batches per family.
func (f FlowMap) BatchUpdate(ks []FlowKey, vals []FlowValue) error {
	k4, at4, at6 := split(ks)
	if len(k4) > 0 {
		v4 := make([]FlowValue4, len(k4))
		for j, i := range at4 {
			v4[j].V = vals[i]
		}
		if _, err := f.V4.BatchUpdate(k4, v4, nil); err != nil {
			return err
		}
	}
	if len(at6) > 0 {
		k6, v6 := make([]FlowKey, len(at6)), make([]FlowValue, len(at6))
		for j, i := range at6 {
			k6[j], v6[j] = ks[i], vals[i]
		}
		if _, err := f.V6.BatchUpdate(k6, v6, nil); err != nil {
			return err
		}
	}
	return nil
}

// BatchDelete deletes ks, in batches per family; it returns how many.
func (f FlowMap) BatchDelete(ks []FlowKey) (int, error) {
	k4, _, at6 := split(ks)
	n := 0
	if len(k4) > 0 {
		d, err := f.V4.BatchDelete(k4, nil)
		n += d
		if err != nil {
			return n, err
		}
	}
	if len(at6) > 0 {
		k6 := make([]FlowKey, len(at6))
		for j, i := range at6 {
			k6[j] = ks[i]
		}
		d, err := f.V6.BatchDelete(k6, nil)
		n += d
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
