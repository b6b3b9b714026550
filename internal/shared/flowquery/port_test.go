package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// port matches either end, from_port the source, to_port the destination.
func TestPort(t *testing.T) {
	f := base()
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{Port: []uint32{40000}}, f, true},
		{&flowv1.FlowFilter{Port: []uint32{1, 5432}}, f, true},
		{&flowv1.FlowFilter{Port: []uint32{1}}, f, false},
		{&flowv1.FlowFilter{FromPort: []uint32{5432}}, f, false},
		{&flowv1.FlowFilter{FromPort: []uint32{40000}}, f, true},
		{&flowv1.FlowFilter{ToPort: []uint32{5432}}, f, true},
		{&flowv1.FlowFilter{ToPort: []uint32{40000}}, f, false},
	})
	checkErrors(t, map[string]*flowv1.FlowFilter{
		`filters[1].port: 65536 is not a port (0 to 65535)`:      {Port: []uint32{65536}},
		`filters[1].from_port: 70000 is not a port (0 to 65535)`: {FromPort: []uint32{1, 70000}},
		`filters[1].to_port: 65536 is not a port (0 to 65535)`:   {ToPort: []uint32{65536}},
	})
}

// A long list (a bitmap) matches as a short one (a scan).
func TestPortSet(t *testing.T) {
	long := []uint32{0, 1, 63, 64, 65535}
	for p := uint32(1000); len(long) < 40; p += 7 {
		long = append(long, p)
	}
	short, big := portSet(long[:5]), portSet(long)
	for p := range 65536 {
		if want := in(long, uint32(p)); big(uint16(p)) != want {
			t.Fatalf("bitmap: port %d: %v, want %v", p, !want, want)
		}
		if want := in(long[:5], uint32(p)); short(uint16(p)) != want {
			t.Fatalf("scan: port %d: %v, want %v", p, !want, want)
		}
	}
}
