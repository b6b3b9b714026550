package flow_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/pkg/flow"
)

// jsonKeys returns the top-level keys of a JSON object, in order.
func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		keys = append(keys, k.(string))
	}
	return keys
}

// Each group's Sample sets every field of its own embedded struct, and
// nothing else of the Record.
func TestGroupSampleSetsItsGroup(t *testing.T) {
	names := map[string]bool{}
	for _, g := range flow.Groups {
		if names[g.Name] || g.Name == "" {
			t.Errorf("group name %q empty or repeated", g.Name)
		}
		names[g.Name] = true
		var r flow.Record
		g.Sample(&r)
		rv := reflect.ValueOf(r)
		set := 0
		for i := range rv.NumField() {
			f, sf := rv.Field(i), rv.Type().Field(i)
			if f.IsZero() {
				continue
			}
			if !sf.Anonymous || !strings.HasSuffix(sf.Name, "Fields") {
				t.Errorf("%s: Sample sets %s, not a group", g.Name, sf.Name)
				continue
			}
			set++
			for j := range f.NumField() {
				if f.Field(j).IsZero() {
					t.Errorf("%s: Sample leaves %s.%s zero", g.Name, sf.Name, f.Type().Field(j).Name)
				}
			}
		}
		if set != 1 {
			t.Errorf("%s: Sample sets %d groups, want 1", g.Name, set)
		}
		// Has sees each field of the group alone.
		for i := range rv.NumField() {
			f := rv.Field(i)
			if f.IsZero() {
				continue
			}
			for j := range f.NumField() {
				var one flow.Record
				reflect.ValueOf(&one).Elem().Field(i).Field(j).Set(f.Field(j))
				if !g.Has(&one) {
					t.Errorf("%s: Has misses %s", g.Name, f.Type().Field(j).Name)
				}
			}
		}
		if g.Has(&flow.Record{}) {
			t.Errorf("%s: Has on a zero record", g.Name)
		}
	}
	// Every group of the Record is listed once.
	groups := 0
	for _, sf := range reflect.VisibleFields(reflect.TypeFor[flow.Record]()) {
		if sf.Anonymous {
			groups++
		}
	}
	if groups != len(flow.Groups) {
		t.Errorf("Record embeds %d groups, Groups lists %d", groups, len(flow.Groups))
	}
	if g, ok := flow.GroupNamed("dns"); !ok || g.Name != "dns" {
		t.Errorf(`GroupNamed("dns") = %q, %v`, g.Name, ok)
	}
	if _, ok := flow.GroupNamed("nope"); ok {
		t.Error(`GroupNamed("nope") found a group`)
	}
}

// Each group's JSON keys are its JSONFields, in order, and a group writes
// no other key; the groups follow each other in Groups' order.
func TestGroupJSONFields(t *testing.T) {
	base := sampleRecord()
	base.DropsFields, base.RTTFields, base.RetransmitsFields = flow.DropsFields{}, flow.RTTFields{}, flow.RetransmitsFields{}
	core := jsonKeys(t, base.AppendJSON(nil))
	all, want := base, []string(nil)
	for _, g := range flow.Groups {
		g.Sample(&all)
		want = append(want, g.JSONFields...)
	}
	var got []string
	for _, k := range jsonKeys(t, all.AppendJSON(nil)) {
		if slices.Contains(want, k) {
			got = append(got, k)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("groups' JSON keys %v, want them in Groups' order %v", got, want)
	}
	for _, g := range flow.Groups {
		r := base
		g.Sample(&r)
		keys := jsonKeys(t, r.AppendJSON(nil))
		var own []string
		for _, k := range keys {
			switch {
			case slices.Contains(g.JSONFields, k):
				own = append(own, k)
			case !slices.Contains(core, k):
				t.Errorf("%s: key %s is neither the core's nor the group's", g.Name, k)
			}
		}
		if !slices.Equal(own, g.JSONFields) {
			t.Errorf("%s: JSON keys %v, want %v", g.Name, own, g.JSONFields)
		}
	}
}
