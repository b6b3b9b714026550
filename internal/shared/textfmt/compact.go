package textfmt

import (
	"strconv"
	"time"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// AppendCompact appends f as one line (no newline), only what it carries:
//
//	07:08:58.123 node-a shop/web-1(Deployment/web) 10.0.0.1:40000 -> data/db-0 10.0.0.2:5432 tcp 1.5KiB 3p flags=SYN|ACK drops=1p/60B:NETFILTER_DROP rtt=3ms
//	07:08:59.001 node-a shop/web-1(Deployment/web) 10.0.0.1:40002 -> data/db-0 10.0.0.2:5433 tcp 600B 10p flags=SYN|RST tcp=client refused=10 syn_retrans=2
//
// A flow seen in a tunnel ends with tunnel=vxlan:192.168.0.1>192.168.0.2/vni=42,
// and a tunnel flow's own record (--overlay-outer-flows) with overlay_outer.
// The Kubernetes context of an end comes before its address when the flow
// is enriched.
func AppendCompact(b []byte, f *enriched.Flow) []byte {
	b = append(b, f.EndTime.Local().Format("15:04:05.000")...)
	b = append(b, ' ')
	b = append(b, dash(Safe(f.NodeName))...)
	icmp := f.Proto == 1 || f.Proto == 58
	b = append(b, ' ')
	if f.Enriched {
		b = append(b, K8sName(&f.Src)...)
		b = append(b, ' ')
	}
	b = append(b, Endpoint(f.SrcAddr, f.SrcPort, icmp)...)
	b = append(b, " -> "...)
	if f.Enriched {
		b = append(b, K8sName(&f.Dst)...)
		b = append(b, ' ')
	}
	b = append(b, Endpoint(f.DstAddr, f.DstPort, icmp)...)
	b = append(b, ' ')
	b = append(b, ProtoName(f.Proto)...)
	if icmp {
		b = append(b, ":"+strconv.FormatUint(uint64(f.IcmpType), 10)+"/"+strconv.FormatUint(uint64(f.IcmpCode), 10)...)
	}
	b = append(b, ' ')
	b = append(b, HumanBytes(f.Bytes)...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, f.Packets, 10)
	b = append(b, 'p')
	if f.Proto == 6 && f.TCPFlags != 0 {
		b = append(b, " flags="+TCPFlagNames(f.TCPFlags)...)
	}
	if f.DropPackets > 0 || f.DropBytes > 0 {
		b = append(b, " drops="+strconv.FormatUint(f.DropPackets, 10)+"p/"+HumanBytes(f.DropBytes)...)
		if f.DropCause != "" {
			b = append(b, ":"+Safe(f.DropCause)...)
		}
	}
	if f.RTT > 0 {
		b = append(b, " rtt="+f.RTT.Round(time.Microsecond).String()...)
	}
	b = compactTCP(b, f)
	if f.DNSName != "" {
		b = append(b, " dns="+Safe(f.DNSName)...)
	}
	if f.DNSAnswered() {
		b = append(b, " rcode="+flow.DNSRcodeName(f.DNSRcode)...)
	}
	if t := &f.Tunnel; t.TunnelType != flow.TunnelNone {
		b = append(b, " tunnel="+t.TunnelType.String()+":"+t.TunnelSrcAddr.String()+">"+t.TunnelDstAddr.String()...)
		if t.TunnelType != flow.TunnelIPIP {
			b = append(b, "/vni="+strconv.FormatUint(uint64(t.TunnelVNI), 10)...)
		}
		if t.OverlayOuter {
			// The tunnel flow's own record: its packets are its inner flows'.
			b = append(b, " overlay_outer"...)
		}
	}
	return b
}

// compactTCP appends the tcp feature's fields a flow carries: the source's
// role, its connects by outcome (the names of observe's --tcp-result),
// then the counts and the handshake latency that are not 0.
func compactTCP(b []byte, f *enriched.Flow) []byte {
	if !f.HasTCP() {
		return b
	}
	b = append(b, " tcp="...)
	b = append(b, dash(f.TCPRole.String())...)
	for _, c := range []struct {
		name string
		n    uint64
	}{
		{"established", f.TCPEstablished()}, {"refused", f.TCPRefused}, {"timeout", f.TCPTimeouts},
		{"syn_retrans", f.TCPSynRetrans}, {"resets", f.TCPResets}, {"zero_windows", f.TCPZeroWindows},
	} {
		if c.n > 0 {
			b = append(b, ' ')
			b = append(b, c.name...)
			b = append(b, '=')
			b = strconv.AppendUint(b, c.n, 10)
		}
	}
	if f.TCPHandshake > 0 {
		b = append(b, " handshake="+f.TCPHandshake.Round(time.Microsecond).String()...)
	}
	return b
}
