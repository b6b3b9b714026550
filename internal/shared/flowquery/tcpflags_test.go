package flowquery

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// A TCP flow with all the bits of one of the masks; never another protocol.
func TestTCPFlags(t *testing.T) {
	f, udp := base(), base()
	udp.Proto = 17
	checkMatches(t, []matchCase{
		{&flowv1.FlowFilter{TcpFlags: []uint32{0x12}}, f, true},
		{&flowv1.FlowFilter{TcpFlags: []uint32{0x04, 0x01}}, f, false},
		{&flowv1.FlowFilter{TcpFlags: []uint32{0x04, 0x02}}, f, true},
		{&flowv1.FlowFilter{TcpFlags: []uint32{0x16}}, f, false},
		{&flowv1.FlowFilter{TcpFlags: []uint32{0x02}}, udp, false},
	})
	checkErrors(t, map[string]*flowv1.FlowFilter{
		`filters[1].tcp_flags: 0x0 is not a flag mask (1 to 0xffff)`:     {TcpFlags: []uint32{0}},
		`filters[1].tcp_flags: 0x10000 is not a flag mask (1 to 0xffff)`: {TcpFlags: []uint32{2, 0x10000}},
	})
}
