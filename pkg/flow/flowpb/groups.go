package flowpb

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// group is the protobuf side of one feature's group of Record fields (see
// pkg/flow's Groups): its message field of Flow, named after the feature
// and set only when the record carries the group (some field not zero),
// its conversions both ways and its validation. Each lives in the file
// named after the feature (dns.go ...), with the group's wire encoding,
// which appends the message field as proto.Marshal of toProto's message
// does (nothing for an unset group).
type group struct {
	name string           // the feature's name, also the Flow field's name
	num  protowire.Number // the Flow field
	// toProto sets dst's group message from r, or clears it; a message it
	// clears goes to spare (when not nil) and comes back from there, so
	// reused messages do not allocate when a flow's groups come and go.
	toProto func(dst, spare *flowv1.Flow, r *flow.Record)
	// toRecord fills r's group from a validated f.
	toRecord func(r *flow.Record, f *flowv1.Flow)
	// validate checks what Validate checks, for the group's message.
	validate func(f *flowv1.Flow) error
}

// GroupField returns the field of Flow that carries feature name's group
// (a message named after the feature), and false when no group of that
// name is encoded: what a conformance test checks for each feature.
func GroupField(name string) (protoreflect.FieldDescriptor, bool) {
	for _, g := range groups {
		if g.name == name {
			fd := (&flowv1.Flow{}).ProtoReflect().Descriptor().Fields().ByNumber(g.num)
			return fd, fd != nil
		}
	}
	return nil, false
}

// groupMessage returns the message of a group to fill when present (dst's,
// else spare's, else a new one), or clears dst's when not, parking it in
// spare; field picks the group's field of a Flow.
func groupMessage[M any](dst, spare *flowv1.Flow, field func(*flowv1.Flow) **M, present bool) *M {
	p := field(dst)
	if !present {
		if *p != nil && spare != nil {
			*field(spare) = *p
		}
		*p = nil
		return nil
	}
	if *p == nil {
		if spare != nil && *field(spare) != nil {
			*p, *field(spare) = *field(spare), nil
		} else {
			*p = new(M)
		}
	}
	return *p
}

// checkMax returns an invalid error naming a field above its Record type.
func checkMax(name string, v, max uint32) error {
	if v > max {
		return invalid("%s = %d, max %d", name, v, max)
	}
	return nil
}

// checkAddr returns an invalid error naming an address field that is not
// 0, 4 or 16 bytes long.
func checkAddr(name string, b []byte) error {
	if n := len(b); n != 0 && n != 4 && n != 16 {
		return invalid("%s has %d bytes, want 4 or 16", name, n)
	}
	return nil
}

// firstErr returns the first error that is not nil (the checks of one
// group, in field order).
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
