package flowpb_test

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/flow/flowpb"
)

// Every group of the Record is a message field of Flow named after its
// feature: a sample with every field of the group set fills every field of
// the message, the wire encoder writes what proto.Marshal does, and the
// group comes back whole; a record without the group leaves the field
// unset.
func TestGroupFields(t *testing.T) {
	for _, g := range flow.Groups {
		fd, ok := flowpb.GroupField(g.Name)
		if !ok {
			t.Errorf("%s: no Flow field", g.Name)
			continue
		}
		if string(fd.Name()) != g.Name || fd.Message() == nil {
			t.Errorf("%s: carried by Flow.%s (%v), want a message named after the feature", g.Name, fd.Name(), fd.Kind())
		}
		var r flow.Record
		g.Sample(&r)
		var f flowv1.Flow
		flowpb.ToProto(&f, &r, "node", nil)
		m := f.ProtoReflect().Get(fd).Message()
		n := 0
		m.Range(func(protoreflect.FieldDescriptor, protoreflect.Value) bool { n++; return true })
		if n != fd.Message().Fields().Len() {
			t.Errorf("%s: the sample sets %d of the message's %d fields", g.Name, n, fd.Message().Fields().Len())
		}
		want, err := proto.Marshal(&flowv1.FlowBatch{Flows: []*flowv1.Flow{&f}})
		if err != nil {
			t.Fatal(err)
		}
		if got := flowpb.AppendFlow(nil, &r, "node", nil); !bytes.Equal(got, want) {
			t.Errorf("%s: wire\n got %x\nwant %x", g.Name, got, want)
		}
		var back flow.Record
		if err := flowpb.ToRecord(&back, &f); err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		rv, bv := reflect.ValueOf(r), reflect.ValueOf(back)
		for i := range rv.NumField() {
			if rv.Type().Field(i).Anonymous && !reflect.DeepEqual(rv.Field(i).Interface(), bv.Field(i).Interface()) {
				t.Errorf("%s: came back as %+v, want %+v", g.Name, bv.Field(i), rv.Field(i))
			}
		}
		flowpb.ToProto(&f, &flow.Record{}, "node", nil)
		if f.ProtoReflect().Has(fd) {
			t.Errorf("%s: a record without the group sets Flow.%s", g.Name, fd.Name())
		}
	}
	if _, ok := flowpb.GroupField("nope"); ok {
		t.Error(`GroupField("nope") found a field`)
	}
}

// The Encoder keeps the group messages of a flow that loses its groups for
// the next flow that has them: batches whose flows alternate allocate
// nothing once warm.
func TestEncodeGroupsComeAndGo(t *testing.T) {
	var full flow.Record
	for _, g := range flow.Groups {
		g.Sample(&full)
	}
	a, b := []flow.Record{full, {}}, []flow.Record{{}, full}
	enc := flowpb.NewEncoder(flowpb.Identity{NodeName: "node"})
	enc.Encode(a)
	enc.Encode(b)
	if n := testing.AllocsPerRun(20, func() { enc.Encode(a); enc.Encode(b) }); n != 0 {
		t.Errorf("%v allocations per two batches", n)
	}
	msgs := enc.Encode(a)
	if msgs[0].Dns.GetDnsName() != full.DNSName || msgs[1].Dns != nil {
		t.Errorf("groups not moved: %v / %v", msgs[0].Dns, msgs[1].Dns)
	}
}
