package packet_test

import (
	"fmt"

	"github.com/flowlens/flowlens/internal/testkit/packet"
)

// Internal/exporter/grpc's frame: Ethernet (zero MAC addresses), IPv4 UDP
// 10.9.0.1:sport → 10.9.0.2:5353 with n bytes of zero payload.
func ExampleCat() {
	sport, n := uint16(1000), 4
	frame := packet.Cat(
		packet.Eth(packet.EtherTypeIPv4, packet.MACs(packet.MAC{}, packet.MAC{})),
		packet.IPv4(packet.ProtoUDP, "10.9.0.1", "10.9.0.2", packet.UDPLen+n),
		packet.UDP(sport, 5353, n))
	fmt.Println(len(frame))
	fmt.Printf("%x\n%x\n%x\n", frame[:14], frame[14:34], frame[34:])
	// Output:
	// 46
	// 0000000000000000000000000800
	// 4500002000000000401100000a0900010a090002
	// 03e814e9000c000000000000
}
