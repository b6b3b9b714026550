// Package dns is the "dns" feature: DNS messages per flow, read by the TC
// programs (bpf/dns.h, inside them: no hook of its own) from packets to or
// from the DNS ports: transaction id, flags and response code, the
// question's name, and the latency from a query to its answer. docs/dns.md.
package dns

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/datapath"
	"github.com/flowlens/flowlens/internal/agent/datapath/batchread"
	"github.com/flowlens/flowlens/internal/agent/feature/dns/dnsopt"
	"github.com/flowlens/flowlens/pkg/flow"
)

// PendingQueries bounds the queries awaiting an answer at once, per node:
// a query that finds the table full is not tracked (neither its latency nor
// its timeout is reported) and is counted,
// flowlens_agent_dns_pending_evictions_total{reason="full"}. Each eviction
// removes the queries whose timeout has expired (Sweep), so the table holds
// at most the queries of the last --dns-timeout plus one period.
const PendingQueries = 16384

// Feature records DNS messages.
type Feature struct {
	// Ports are the DNS ports (--dns-ports, 1 to 4); none:
	// dnsopt.DefaultPort.
	Ports []uint16
	// Timeout is how long a query may go unanswered before its flow's
	// record says DNSTimeout (--dns-timeout); 0: dnsopt.DefaultTimeout.
	Timeout time.Duration

	// NamesCacheSize caps the address -> name cache (--dns-names-cache-size);
	// nil: dnsopt.DefaultNamesCacheSize; 0: no names.
	NamesCacheSize *int

	timeouts atomic.Uint64 // queries Sweep reported as timed out
	names    *Names        // nil without names
	reader   *batchread.Reader[datapath.DNSPendingKey, datapath.DNSPendingValue]
	expired  []pendingQuery // reused by every Sweep
}

type pendingQuery struct {
	k datapath.DNSPendingKey
	v datapath.DNSPendingValue
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
	p := datapath.Plan{Name: "dns",
		TC:       map[string]any{"dns_on": uint32(1), "dns_ports": ports},
		MapSizes: map[string]uint32{datapath.MapDNSPending: PendingQueries}}
	if n := f.cacheSize(); n > 0 {
		p.TC["dns_answers_on"] = uint32(1)
		p.MapSizes[datapath.MapDNSAnswers] = AnswerRingBytes
		if f.names == nil {
			f.names = NewNames(n)
		}
	}
	return p
}

func (f *Feature) cacheSize() int {
	if f.NamesCacheSize == nil {
		return dnsopt.DefaultNamesCacheSize
	}
	return *f.NamesCacheSize
}

// Names is the feature's address -> name cache; nil before Plan or
// without names.
func (f *Feature) Names() *Names { return f.names }

// Close closes the reader of the ring of answers (the evictor, at its
// shutdown).
func (f *Feature) Close() error {
	if f.names != nil {
		f.names.close()
	}
	return nil
}

// Annotate names the record's addresses from the answers seen
// (feature.Annotator).
func (f *Feature) Annotate(r *flow.Record) {
	if f.names != nil {
		f.names.Annotate(r)
	}
}

func (*Feature) Fields() []string {
	return []string{"dns_id", "dns_flags", "dns_rcode", "dns_name", "dns_name_truncated",
		"dns_latency_ns", "dns_latency_max_ns", "dns_timeout"}
}

// Configure takes the ports and the timeout from the configuration.
func (f *Feature) Configure(c *config.Config) {
	o := dnsopt.OptionsOf(c)
	n := o.NamesCacheSize
	f.Ports, f.Timeout, f.NamesCacheSize = o.Ports, o.Timeout, &n
}

func (f *Feature) timeout() time.Duration {
	if f.Timeout == 0 {
		return dnsopt.DefaultTimeout
	}
	return f.Timeout
}

// Fill copies the flow's DNS message. The flow says dns_timeout when Sweep
// found one of its queries unanswered past Timeout, or when an answer came
// later than Timeout after its query (the kernel matched it before a Sweep
// could report it).
func (f *Feature) Fill(r *flow.Record, v *datapath.EnrichValue) {
	if v.DnsState == 0 {
		return
	}
	r.DNSID, r.DNSFlags, r.DNSRcode = v.DnsId, v.DnsFlags, uint8(v.DnsFlags&0xf)
	r.DNSName, r.DNSNameTruncated = flow.DNSNameFromWire(v.DnsName[:])
	r.DNSTimeout = v.DnsState&datapath.DNSTimeout != 0
	if v.DnsState&datapath.DNSAnswered != 0 {
		r.DNSLatency, r.DNSLatencyMax = time.Duration(v.DnsLatencyNs), time.Duration(v.DnsLatencyMaxNs)
		if r.DNSLatencyMax > f.timeout() {
			r.DNSTimeout = true
		}
		return
	}
	if v.DnsState&datapath.DNSQuery != 0 {
		r.DNSRcode = 0 // a query's flags carry no response code
	}
}

// Sweep reports every query still awaiting its answer whose timeout expired
// by end: it removes the query from the kernel's table (the removal is the
// claim: an answer arriving meanwhile finds it gone, and a query the
// kernel's answer removed first is not a timeout) and marks its flow's
// entry of the ended generation, adding one when the flow has none in it
// (no packet of it in the period), with the query's id, flags and name.
// So each unanswered query is reported once, in the record of the period in
// which its timeout expired, whatever the period's length.
//
// First it reads the answers the kernel handed on since the last Sweep
// into the names, so that this eviction's records carry them.
func (f *Feature) Sweep(m *datapath.Maps, end time.Duration, entry func(*datapath.FlowKey) *datapath.EnrichValue) error {
	var namesErr error
	if f.names != nil && m.DNSAnswers != nil {
		namesErr = f.names.drain(m.DNSAnswers, time.Now())
	}
	if err := f.sweep(m, end, entry); err != nil {
		return errors.Join(namesErr, err)
	}
	return namesErr
}

func (f *Feature) sweep(m *datapath.Maps, end time.Duration, entry func(*datapath.FlowKey) *datapath.EnrichValue) error {
	if f.reader == nil {
		f.reader = batchread.NewReader[datapath.DNSPendingKey, datapath.DNSPendingValue](batchread.DefaultChunk, false)
	}
	timeout := f.timeout()
	f.expired = f.expired[:0]
	_, err := f.reader.Read(m.DNSPending, func(keys []datapath.DNSPendingKey, vals []datapath.DNSPendingValue) error {
		for i := range keys {
			// 0: the kernel is writing the entry (a query just seen).
			if q := time.Duration(vals[i].QueryNs); q != 0 && q+timeout <= end {
				f.expired = append(f.expired, pendingQuery{keys[i], vals[i]})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read pending DNS queries: %w", err)
	}
	for i := range f.expired {
		q := &f.expired[i]
		if err := m.DNSPending.Delete(&q.k); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				continue // its answer came first
			}
			return fmt.Errorf("remove a timed out DNS query: %w", err)
		}
		f.timeouts.Add(1)
		v := entry(&q.k.Key)
		if v.DnsState&datapath.DNSQuery == 0 {
			// No query of the flow in this period: the record says this one.
			v.DnsId, v.DnsFlags, v.DnsQueryNs, v.DnsName = q.k.Id, q.v.Flags, q.v.QueryNs, q.v.Name
		}
		v.DnsState |= datapath.DNSQuery | datapath.DNSTimeout
	}
	return nil
}
