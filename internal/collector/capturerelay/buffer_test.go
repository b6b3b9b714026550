package capturerelay

import (
	"testing"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
)

// The buffer for a slow caller is bounded in bytes as well as in packets:
// 1 MiB packets (a large snaplen) stop at bufferBytes, the rest counted
// as relay losses, and taking packets makes room again.
func TestRelayBufferBoundedInBytes(t *testing.T) {
	c := &capture{packets: make(chan *flowv1.CapturedPacket, packetBuffer)}
	const size = 1 << 20
	for range 20 {
		c.offer(&flowv1.CapturedPacket{Data: make([]byte, size)})
	}
	if got, want := len(c.packets), bufferBytes/size; got != want {
		t.Fatalf("%d packets buffered, want %d", got, want)
	}
	if got := c.relay.Load(); got != 20-bufferBytes/size {
		t.Errorf("relay losses %d, want %d", got, 20-bufferBytes/size)
	}
	c.took(<-c.packets)
	c.offer(&flowv1.CapturedPacket{Data: make([]byte, size)})
	if got := len(c.packets); got != bufferBytes/size {
		t.Errorf("after taking one: %d buffered, want %d", got, bufferBytes/size)
	}
	// Small packets stop at packetBuffer.
	s := &capture{packets: make(chan *flowv1.CapturedPacket, packetBuffer)}
	for range packetBuffer + 5 {
		s.offer(&flowv1.CapturedPacket{Data: make([]byte, 64)})
	}
	if len(s.packets) != packetBuffer || s.relay.Load() != 5 {
		t.Errorf("%d buffered, %d lost; want %d and 5", len(s.packets), s.relay.Load(), packetBuffer)
	}
}
