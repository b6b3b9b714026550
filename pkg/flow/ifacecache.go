package flow

// interfaceCacheSlots is the size of an InterfaceCache: a node's flows
// cross a few interfaces each (a pod's veth, the uplink), a few hundred in
// all.
const interfaceCacheSlots = 256

// InterfaceCache remembers one encoding of each interface it is asked for
// (an exporter's wire form of it): a node's flows cross the same few
// interfaces over and over, so each is encoded once, then copied. It is
// direct-mapped, one slot per hash of the interface, the last one met
// winning (no eviction policy to run), and a slot is used only when it
// holds an interface equal to the one asked for, so a collision or a
// renamed interface costs an encoding, never a wrong byte. Not safe for
// concurrent use.
type InterfaceCache struct {
	encode func(b []byte, it *Interface) []byte
	slots  [interfaceCacheSlots]interfaceSlot
}

type interfaceSlot struct {
	it    Interface
	valid bool
	enc   []byte
}

// NewInterfaceCache returns a cache of encode's encodings: encode appends
// it's to b.
func NewInterfaceCache(encode func(b []byte, it *Interface) []byte) *InterfaceCache {
	return &InterfaceCache{encode: encode}
}

// Get returns it's encoding, valid until the next Get.
func (c *InterfaceCache) Get(it *Interface) []byte {
	h := (uint64(it.Ifindex) ^ it.NetnsID<<8 ^ uint64(it.Direction)<<48) * 0x9e3779b97f4a7c15 // Fibonacci hashing
	s := &c.slots[h>>56]
	if !s.valid || s.it != *it {
		s.it, s.valid = *it, true
		s.enc = c.encode(s.enc[:0], it)
	}
	return s.enc
}
