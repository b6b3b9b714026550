// Package otlp_test checks the agent's OTLP exporter (internal/agent/exporter/otlp)
// against the OpenTelemetry Collector's own OTLP receiver, run in process:
// what the receiver decodes must be, attribute by attribute, the records
// the agent exported, over gRPC and HTTP, with TLS and gzip, through
// retries, refusals and a receiver that is down; and a real agent on a veth
// lab must reach it with exact packet and byte counts. It is a module of
// its own so that the Collector's large dependency tree stays out of the
// agent's go.mod (`make test` and `make vet` run it).
package otlp_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/flowlens/flowlens/internal/agent/exporter"
	"github.com/flowlens/flowlens/internal/agent/exporter/otlp"
	"github.com/flowlens/flowlens/internal/testkit"
	"github.com/flowlens/flowlens/pkg/flow"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// records is one of every kind of flow the agent exports: every field set
// somewhere, the optional groups (drops, RTT, xlat, TLS, DNS) on and off,
// names the tables know and numbers they do not.
func records() []flow.Record {
	start := time.Date(2026, 11, 24, 7, 0, 0, 123456789, time.UTC)
	mac1, mac2 := [6]byte{0x02, 0x42, 0xac, 0x11, 0, 2}, [6]byte{0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54}
	ifs := []flow.Interface{
		{Name: "veth1a2b3c", Ifindex: 7, Netns: "host", Direction: flow.DirIngress},
		{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress},
	}
	base := func(src, dst string, sport, dport uint16, proto uint8) flow.Record {
		return flow.Record{SrcAddr: netip.MustParseAddr(src), DstAddr: netip.MustParseAddr(dst), SrcPort: sport, DstPort: dport,
			Proto: proto, Bytes: 123456, Packets: 87, EthType: 0x0800, SrcMAC: mac1, DstMAC: mac2,
			StartTime: start, EndTime: start.Add(4*time.Second + 1), Interfaces: ifs, Sampling: 1}
	}
	tcp := base("10.244.1.5", "10.96.0.10", 43210, 8080, 6)
	tcp.TCPFlags, tcp.DSCP = 0x1b|flow.TCPFlagSynAck, 46
	tcp.DropPackets, tcp.DropBytes, tcp.DropCause, tcp.DropTCPState, tcp.DropTCPFlags = 3, 4500, "TCP_LISTEN_OVERFLOW", "SYN_RECV", 0x10
	tcp.RTT, tcp.RTTMax, tcp.Retransmits = 150*time.Microsecond, 2*time.Millisecond, 4

	dns := base("fd00::1", "fd00::53", 5353, 53, 17)
	dns.EthType, dns.Bytes, dns.Packets = 0x86dd, 180, 2
	dns.Interfaces = []flow.Interface{{Name: "eth0", Ifindex: 2, Netns: "host", Direction: flow.DirEgress}}
	dns.DNSID, dns.DNSFlags, dns.DNSRcode, dns.DNSName = 0xbeef, 0x8183, 3, "nope.example.com"
	dns.DNSLatency, dns.DNSLatencyMax, dns.DNSNameTruncated = 3*time.Millisecond, 5*time.Millisecond, true

	query := base("10.0.0.1", "10.0.0.53", 40000, 53, 17)
	query.DNSID, query.DNSFlags, query.DNSName, query.DNSTimeout = 7, 0x0100, "slow.example", true

	icmp := base("192.0.2.1", "192.0.2.2", 0, 0, 1)
	icmp.IcmpType, icmp.IcmpCode, icmp.Bytes, icmp.Packets = 8, 0, 98, 1
	icmp.IfacesOverflow, icmp.FragUnmatched, icmp.Partial, icmp.Sampling = true, true, true, 100
	icmp.Interfaces = nil

	icmp6 := base("2001:db8::1", "2001:db8::2", 0, 0, 58)
	icmp6.EthType, icmp6.IcmpType, icmp6.IcmpCode = 0x86dd, 1, 4
	icmp6.Interfaces = []flow.Interface{{Name: "br0", Ifindex: 3, Netns: "ns-x", Direction: flow.DirBoth}}

	tls13 := base("10.0.0.2", "10.0.0.3", 443, 50000, 6)
	tls13.TLSVersion, tls13.TLSCipherSuite, tls13.TLSGroup, tls13.TLSClientHello = 0x0304, 0x1301, 0x001d, true

	odd := base("10.0.0.4", "10.0.0.5", 443, 50001, 17)
	odd.TLSVersion, odd.TLSCipherSuite, odd.TLSGroup, odd.QUIC = 0x7f1c, 0xabcd, 0x9999, true
	odd.Proto = 132 // network.transport sctp

	nat := base("10.244.1.5", "10.96.0.1", 40001, 443, 6)
	nat.XlatSrcAddr, nat.XlatSrcPort, nat.XlatDstAddr, nat.XlatDstPort, nat.XlatZoneID = netip.MustParseAddr("192.168.1.10"), 61000, netip.MustParseAddr("172.18.0.3"), 6443, 9

	other := base("10.1.1.1", "10.1.1.2", 0, 0, 47) // GRE: no network.transport
	other.Interfaces = []flow.Interface{{Name: "gre\xff1", Ifindex: 9, Netns: "ns-\xfe", Direction: flow.DirIngress}}
	// Long names: key-values and interface entries over 127 bytes (two-byte
	// lengths, an interface entry moved when its length is written).
	long := base("10.2.2.1", "10.2.2.2", 1, 2, 17)
	long.Interfaces = []flow.Interface{{Name: "veth0", Ifindex: 1, Netns: "cni-" + strings.Repeat("0123456789abcdef", 16), Direction: flow.DirEgress}}
	long.DNSID, long.DNSName = 9, strings.Repeat("label-of-sixty-three-bytes.", 9)+"example"
	long.DropPackets, long.DropCause = 1, strings.Repeat("X", 200)
	return []flow.Record{tcp, dns, query, icmp, icmp6, tls13, odd, nat, other, long}
}

