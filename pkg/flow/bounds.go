package flow

// Bounds of a Record's strings and lists: what a legitimate agent can send,
// each written once. The agent never exceeds them; the collector refuses a
// flow that does (pkg/flow/flowpb's Bounds, checked on the wire before a
// message is decoded), so that a hostile sender cannot make it hold large
// strings or lists.
const (
	// MaxInterfaces is how many interfaces the datapath records per flow
	// (bpf/types.h MAX_IFACES); more set IfacesOverflow instead.
	MaxInterfaces = 6
	// MaxInterfaceName is the longest interface name: IFNAMSIZ (16) less
	// its NUL.
	MaxInterfaceName = 15
	// MaxNetnsName is the longest network namespace name: a file name
	// under --netns-dir (NAME_MAX), or "host".
	MaxNetnsName = 255
	// MaxNodeName is the longest node name Kubernetes accepts (a DNS
	// subdomain, RFC 1123).
	MaxNodeName = 253
	// MaxDNSName is the longest dns_name: a DNS name's presentation format
	// (253). The agent's, from DNSMaxWireName wire bytes, is at most 252
	// even when every byte is escaped ("\DDD").
	MaxDNSName = 253
	// MaxDropCause is the longest drop cause: the kernel's drop reason
	// names (enum skb_drop_reason without its prefix) are under 64 bytes.
	MaxDropCause = 64
	// MaxDropTCPState is the longest TCP state name ("ESTABLISHED",
	// "NEW_SYN_RECV"...).
	MaxDropTCPState = 32
)
