package otlp_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/flowlens/flowlens/internal/agent/exporter/otlp"
	"github.com/flowlens/flowlens/pkg/flow"
)

// receiver is the OpenTelemetry Collector's OTLP receiver, started in this
// process on one protocol, handing what it decodes to next.
type receiver struct {
	addr string
	comp component.Component
}

// tlsServer is the receiver's TLS: its certificate, and a CA to require
// client certificates from ("": none).
type tlsServer struct{ cert, key, clientCA string }

func startReceiver(t *testing.T, protocol, addr string, tc *tlsServer, next consumer.Logs) *receiver {
	t.Helper()
	f := otlpreceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
	var tlsCfg configoptional.Optional[configtls.ServerConfig]
	if tc != nil {
		tlsCfg = configoptional.Some(configtls.ServerConfig{
			Config: configtls.Config{CertFile: tc.cert, KeyFile: tc.key}, ClientCAFile: tc.clientCA})
	}
	switch protocol {
	case "grpc":
		g := cfg.Protocols.GRPC.GetOrInsertDefault()
		g.NetAddr.Endpoint, g.IncludeMetadata, g.TLS = addr, true, tlsCfg
		cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
	case "http":
		h := cfg.Protocols.HTTP.GetOrInsertDefault()
		h.ServerConfig.NetAddr.Endpoint, h.ServerConfig.IncludeMetadata, h.ServerConfig.TLS = addr, true, tlsCfg
		cfg.Protocols.GRPC = configoptional.None[configgrpc.ServerConfig]()
	default:
		t.Fatalf("protocol %q", protocol)
	}
	r, err := f.CreateLogs(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	rc := &receiver{addr: addr, comp: r}
	t.Cleanup(rc.stop)
	return rc
}

func (r *receiver) stop() { r.comp.Shutdown(context.Background()) }

// waitRecords waits until the sink holds n log records (or fails after 30 s).
func waitRecords(t *testing.T, sink *consumertest.LogsSink, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); sink.LogRecordCount() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("receiver has %d log records, want %d", sink.LogRecordCount(), n)
		}
	}
}

// received decodes every log record the sink holds back into flow records,
// checking the resource and scope of each request on the way.
func received(t *testing.T, sink *consumertest.LogsSink, node string) []flow.Record {
	t.Helper()
	var out []flow.Record
	for _, ld := range sink.AllLogs() {
		for _, rl := range ld.ResourceLogs().All() {
			res := rl.Resource().Attributes().AsRaw()
			for k, want := range map[string]string{"service.name": "flowlens-agent", "host.name": node, "k8s.node.name": node} {
				if res[k] != want {
					t.Errorf("resource %s = %v, want %q (resource %v)", k, res[k], want, res)
				}
			}
			for _, sl := range rl.ScopeLogs().All() {
				if sl.Scope().Name() != otlp.ScopeName {
					t.Errorf("scope %q, want %q", sl.Scope().Name(), otlp.ScopeName)
				}
				for _, lr := range sl.LogRecords().All() {
					out = append(out, decode(t, lr))
				}
			}
		}
	}
	return out
}

