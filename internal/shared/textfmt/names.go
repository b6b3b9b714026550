package textfmt

import (
	"errors"
	"strconv"
	"strings"
)

// Protocols are the IP protocols known by name, for flags and output.
var Protocols = map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "icmpv6": 58, "sctp": 132}

// ProtoName is p's name ("tcp"), or its number.
func ProtoName(p uint8) string {
	for n, v := range Protocols {
		if v == p {
			return n
		}
	}
	return strconv.FormatUint(uint64(p), 10)
}

// ParseProtocol is ProtoName's inverse for a flag's value: a name of
// Protocols, in any case, or a number from 0 to 255. Its error says what
// is accepted; the caller names the flag and the value (cliconf.ItemError).
func ParseProtocol(s string) (uint8, error) {
	if n, ok := Protocols[strings.ToLower(s)]; ok {
		return n, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, errProtocol
	}
	return uint8(n), nil
}

var errProtocol = errors.New("must be tcp, udp, icmp, icmpv6, sctp, gre, esp or a protocol number from 0 to 255")

// TCPFlags are the names of the bits of a flow's tcp_flags: the header's
// flags and the datapath's markers (pkg/flow: TCPFlagSynAck...), in bit
// order.
var TCPFlags = []struct {
	Name string
	Bit  uint16
}{
	{"FIN", 0x01}, {"SYN", 0x02}, {"RST", 0x04}, {"PSH", 0x08}, {"ACK", 0x10}, {"URG", 0x20}, {"ECE", 0x40}, {"CWR", 0x80},
	{"SYN_ACK", 0x100}, {"FIN_ACK", 0x200}, {"RST_ACK", 0x400},
}

// TCPFlagNames is flags as names joined with "|" ("SYN|ACK"), "" for none.
func TCPFlagNames(flags uint16) string {
	var parts []string
	for _, f := range TCPFlags {
		if flags&f.Bit != 0 {
			parts = append(parts, f.Name)
		}
	}
	return strings.Join(parts, "|")
}