// normalize is what the receiver should decode for r: NetnsID is not
// exported, names that are not UTF-8 have their bad bytes replaced, times
// are compared as instants.
func normalize(r flow.Record) flow.Record {
	r.StartTime, r.EndTime = time.Unix(0, r.StartTime.UnixNano()), time.Unix(0, r.EndTime.UnixNano())
	its := make([]flow.Interface, len(r.Interfaces))
	for i, it := range r.Interfaces {
		it.NetnsID = 0
		it.Name, it.Netns = strings.ToValidUTF8(it.Name, "\uFFFD"), strings.ToValidUTF8(it.Netns, "\uFFFD")
		its[i] = it
	}
	if len(its) == 0 {
		its = nil
	}
	r.Interfaces = its
	if !r.DNSAnswered() {
		r.DNSRcode = 0 // only an answer's code is exported
	}
	return r
}

func equalRecords(t *testing.T, got, sent []flow.Record) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("receiver decoded %d records, %d sent", len(got), len(sent))
	}
	for i := range sent {
		g := got[i]
		g.StartTime, g.EndTime = time.Unix(0, g.StartTime.UnixNano()), time.Unix(0, g.EndTime.UnixNano())
		if w := normalize(sent[i]); !reflect.DeepEqual(g, w) {
			t.Errorf("record %d:\n got  %+v\n want %+v", i, g, w)
		}
	}
}

func newExporter(t *testing.T, cfg otlp.Config) *otlp.Exporter {
	t.Helper()
	cfg.NodeName = "node-otlp"
	cfg.BackoffBase, cfg.BackoffMax = 10*time.Millisecond, 100*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := otlp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Every attribute of every kind of record reaches the Collector's
// receiver as the agent had it, over each protocol, plain and with TLS
// (mTLS for HTTP), with and without gzip, headers included; a batch larger
// than --otlp-batch-flows goes as several requests.
func TestExportDecodedByCollector(t *testing.T) {
	pki := receivertest.NewPKI(t)
	for _, tc := range []struct {
		name, protocol, compression string
		tls                         *tlsServer
		client                      otlp.Config
	}{
		{name: "grpc", protocol: "grpc"},
		{name: "grpc tls gzip", protocol: "grpc", compression: "gzip",
			tls: &tlsServer{cert: pki.ServerCert, key: pki.ServerKey}, client: otlp.Config{TLSCA: pki.CA}},
		{name: "http", protocol: "http"},
		{name: "http mtls gzip", protocol: "http", compression: "gzip",
			tls:    &tlsServer{cert: pki.ServerCert, key: pki.ServerKey, clientCA: pki.CA},
			client: otlp.Config{TLSCA: pki.CA, TLSCert: pki.ClientCert, TLSKey: pki.ClientKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := new(consumertest.LogsSink)
			rec := startReceiver(t, tc.protocol, testkit.FreeAddr(t), tc.tls, sink)
			cfg := tc.client
			cfg.Endpoint, cfg.Protocol, cfg.Compression, cfg.BatchFlows = rec.addr, tc.protocol, tc.compression, 4
			cfg.Headers = map[string]string{"authorization": "Bearer s3cret", "x-tenant": "team-a"}
			e := newExporter(t, cfg)
			sent := records()
			before := time.Now()
			if err := e.Export(context.Background(), sent); err != nil {
				t.Fatal(err)
			}
			// Export returned: the receiver has accepted everything.
			if n := sink.LogRecordCount(); n != len(sent) {
				t.Fatalf("receiver holds %d records after Export returned, want %d", n, len(sent))
			}
			equalRecords(t, received(t, sink, "node-otlp"), sent)
			if n := len(sink.AllLogs()); n != 3 { // 10 records, 4 per request
				t.Errorf("%d requests, want 3", n)
			}
			for _, ld := range sink.AllLogs() {
				obs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).ObservedTimestamp().AsTime()
				if obs.Before(before) || obs.After(time.Now()) {
					t.Errorf("observed time %v is not the export's time", obs)
				}
			}
			for _, h := range [][2]string{{"authorization", "Bearer s3cret"}, {"x-tenant", "team-a"}} {
				if got := headerValues(sink, h[0]); slices.ContainsFunc(got, func(v string) bool { return v != h[1] }) {
					t.Errorf("header %s: receiver saw %q per request, want %q", h[0], got, h[1])
				}
			}
			if e.Stats.AckedFlows.Load() != uint64(len(sent)) || e.Stats.Messages.Load() != 3 || e.Stats.RejectedFlows.Load() != 0 {
				t.Errorf("stats: %d flows in %d requests, %d rejected", e.Stats.AckedFlows.Load(), e.Stats.Messages.Load(), e.Stats.RejectedFlows.Load())
			}
			if !e.Connected() {
				t.Error("not connected after a success")
			}
		})
	}
}

