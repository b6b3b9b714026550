package drops

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// Names resolves kernel enum values to names, from the running kernel's BTF:
// drop reasons (enum skb_drop_reason: "NO_SOCKET", "NETFILTER_DROP", ...) and
// TCP states ("ESTABLISHED", ...). The values differ between kernel versions,
// so no table is compiled in.
type Names struct {
	dropReasons map[uint32]string
	tcpStates   map[uint8]string
}

// loadNames reads the names from the running kernel's BTF.
func loadNames(kernel *btf.Spec) *Names {
	n := &Names{dropReasons: map[uint32]string{}, tcpStates: map[uint8]string{}}
	var e *btf.Enum
	if err := kernel.TypeByName("skb_drop_reason", &e); err == nil {
		for _, v := range e.Values {
			name := strings.TrimPrefix(strings.TrimPrefix(v.Name, "SKB_DROP_REASON_"), "SKB_")
			n.dropReasons[uint32(v.Value)] = name
		}
	}
	// The TCP states are an anonymous enum: find the one holding
	// TCP_ESTABLISHED, by its ID in the raw BTF (tcpStatesEnum), else
	// by decoding the types in order.
	if en := tcpStatesEnum(kernel); en != nil {
		for _, v := range en.Values {
			n.tcpStates[uint8(v.Value)] = strings.TrimPrefix(v.Name, "TCP_")
		}
		return n
	}
	for typ, err := range kernel.All() {
		if err != nil {
			break
		}
		en, ok := typ.(*btf.Enum)
		if !ok || en.Name != "" || !hasValue(en, "TCP_ESTABLISHED") {
			continue
		}
		for _, v := range en.Values {
			n.tcpStates[uint8(v.Value)] = strings.TrimPrefix(v.Name, "TCP_")
		}
		break
	}
	return n
}

func hasValue(e *btf.Enum, name string) bool {
	for _, v := range e.Values {
		if v.Name == name {
			return true
		}
	}
	return false
}

func dropReasonValue(kernel *btf.Spec, name string, def uint32) uint32 {
	var e *btf.Enum
	if err := kernel.TypeByName("skb_drop_reason", &e); err != nil {
		return def
	}
	for _, v := range e.Values {
		if v.Name == name {
			return uint32(v.Value)
		}
	}
	return def
}

// DropReason returns the name of a drop reason, or REASON_<n> if unknown.
func (n *Names) DropReason(v uint32) string {
	if s, ok := n.dropReasons[v]; ok {
		return s
	}
	return fmt.Sprintf("REASON_%d", v)
}

// TCPState returns the name of a TCP state ("" for 0: not a TCP socket).
func (n *Names) TCPState(v uint8) string {
	if v == 0 {
		return ""
	}
	if s, ok := n.tcpStates[v]; ok {
		return s
	}
	return fmt.Sprintf("STATE_%d", v)
}
