package main

import (
	"net/netip"

	"github.com/flowlens/flowlens/pkg/flow"
)

// filter keeps flows matching every given criterion (any of its values):
// address (source or destination in a prefix), port (source or
// destination), protocol.
type filter struct {
	prefixes []netip.Prefix
	ports    map[uint32]bool
	protos   map[uint32]bool
}

func (f *filter) match(r *flow.Record) bool {
	if f.protos != nil && !f.protos[uint32(r.Proto)] {
		return false
	}
	if f.ports != nil && !f.ports[uint32(r.SrcPort)] && !f.ports[uint32(r.DstPort)] {
		return false
	}
	if f.prefixes != nil {
		src, dst := r.SrcAddr.Unmap(), r.DstAddr.Unmap()
		for _, p := range f.prefixes {
			if p.Contains(src) || p.Contains(dst) {
				return true
			}
		}
		return false
	}
	return true
}

// protoNames maps --proto names to IP protocol numbers.
var protoNames = map[string]uint32{"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "icmpv6": 58, "sctp": 132}
