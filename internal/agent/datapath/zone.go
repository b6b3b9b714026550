package datapath

// LoopbackIfindex is the ifindex of every network namespace's loopback
// device (the kernel's LOOPBACK_IFINDEX, bpf/zone.h).
const LoopbackIfindex = 1

// LoopbackZone is FlowKey.Zone for the packets of the loopback device of
// the namespace whose cookie is netns: the cookie folded to 1..255
// (cookie mod 255, 255 for a multiple of 255; 0 for cookie 0), as bpf/zone.h
// computes it. Other devices' packets have zone 0. Tests and tools use it
// to build the key the datapath gives loopback traffic.
func LoopbackZone(netns uint64) uint8 {
	if netns == 0 {
		return 0
	}
	if z := netns % 255; z != 0 {
		return uint8(z)
	}
	return 255
}
