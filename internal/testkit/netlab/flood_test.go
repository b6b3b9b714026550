package netlab

import (
	"net"
	"testing"
)

// Every frame a Flooder's Send reports taken crosses the veth, through the
// qdisc or past it: the peer's device counts exactly as many.
func TestFlooderFramesCrossExactly(t *testing.T) {
	Require(t)
	a, b := pair(t, DefaultDir)
	other := net.HardwareAddr{0x02, 0, 0, 0, 0x77, 0x77} // not b0's: b drops them at once
	for _, bypass := range []bool{false, true} {
		f, err := NewFlooder(a, "a0", nil, other, net.ParseIP("10.9.0.1"), net.ParseIP("10.9.0.2"), bypass)
		if err != nil {
			t.Fatal(err)
		}
		f.Cycle = 100
		rx0, _, _, _ := LinkStats(b, "b0")
		sent := 0
		for sent < 3*FloodBatch {
			n, err := f.Send(FloodBatch)
			if err != nil {
				t.Fatal(err)
			}
			sent += n
		}
		f.Close()
		rx1, _, _, _ := LinkStats(b, "b0")
		if got := int(rx1 - rx0); got != sent {
			t.Errorf("bypass=%v: sent %d frames, b0 received %d", bypass, sent, got)
		}
		if f.Next != uint64(sent) {
			t.Errorf("bypass=%v: Next %d after %d frames", bypass, f.Next, sent)
		}
	}
}
