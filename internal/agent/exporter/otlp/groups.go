package otlp

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/flowlens/flowlens/pkg/flow"
)

// group is the OTLP side of one feature's group of Record fields (see
// pkg/flow's Groups): the attributes it adds to a flow's LogRecord, in the
// file named after the feature (dns.go ...), with its keys.
type group struct {
	name string // the feature's name
	// attributes appends the group's attributes of r (each decides when
	// it has something to say).
	attributes func(e *encoder, b []byte, r *flow.Record) []byte
}

// GroupAttributes returns the keys of the attributes feature name's group
// adds for r, in order, and false when no group of that name is encoded:
// what a conformance test checks for each feature, with a record whose
// group has every field set (flow.Group.Sample).
func GroupAttributes(name string, r *flow.Record) ([]string, bool) {
	for _, g := range groups {
		if g.name != name {
			continue
		}
		return attributeKeys(g.attributes(newEncoder("node", ""), nil, r)), true
	}
	return nil, false
}

// attributeKeys returns the keys of the LogRecord.attributes elements b
// holds (KeyValue{key, value} each), in order.
func attributeKeys(b []byte) (keys []string) {
	for len(b) > 0 {
		_, _, n := protowire.ConsumeTag(b)
		kv, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return keys // not reached: the encoder wrote b
		}
		_, _, k := protowire.ConsumeTag(kv)
		key, _ := protowire.ConsumeString(kv[k:])
		keys = append(keys, key)
		b = b[n+m:]
	}
	return keys
}