// Full-size gzip requests (3 of the default 1000 flows, each many deflate
// blocks, the compressors reused from request to request) decode, in the
// Collector's receiver, to the records exported, over both protocols.
func TestGzipFullRequestsDecodedByCollector(t *testing.T) {
	kinds := records()
	sent := make([]flow.Record, 3*otlp.DefaultBatchFlows)
	for i := range sent {
		sent[i] = kinds[i%len(kinds)]
		sent[i].SrcPort = uint16(1024 + i) // every flow distinct
	}
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			sink := new(consumertest.LogsSink)
			rec := startReceiver(t, protocol, testkit.FreeAddr(t), nil, sink)
			e := newExporter(t, otlp.Config{Endpoint: rec.addr, Protocol: protocol, Compression: "gzip"})
			if err := e.Export(context.Background(), sent); err != nil {
				t.Fatal(err)
			}
			equalRecords(t, received(t, sink, "node-otlp"), sent)
			if n := len(sink.AllLogs()); n != 3 {
				t.Errorf("%d requests, want 3", n)
			}
		})
	}
}

// A receiver whose pipeline is busy answers UNAVAILABLE (HTTP 503): the
// exporter retries the same request until it is accepted, each record once.
func TestRetryUntilAccepted(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			sink := new(consumertest.LogsSink)
			flaky := &flakyConsumer{n: 3, sink: sink}
			rec := startReceiver(t, protocol, testkit.FreeAddr(t), nil, flaky.logs(t))
			e := newExporter(t, otlp.Config{Endpoint: rec.addr, Protocol: protocol})
			sent := records()
			if err := e.Export(context.Background(), sent); err != nil {
				t.Fatal(err)
			}
			equalRecords(t, received(t, sink, "node-otlp"), sent)
			if r := e.Stats.Retries.Load(); r != 3 {
				t.Errorf("%d retries, want 3", r)
			}
		})
	}
}

// A receiver that refuses the data for good (a permanent error: gRPC
// INVALID_ARGUMENT, HTTP 400) is not retried; the records are counted as
// rejected, not silently lost.
func TestRefusalCounted(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			refuse := consumertest.NewErr(consumererror.NewPermanent(errors.New("schema violation")))
			rec := startReceiver(t, protocol, testkit.FreeAddr(t), nil, refuse)
			e := newExporter(t, otlp.Config{Endpoint: rec.addr, Protocol: protocol, BatchFlows: 5})
			sent := records()
			if err := e.Export(context.Background(), sent); err != nil {
				t.Fatalf("a refusal is counted, not an Export error: %v", err)
			}
			if got := e.Stats.RejectedFlows.Load(); got != uint64(len(sent)) {
				t.Errorf("%d rejected, want %d", got, len(sent))
			}
			if e.Stats.Retries.Load() != 0 || e.Stats.AckedFlows.Load() != 0 {
				t.Errorf("%d retries, %d accepted, want none", e.Stats.Retries.Load(), e.Stats.AckedFlows.Load())
			}
		})
	}
}