// decode maps a log record's attributes back to a flow.Record, following
// docs/export.md's table; an attribute the table does not have fails the
// test, and the derived ones (network.*) must agree with the others.
func decode(t *testing.T, lr plog.LogRecord) flow.Record {
	t.Helper()
	if lr.EventName() != otlp.EventName {
		t.Errorf("event name %q, want %q", lr.EventName(), otlp.EventName)
	}
	if lr.ObservedTimestamp() == 0 {
		t.Error("no observed timestamp")
	}
	r := flow.Record{StartTime: lr.Timestamp().AsTime()}
	derived := map[string]string{}
	var tlsName, tlsVer string
	for k, v := range lr.Attributes().All() {
		if v.Type() == pcommon.ValueTypeBool && !v.Bool() {
			t.Errorf("attribute %s is false: a boolean is sent only when true", k)
		}
		i := uint64(v.Int())
		s := v.Str()
		b := v.Bool()
		switch k {
		case "source.address":
			r.SrcAddr = netip.MustParseAddr(s)
		case "source.port":
			r.SrcPort = uint16(i)
		case "destination.address":
			r.DstAddr = netip.MustParseAddr(s)
		case "destination.port":
			r.DstPort = uint16(i)
		case "network.transport", "network.type", "network.interface.name", "network.io.direction":
			derived[k] = s
		case "flowlens.proto":
			r.Proto = uint8(i)
		case "flowlens.icmp_type":
			r.IcmpType = uint8(i)
		case "flowlens.icmp_code":
			r.IcmpCode = uint8(i)
		case "flowlens.bytes":
			r.Bytes = i
		case "flowlens.packets":
			r.Packets = i
		case "flowlens.tcp_flags":
			r.TCPFlags = uint16(i)
		case "flowlens.eth_type":
			r.EthType = uint16(i)
		case "flowlens.dscp":
			r.DSCP = uint8(i)
		case "flowlens.src_mac":
			r.SrcMAC = mac(t, s)
		case "flowlens.dst_mac":
			r.DstMAC = mac(t, s)
		case "flowlens.end_time_unix_nano":
			r.EndTime = time.Unix(0, int64(i))
		case "flowlens.interfaces":
			for _, e := range v.Slice().All() {
				m := e.Map().AsRaw()
				r.Interfaces = append(r.Interfaces, flow.Interface{Name: m["name"].(string), Ifindex: uint32(m["ifindex"].(int64)),
					Netns: m["netns"].(string), Direction: direction(t, m["direction"].(string))})
			}
		case "flowlens.interfaces_overflow":
			r.IfacesOverflow = b
		case "flowlens.frag_unmatched":
			r.FragUnmatched = b
		case "flowlens.sampling":
			r.Sampling = uint32(i)
		case "flowlens.partial":
			r.Partial = b
		case "flowlens.drop_packets":
			r.DropPackets = i
		case "flowlens.drop_bytes":
			r.DropBytes = i
		case "flowlens.drop_cause":
			r.DropCause = s
		case "flowlens.drop_tcp_state":
			r.DropTCPState = s
		case "flowlens.drop_tcp_flags":
			r.DropTCPFlags = uint16(i)
		case "flowlens.rtt_ns":
			r.RTT = time.Duration(i)
		case "flowlens.rtt_max_ns":
			r.RTTMax = time.Duration(i)
		case "flowlens.retransmits":
			r.Retransmits = i
		case "flowlens.xlat_src_addr":
			r.XlatSrcAddr = netip.MustParseAddr(s)
		case "flowlens.xlat_src_port":
			r.XlatSrcPort = uint16(i)
		case "flowlens.xlat_dst_addr":
			r.XlatDstAddr = netip.MustParseAddr(s)
		case "flowlens.xlat_dst_port":
			r.XlatDstPort = uint16(i)
		case "flowlens.xlat_zone_id":
			r.XlatZoneID = uint16(i)
		case "tls.protocol.name":
			tlsName = s
		case "tls.protocol.version":
			tlsVer = s
		case "tls.cipher":
			r.TLSCipherSuite = tlsNumber(t, s, cipherNumbers)
		case "tls.curve":
			r.TLSGroup = tlsNumber(t, s, groupNumbers)
		case "flowlens.tls_client_hello":
			r.TLSClientHello = b
		case "flowlens.quic":
			r.QUIC = b
		case "dns.question.name":
			r.DNSName = s
		case "flowlens.dns_id":
			r.DNSID = uint16(i)
		case "flowlens.dns_flags":
			r.DNSFlags = uint16(i)
		case "flowlens.dns_rcode":
			r.DNSRcode = rcode(t, s)
		case "flowlens.dns_name_truncated":
			r.DNSNameTruncated = b
		case "flowlens.dns_latency_ns":
			r.DNSLatency = time.Duration(i)
		case "flowlens.dns_latency_max_ns":
			r.DNSLatencyMax = time.Duration(i)
		case "flowlens.dns_timeout":
			r.DNSTimeout = b
		case "flowlens.tcp_role":
			role, ok := flow.ParseTCPRole(s)
			if !ok {
				t.Errorf("flowlens.tcp_role %q", s)
			}
			r.TCPRole = role
		case "flowlens.tcp_connects":
			r.TCPConnects = i
		case "flowlens.tcp_refused":
			r.TCPRefused = i
		case "flowlens.tcp_timeouts":
			r.TCPTimeouts = i
		case "flowlens.tcp_syn_retrans":
			r.TCPSynRetrans = i
		case "flowlens.tcp_resets":
			r.TCPResets = i
		case "flowlens.tcp_zero_windows":
			r.TCPZeroWindows = i
		case "flowlens.tcp_handshake_ns":
			r.TCPHandshake = time.Duration(i)
		case "flowlens.tcp_handshake_max_ns":
			r.TCPHandshakeMax = time.Duration(i)
		case "flowlens.tunnel_type":
			for _, tt := range []flow.TunnelType{flow.TunnelVXLAN, flow.TunnelGeneve, flow.TunnelIPIP} {
				if tt.String() == s {
					r.Tunnel.TunnelType = tt
				}
			}
			if r.Tunnel.TunnelType == flow.TunnelNone {
				t.Errorf("flowlens.tunnel_type %q", s)
			}
		case "flowlens.tunnel_src_addr":
			r.Tunnel.TunnelSrcAddr = netip.MustParseAddr(s)
		case "flowlens.tunnel_dst_addr":
			r.Tunnel.TunnelDstAddr = netip.MustParseAddr(s)
		case "flowlens.tunnel_vni":
			r.Tunnel.TunnelVNI = uint32(i)
		case "flowlens.overlay_outer":
			r.Tunnel.OverlayOuter = b
		case "flowlens.l4_unread":
			r.L4Unread = b
		case "flowlens.ext_unread":
			r.ExtUnread = b
		default:
			t.Errorf("attribute %s=%v is not in the mapping", k, v.AsRaw())
		}
	}
	r.TLSVersion = tlsVersion(t, tlsName, tlsVer)
	checkDerived(t, &r, derived)
	return r
}

