package ipfix

import (
	"encoding/binary"

	"github.com/flowlens/flowlens/pkg/flow"
)

// block is an optional part of a data record, sent only by the flows that
// have it (its variant bit picks the templates with it): its template
// fields, and beside it in the file of the feature it carries (xlat.go,
// dns.go, tls.go; enriched.go for the drops, rtt and retransmits groups,
// which share one block with flowlens's own extra fields) its data and
// the length of its variable fields. groupgen lists every block value of
// the package in blocks (zz_generated.groups.go), in the order of their
// bits, and writes their calls in recordVariant, recordLen and appendRecord
// (record.go's groupgen regions) by the names its own give them: for
// xBlock, its has function,
// appendX(b, r[, v6]) and, when it has variable fields, xVarLen(r). They
// are called by name, not through blocks: an indirect call per block and
// flow cost a fifth of the encoding.
type block struct {
	bit int // its variant bit: a constant, 2, 4, 8 ... in the blocks' order
	// has reports whether r has the block: a function's name (groupgen
	// calls it by name), not a function literal.
	has func(r *flow.Record) bool
	// fields are the block's template fields (v6: of an IPv6 flow).
	fields func(v6 bool) []field
	// maxVarLen bounds the content of its variable-length fields.
	maxVarLen int
}

// group is the IPFIX side of one feature's group of Record fields (see
// pkg/flow's Groups): the block that carries it and, when it shares the
// block, the block's elements that are its fields.
type group struct {
	name     string
	block    *block
	elements []uint16 // nil: every element of the block
}

// GroupElements returns the Information Elements r's data record carries
// for feature name's group, as its template lists them (id, with the
// enterprise bit for flowlens's own), and false when no group of that name
// is exported: what a conformance test checks for each feature, with a
// record whose group has every field set (flow.Group.Sample).
func GroupElements(name string, r *flow.Record) ([]uint16, bool) {
	for _, g := range groups {
		if g.name != name {
			continue
		}
		if !g.block.has(r) {
			return nil, true
		}
		var ids []uint16
		for _, f := range g.block.fields(!r.SrcAddr.Is4()) {
			if g.elements == nil || contains(g.elements, f.id) {
				id := f.id
				if f.pen {
					id |= enterpriseBit
				}
				ids = append(ids, id)
			}
		}
		return ids, true
	}
	return nil, false
}

func contains(ids []uint16, id uint16) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// appendNanos appends a duration in nanoseconds (negative: 0).
func appendNanos(b []byte, ns int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(max(ns, 0)))
}
