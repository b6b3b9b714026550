// Package dns is the "dns" feature: DNS messages per flow, read by the TC
// programs (bpf/dns.h, inside them: no hook of its own) from packets to or
// from the DNS ports: transaction id, flags and response code, the
// question's name, and the latency from a query to its answer. docs/dns.md.
package dns

import (
	"time"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/feature/dns/dnsopt"
	"github.com/flowlens/flowlens/pkg/flow"
)

// pendingQueries bounds the queries awaiting an answer at once, per node
// (LRU: the oldest are forgotten first, and then reported as timeouts when
// their flow is evicted after Timeout).
const pendingQueries = 16384

// Feature records DNS messages.
type Feature struct {
	// Ports are the DNS ports (--dns-ports, 1 to 4); none:
	// dnsopt.DefaultPort.
	Ports []uint16
	// Timeout is how long a query may go unanswered before its flow's
	// record says DNSTimeout (--dns-timeout); 0: dnsopt.DefaultTimeout.
	Timeout time.Duration
}

// New returns the feature with the default port and timeout.
func New() *Feature { return &Feature{} }

// name is the feature's --features value, which its options know too.
const name = dnsopt.Name

func (*Feature) Name() string { return name }

func (*Feature) DocPage() string { return "docs/dns.md" }

func (*Feature) Config() config.Feature {
	return config.Feature{Brief: "DNS ids, codes, names, latency", Options: dnsopt.Rows, Validate: dnsopt.Validate}
}

func (*Feature) Doc() string {
	return "DNS per flow: id, flags, response code, query name, query-to-answer latency, timeouts"
}

// Plan switches the reading on inside the TC programs, on the ports.
func (f *Feature) Plan(*btf.Spec) datapath.Plan {
	ports := [4]uint16{dnsopt.DefaultPort}
	if len(f.Ports) > 0 {
		ports = [4]uint16{}
		copy(ports[:], f.Ports)
	}
	return datapath.Plan{Name: "dns",
		TC:       map[string]any{"dns_on": uint32(1), "dns_ports": ports},
		MapSizes: map[string]uint32{datapath.MapDNSPending: pendingQueries}}
}

func (*Feature) Fields() []string {
	return []string{"dns_id", "dns_flags", "dns_rcode", "dns_name", "dns_name_truncated",
		"dns_latency_ns", "dns_latency_max_ns", "dns_timeout"}
}

// Configure takes the ports and the timeout from the configuration.
func (f *Feature) Configure(c *config.Config) {
	o := dnsopt.OptionsOf(c)
	f.Ports, f.Timeout = o.Ports, o.Timeout
}

// Fill copies the flow's DNS message. A query still unanswered Timeout
// after it was seen is a timeout.
func (f *Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	if v.DnsState == 0 {
		return
	}
	r.DNSID, r.DNSFlags, r.DNSRcode = v.DnsId, v.DnsFlags, uint8(v.DnsFlags&0xf)
	r.DNSName, r.DNSNameTruncated = flow.DNSNameFromWire(v.DnsName[:])
	if v.DnsState&datapath.DNSAnswered != 0 {
		r.DNSLatency, r.DNSLatencyMax = time.Duration(v.DnsLatencyNs), time.Duration(v.DnsLatencyMaxNs)
		return
	}
	if v.DnsState&datapath.DNSQuery != 0 {
		r.DNSRcode = 0 // a query's flags carry no response code
		timeout := f.Timeout
		if timeout == 0 {
			timeout = dnsopt.DefaultTimeout
		}
		var now unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) == nil && now.Nano()-int64(v.DnsQueryNs) > int64(timeout) {
			r.DNSTimeout = true
		}
	}
}
