// Package ipfixsize holds the bounds of an IPFIX message's size, which two
// programs check: the agent's configuration (--ipfix-max-message-size,
// validated at start-up, also when the operator renders it) and the IPFIX
// exporter. It lives apart from both so that the configuration, which the
// operator links, does not pull in the exporter: the operator links no
// exporter (make check-layers).
package ipfixsize

import "fmt"

// Bounds of a message. Min leaves room for the largest data record (every
// group, every variable field at its bound) after the message and set
// headers (internal/agent/exporter/ipfix's tests check it); MaxUDP is the
// largest UDP payload over IPv4; Max is the largest an IPFIX header's
// 16-bit length can say.
const (
	Min    = 1024
	Max    = 65535
	MaxUDP = 65507
)

// Check checks a message size n for a transport, "udp" (or "") or "tcp":
// 0 (the transport's default) or from Min to the transport's bound. Its
// error says the range, for the caller to name the setting.
func Check(n int, transport string) error {
	hi := MaxUDP
	if transport == "" {
		transport = "udp"
	}
	if transport == "tcp" {
		hi = Max
	}
	if n != 0 && (n < Min || n > hi) {
		return fmt.Errorf("must be 0 (the default) or from %d to %d over %s", Min, hi, transport)
	}
	return nil
}