// checkDerived checks the semantic-convention attributes that repeat what
// other attributes say.
func checkDerived(t *testing.T, r *flow.Record, got map[string]string) {
	t.Helper()
	want := map[string]string{}
	switch r.Proto {
	case 6:
		want["network.transport"] = "tcp"
	case 17:
		want["network.transport"] = "udp"
	case 1:
		want["network.transport"] = "icmp"
	case 58:
		want["network.transport"] = "ipv6-icmp"
	case 132:
		want["network.transport"] = "sctp"
	}
	if r.SrcAddr.Is4() {
		want["network.type"] = "ipv4"
	} else {
		want["network.type"] = "ipv6"
	}
	if len(r.Interfaces) > 0 {
		want["network.interface.name"] = r.Interfaces[0].Name
		switch r.Interfaces[0].Direction {
		case flow.DirIngress:
			want["network.io.direction"] = "receive"
		case flow.DirEgress:
			want["network.io.direction"] = "transmit"
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%v: derived attributes %v, want %v", r.SrcAddr, got, want)
	}
}

func mac(t *testing.T, s string) (m [6]byte) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		t.Errorf("MAC %q: %v", s, err)
		return m
	}
	return [6]byte(hw)
}

func direction(t *testing.T, s string) flow.Direction {
	for _, d := range []flow.Direction{flow.DirIngress, flow.DirEgress, flow.DirBoth} {
		if d.String() == s {
			return d
		}
	}
	t.Errorf("direction %q", s)
	return 0
}

func rcode(t *testing.T, s string) uint8 {
	for c := range 16 {
		if flow.DNSRcodeName(uint8(c)) == s {
			return uint8(c)
		}
	}
	t.Errorf("rcode %q", s)
	return 0
}

func tlsVersion(t *testing.T, name, ver string) uint16 {
	switch name + " " + ver {
	case " ":
		return 0
	case "ssl 3.0":
		return 0x0300
	case "tls 1.0", "tls 1.1", "tls 1.2", "tls 1.3":
		return 0x0301 + uint16(ver[2]-'0')
	}
	if name == "" {
		return tlsNumber(t, ver, nil)
	}
	t.Errorf("TLS protocol %q %q", name, ver)
	return 0
}

var cipherNumbers, groupNumbers = names(flow.TLSCipherSuiteName), names(flow.TLSGroupName)

func names(name func(uint16) (string, bool)) map[string]uint16 {
	m := map[string]uint16{}
	for v := range 1 << 16 {
		if n, ok := name(uint16(v)); ok {
			m[n] = uint16(v)
		}
	}
	return m
}

// tlsNumber is the number of a TLS name, or of its "0x%04x" form.
func tlsNumber(t *testing.T, s string, byName map[string]uint16) uint16 {
	if v, ok := byName[s]; ok {
		return v
	}
	if h, ok := strings.CutPrefix(s, "0x"); ok && len(h) == 4 {
		if v, err := strconv.ParseUint(h, 16, 16); err == nil {
			return uint16(v)
		}
	}
	t.Errorf("TLS value %q is neither a name nor 0x%%04x", s)
	return 0
}

// headerValues is every value of header key the receiver saw, per request.
func headerValues(sink *consumertest.LogsSink, key string) []string {
	var out []string
	for _, ctx := range sink.Contexts() {
		out = append(out, strings.Join(client.FromContext(ctx).Metadata.Get(key), ","))
	}
	return out
}

// flakyConsumer fails the first n requests with a retryable error (the
// receiver answers gRPC UNAVAILABLE, HTTP 503), then hands them to sink.
type flakyConsumer struct {
	mu   sync.Mutex
	n    int
	sink *consumertest.LogsSink
}

func (f *flakyConsumer) logs(t *testing.T) consumer.Logs {
	c, err := consumer.NewLogs(func(ctx context.Context, ld plog.Logs) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.n > 0 {
			f.n--
			return fmt.Errorf("backend busy")
		}
		return f.sink.ConsumeLogs(ctx, ld)
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
