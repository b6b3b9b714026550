package otlp

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowlens/flowlens/pkg/flow"
)

// ifaceCache holds the wire form of the interfaces met lately
// (flow.InterfaceCache): the element of flowlens.interfaces each one is,
// and the network.interface.name and network.io.direction attributes it
// gives the flows it comes first in. Those are a third of an encoded flow,
// the same for every flow through the interface.
type ifaceCache struct {
	elems, firsts *flow.InterfaceCache
}

func newIfaceCache() ifaceCache {
	return ifaceCache{elems: flow.NewInterfaceCache(appendIfaceElem), firsts: flow.NewInterfaceCache(appendFirstIface)}
}

// appendFirst appends network.interface.name and network.io.direction for
// it, the flow's first interface.
func (c ifaceCache) appendFirst(b []byte, it *flow.Interface) []byte {
	return append(b, c.firsts.Get(it)...)
}

// appendList appends flowlens.interfaces: an array of key-value lists
// {name, ifindex, netns, direction}, the first-seen interface first.
// Two passes: the sizes, then the bytes (a slot read in the first pass may
// have been taken by another interface of the same flow since: get again).
func (c ifaceCache) appendList(b []byte, its []flow.Interface) []byte {
	if len(its) == 0 {
		return b
	}
	n := 0
	for i := range its {
		n += len(c.elems.Get(&its[i]))
	}
	b = appendKey(b, fLRAttributes, kFlowlensInterfaces, sizeField(n))
	b = appendTag(b, fAnyArray, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	for i := range its {
		b = append(b, c.elems.Get(&its[i])...)
	}
	return b
}

// appendIfaceElem appends it as an element of ArrayValue.values.
func appendIfaceElem(b []byte, it *flow.Interface) []byte {
	b, elem := openMessage(b, fArrayValues, 1)
	b, list := openMessage(b, fAnyKVList, 1)
	b = kvString(b, fKVListValues, kName, it.Name)
	b = kvInt(b, fKVListValues, kIfindex, int64(it.Ifindex))
	b = kvString(b, fKVListValues, kNetns, it.Netns)
	b = kvText(b, fKVListValues, kDirection, it.Direction.String())
	b = closeMessage(b, list, 1)
	return closeMessage(b, elem, 1)
}

// appendFirstIface appends the attributes a flow's first interface gives
// it: its name, and its direction unless both.
func appendFirstIface(b []byte, it *flow.Interface) []byte {
	b = kvString(b, fLRAttributes, kNetworkInterfaceName, it.Name)
	switch it.Direction {
	case flow.DirIngress:
		b = kvText(b, fLRAttributes, kNetworkIODirection, "receive")
	case flow.DirEgress:
		b = kvText(b, fLRAttributes, kNetworkIODirection, "transmit")
	}
	return b
}