// The receiver is down while batches keep coming, then comes back: the
// queue in front of the exporter keeps the newest batches and drops the
// oldest, counted; once the receiver is back what was kept is delivered.
// Every flow sent is delivered exactly once or counted as lost.
func TestReceiverDownThenBack(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			addr := testkit.FreeAddr(t)
			e := newExporter(t, otlp.Config{Endpoint: addr, Protocol: protocol, BatchFlows: 7})
			q := exporter.NewQueue(e, 3, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go q.Run(ctx)

			const batches, per = 12, 20
			port := uint16(0)
			for range batches {
				recs := make([]flow.Record, per)
				for i := range recs {
					recs[i] = records()[0]
					port++
					recs[i].SrcPort = port // every flow its own: duplicates would show
				}
				q.Push(flow.BatchOf(recs), time.Now().Add(5*time.Millisecond))
			}
			if e.Connected() || e.Stats.Retries.Load() == 0 && q.Stats.DroppedFlows.Load() == 0 {
				t.Fatalf("receiver down, yet connected=%v retries=%d dropped=%d", e.Connected(), e.Stats.Retries.Load(), q.Stats.DroppedFlows.Load())
			}

			sink := new(consumertest.LogsSink)
			startReceiver(t, protocol, addr, nil, sink)
			for deadline := time.Now().Add(30 * time.Second); q.Len() > 0 || !e.Connected(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("queue still holds %d batches", q.Len())
				}
			}
			closeCtx, c := context.WithTimeout(context.Background(), 30*time.Second)
			defer c()
			q.Close(closeCtx)

			got := received(t, sink, "node-otlp")
			seen := map[uint16]bool{}
			for _, r := range got {
				if seen[r.SrcPort] {
					t.Errorf("flow %d delivered twice", r.SrcPort)
				}
				seen[r.SrcPort] = true
			}
			dropped, rejected, failed := q.Stats.DroppedFlows.Load(), e.Stats.RejectedFlows.Load(), e.Stats.FailedFlows.Load()
			t.Logf("sent %d: delivered %d, dropped by the queue %d, rejected %d, failed %d, retries %d",
				batches*per, len(got), dropped, rejected, failed, e.Stats.Retries.Load())
			if uint64(len(got))+dropped+rejected+failed != batches*per {
				t.Errorf("delivered %d + dropped %d + rejected %d + failed %d != sent %d", len(got), dropped, rejected, failed, batches*per)
			}
			if dropped == 0 || len(got) < 3*per {
				t.Errorf("want the oldest dropped and at least the queue's 3 batches delivered: dropped %d, delivered %d", dropped, len(got))
			}
			if e.Stats.AckedFlows.Load() != uint64(len(got)) {
				t.Errorf("exporter counted %d accepted, the receiver has %d", e.Stats.AckedFlows.Load(), len(got))
			}
		})
	}
}

// A receiver that stays down past the retry timeout: Export gives up with
// an error naming the last failure, and the records are counted as failed.
func TestGiveUpCounted(t *testing.T) {
	e := newExporter(t, otlp.Config{Endpoint: testkit.FreeAddr(t), RetryTimeout: 300 * time.Millisecond})
	sent := records()
	err := e.Export(context.Background(), sent)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last failure") {
		t.Fatalf("Export: %v; want the deadline and the last failure", err)
	}
	if f := e.Stats.FailedFlows.Load(); f != uint64(len(sent)) || e.Stats.Retries.Load() == 0 {
		t.Errorf("failed %d (want %d), retries %d", f, len(sent), e.Stats.Retries.Load())
	}
	t.Log(err)
}

// A request stays under MaxRequestBytes (the receivers' message size
// limit) whatever --otlp-batch-flows says: the batch is split further.
func TestSplitBySize(t *testing.T) {
	sink := new(consumertest.LogsSink)
	rec := startReceiver(t, "grpc", testkit.FreeAddr(t), nil, sink)
	e := newExporter(t, otlp.Config{Endpoint: rec.addr, MaxRequestBytes: 2000})
	sent := records()
	if err := e.Export(context.Background(), sent); err != nil {
		t.Fatal(err)
	}
	equalRecords(t, received(t, sink, "node-otlp"), sent)
	if n := len(sink.AllLogs()); n < 4 || n == len(sent) {
		t.Errorf("%d requests for %d records of ~900 bytes under 2000 bytes each", n, len(sent))
	}
	if b := e.Stats.Bytes.Load(); b/e.Stats.Messages.Load() > 2000+1500 {
		t.Errorf("%d bytes per request", b/e.Stats.Messages.Load())
	}
}
