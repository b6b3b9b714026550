package xlat_test

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
	"github.com/flowlens/flowlens/internal/testkit/promtest"
)

// The Kubernetes DNS path through issue #29's Service lab: the ClusterIP's
// port 53 (kube-dns) DNATed to a DNS server in the backend namespace (a
// CoreDNS pod), and its port 443 to a TLS server, in PREROUTING and OUTPUT.
const (
	dnsQueries  = 10
	dnsPodPort  = 41000 // the pod's queries' source ports: 41000..41009
	dnsHostPort = 42000 // the host-network client's
	dnsName     = "svc.test"
	dnsBadName  = "nope.test" // NXDOMAIN
	dnsTimeout  = "300ms"
	svcTLSPort  = 443
	// The Service port 5300 to the pods' 5353, only the first a DNS port.
	dnsSvcDNSPort, dnsPodDNSPort = "5300", "5353"
	svcTLSClient                 = 44000
)

func dnsSvcLab(t *testing.T, ad svcAddrs) *svcLab {
	return dnsSvcLabOf(t, ad, map[string][]netlab.DNSRecord{dnsName: {{Addr: "10.1.2.3", TTL: 60}}})
}

// dnsSvcLabOf is dnsSvcLab with the DNS servers' zone.
func dnsSvcLabOf(t *testing.T, ad svcAddrs, zone map[string][]netlab.DNSRecord) *svcLab {
	l := newSvcLabOf(t, ad, false)
	for _, c := range []string{"pre", "out"} {
		for _, r := range []struct{ proto, port string }{{"udp", "53"}, {"tcp", "443"}} {
			to := ad.backend + ":" + r.port // nft's syntax: [addr]:port for IPv6
			if ad.v6 {
				to = "[" + ad.backend + "]:" + r.port
			}
			netlab.Run(t, l.node, "nft", "add rule "+ad.nft+" svc "+c+" "+ad.nft+" daddr "+ad.vip+" "+r.proto+" dport "+r.port+" dnat to "+to)
		}
		// A Service port other than its pods' (OpenShift's DNS: 53 -> 5353).
		to := ad.backend + ":" + dnsPodDNSPort
		if ad.v6 {
			to = "[" + ad.backend + "]:" + dnsPodDNSPort
		}
		netlab.Run(t, l.node, "nft", "add rule "+ad.nft+" svc "+c+" "+ad.nft+" daddr "+ad.vip+" udp dport "+dnsSvcDNSPort+" dnat to "+to)
	}
	netlab.ServeDNS(t, l.b, net.JoinHostPort(ad.backend, dnsPodDNSPort), zone)
	netlab.ServeDNS(t, l.b, net.JoinHostPort(ad.backend, "53"), zone)
	return l
}

// askAll sends dnsQueries queries from ns (source address src, ports from
// port0 on, one flow each; one port when same: one flow) to the
// ClusterIP's port 53, each answered: ids 0x100+i, every third one for a
// name the server does not know.
func askAll(t *testing.T, ns *netlab.Netns, vip, src string, port0 int, same bool) {
	t.Helper()
	askAt(t, ns, net.JoinHostPort(vip, "53"), src, port0, same)
}

func askAt(t *testing.T, ns *netlab.Netns, to, src string, port0 int, same bool) {
	t.Helper()
	for i := range dnsQueries {
		port := port0 + i
		if same {
			port = port0
		}
		name, want := dnsName, 0
		if i%3 == 2 {
			name, want = dnsBadName, 3
		}
		// One try: a second query with the same id would be a second
		// packet of its flow. The server is up (ServeDNS listens before
		// it returns); the wait is generous for a loaded host.
		rc, err := netlab.AskDNS(ns, net.JoinHostPort(src, fmt.Sprint(port)), to, netlab.DNSQuery(uint16(0x100+i), name), 10*time.Second)
		if err != nil || rc != want {
			t.Fatalf("query %d from %s: rcode %d (%v), want %d", i, src, rc, err, want)
		}
	}
}

// checkDNS: the dnsQueries queries from src (one flow each from port0 on;
// one flow, port0, when same) are as many packets in records keyed on
// client -> ClusterIP:53 (before NAT), and their answers in records keyed
// on backend:53 -> client (before un-DNAT); each flow's records carry the
// translation, list ifaces interfaces in all, carry its (last) query's id,
// no timeout, and one latency per flow of queries, on the query's side
// only, with its answer's rcode; nothing is keyed on a tuple after NAT.
// The records of a flow are taken together: a generation flip between a
// query and its answer (a loaded host stalling the test past the 5 s
// period) puts the latency in the next period's record of the flow.
func checkDNS(t *testing.T, flows []agenttest.JSONFlow, ad svcAddrs, what, src string, port0 int, same bool, ifaces int) {
	t.Helper()
	checkDNSVia(t, flows, ad, what, src, port0, same, ifaces, 53, 53)
}

// checkDNSVia is checkDNS through the Service port svc to the pods' port
// pod.
func checkDNSVia(t *testing.T, flows []agenttest.JSONFlow, ad svcAddrs, what, src string, port0 int, same bool, ifaces int, svc, pod uint16) {
	t.Helper()
	flowsOf, perFlow := dnsQueries, 1
	if same {
		flowsOf, perFlow = 1, dnsQueries
	}
	var total uint64
	for i := range flowsOf {
		q := i + perFlow - 1 // the flow's last query
		sport := uint16(port0 + i)
		rcode := "NOERROR"
		if q%3 == 2 {
			rcode = "NXDOMAIN"
		}
		id := uint16(0x100 + q)
		for _, c := range []struct {
			dir      string
			m, after agenttest.Match
		}{
			{"query", agenttest.Match{Src: src, Dst: ad.vip, Sport: sport, Dport: svc, Proto: 17},
				agenttest.Match{Src: src, Dst: ad.backend, Sport: sport, Dport: pod, Proto: 17}},
			{"answer", agenttest.Match{Src: ad.backend, Dst: src, Sport: pod, Dport: sport, Proto: 17},
				agenttest.Match{Src: ad.vip, Dst: src, Sport: svc, Dport: sport, Proto: 17}},
		} {
			pk, _, recs := agenttest.Sum(flows, c.m)
			total += pk
			if pk != uint64(perFlow) {
				t.Errorf("%s, flow %d, %s: %d packets in %d records, want %d", what, i, c.dir, pk, len(recs), perFlow)
			}
			seen := map[string]bool{}
			var ids, latencies, rcodes int
			for _, r := range recs {
				for _, f := range r.Interfaces {
					seen[f.Netns+"/"+f.Name+":"+f.Direction] = true
				}
				if r.Packets > 0 && r.XlatDstAddr == "" {
					t.Errorf("%s, flow %d, %s: a record with %d packets and no translation", what, i, c.dir, r.Packets)
				}
				if r.DNSTimeout {
					t.Errorf("%s, flow %d, %s: dns_timeout", what, i, c.dir)
				}
				if r.DNSID == id {
					ids++
				}
				if r.DNSRcode == rcode {
					rcodes++
				}
				if r.DNSLatencyNs > 0 {
					latencies++
					if r.DNSLatencyNs > uint64(10*time.Second) {
						t.Errorf("%s, flow %d, %s: latency %v", what, i, c.dir, time.Duration(r.DNSLatencyNs))
					}
				}
			}
			wantLat := 0
			if c.dir == "query" {
				wantLat = 1
			}
			if ids == 0 || rcodes == 0 || latencies != wantLat || len(seen) != ifaces {
				t.Errorf("%s, flow %d, %s: %d records with id %#x, %d with rcode %q, %d with a latency, %d interfaces; want at least 1, 1, exactly %d, %d",
					what, i, c.dir, ids, id, rcodes, rcode, latencies, len(seen), wantLat, ifaces)
			}
			if pk, _, recs := agenttest.Sum(flows, c.after); len(recs) != 0 {
				t.Errorf("%s, flow %d, %s: %d records (%d packets) under the tuple after NAT %+v", what, i, c.dir, len(recs), pk, c.after)
			}
		}
	}
	if total != 2*dnsQueries {
		t.Errorf("%s: %d packets in the DNS flows, want %d", what, total, 2*dnsQueries)
	}
}

func logFlows(t *testing.T, flows []agenttest.JSONFlow) {
	for _, f := range flows {
		t.Logf("%s:%d -> %s:%d p%d pk=%d partial=%v xlat %s:%d -> %s:%d dns id=%#x rc=%q lat=%d to=%v tls ch=%v v=%q %s",
			f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Proto, f.Packets, *f.Partial, f.XlatSrcAddr, f.XlatSrcPort,
			f.XlatDstAddr, f.XlatDstPort, f.DNSID, f.DNSRcode, f.DNSLatencyNs, f.DNSTimeout, f.TLSClientHello, f.TLSVersion, f.Ifaces())
	}
}

// Issue #29, DNS across a Service's NAT: a pod's queries to the kube-dns
// ClusterIP and a host-network client's (DNAT in OUTPUT: its only hook
// sees the query after NAT), the agent on every veth with dns and xlat.
// Each query and answer is inspected under its flow's key before NAT
// (docs/design/counting.md, Translated packets): the query's record has
// its id, rcode and one latency, no record under a tuple after NAT, no
// partial record, no timeout, and the agent's DNS metrics count each answer
// once (80 answers read: 8 runs of 10). Over IPv4 and IPv6; one query per
// flow and ten on one flow; and through a Service port other than its
// pods' (5300 -> 5353) with only the Service's listed, where the
// host-network client's query and answer are seen only on 5353 and are
// read by the port of their flows' keys before NAT: the same checks
// (checkDNSVia), each of its 10 queries matched.
func TestServiceDNS(t *testing.T) {
	for _, ad := range []svcAddrs{svcV4, svcV6} {
		name := "ipv4"
		if ad.v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { serviceDNS(t, ad) })
	}
}

func serviceDNS(t *testing.T, ad svcAddrs) {
	l := dnsSvcLab(t, ad)
	h := agenttest.Start(t, svcAllIfaces, agent.Options{}, "--netns="+l.node.Name+","+l.a.Name+","+l.b.Name,
		"--features=dns,xlat", "--dns-timeout="+dnsTimeout, "--dns-ports=53,"+dnsSvcDNSPort)
	askAll(t, l.a, ad.vip, ad.pod, dnsPodPort, false)
	askAll(t, l.node, ad.vip, ad.nodeB, dnsHostPort, false)
	// And as many on one flow each: after its first packets, the hooks
	// after NAT that the flow lists stop at the alias (steady).
	askAll(t, l.a, ad.vip, ad.pod, dnsPodPort+100, true)
	askAll(t, l.node, ad.vip, ad.nodeB, dnsHostPort+100, true)
	// Through the Service port 5300 to the pods' 5353 (not a DNS port),
	// one flow each and ten on one flow.
	svc5300 := net.JoinHostPort(ad.vip, dnsSvcDNSPort)
	askAt(t, l.a, svc5300, ad.pod, dnsPodPort+200, false)
	askAt(t, l.node, svc5300, ad.nodeB, dnsHostPort+200, false)
	askAt(t, l.a, svc5300, ad.pod, dnsPodPort+300, true)
	askAt(t, l.node, svc5300, ad.nodeB, dnsHostPort+300, true)
	// The metrics at the first periodic eviction (5 s after the start),
	// past --dns-timeout: it swept the pending queries and read the
	// answers. (Not after Stop: the maps are closed then.)
	time.Sleep(500 * time.Millisecond)
	var fams promtest.Families
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		fams = promtest.GatherFrom(t, h.A.Metrics.Registry())
		if v, _ := promtest.Value(fams, "flowlens_agent_evictions_total", "reason=timer"); v > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no periodic eviction in 20 s")
		}
	}
	flows := h.Stop()
	promtest.Expect(t, fams, 0, "flowlens_agent_dns_pending_evictions_total", "reason=timeout")
	promtest.Expect(t, fams, 0, "flowlens_agent_dns_pending_evictions_total", "reason=full")
	// Each answer handed on once (at its counting hook), read once.
	promtest.Expect(t, fams, 8*dnsQueries, "flowlens_agent_dns_answers_total", "result=read")
	promtest.Expect(t, fams, 0, "flowlens_agent_dns_answers_total", "result=unparsed")

	checkDNS(t, flows, ad, "pod", ad.pod, dnsPodPort, false, svcAllIfaces)
	checkDNS(t, flows, ad, "host", ad.nodeB, dnsHostPort, false, 2) // nb egress, b0 ingress (the answer's: b0 egress, nb ingress)
	checkDNS(t, flows, ad, "pod, one flow", ad.pod, dnsPodPort+100, true, svcAllIfaces)
	checkDNS(t, flows, ad, "host, one flow", ad.nodeB, dnsHostPort+100, true, 2)
	// Through 5300 -> 5353 with only 5300 listed: read by the port of
	// the flows' keys before NAT (bpf/dns.h), the host-network client's
	// too, which no hook sees on 5300.
	checkDNSVia(t, flows, ad, "pod, 5300", ad.pod, dnsPodPort+200, false, svcAllIfaces, 5300, 5353)
	checkDNSVia(t, flows, ad, "host, 5300", ad.nodeB, dnsHostPort+200, false, 2, 5300, 5353)
	checkDNSVia(t, flows, ad, "pod, 5300, one flow", ad.pod, dnsPodPort+300, true, svcAllIfaces, 5300, 5353)
	checkDNSVia(t, flows, ad, "host, 5300, one flow", ad.nodeB, dnsHostPort+300, true, 2, 5300, 5353)
	// Nothing else: no record of another tuple (a partial one under a
	// tuple after NAT), no timeout.
	dnsPort := func(p uint16) bool { return p == 53 || p == 5300 || p == 5353 }
	for _, f := range flows {
		if f.Proto == 17 && (dnsPort(f.SrcPort) || dnsPort(f.DstPort)) && f.SrcAddr != ad.backend && f.DstAddr != ad.vip {
			t.Errorf("a record of another tuple: %s:%d -> %s:%d, %d packets", f.SrcAddr, f.SrcPort, f.DstAddr, f.DstPort, f.Packets)
		}
	}
	if t.Failed() {
		logFlows(t, flows)
	}
}

// Issue #29, the names cache (--dns-names-cache-size) across a Service's
// NAT, through 5300 -> 5353 with only 5300 listed: the host-network
// client asks web.test (the backend's address), whose answer no hook sees
// on 5300, and the pod asks pod.test (its own address), whose answer is
// on 5300 only after un-DNAT, at a hook that is not its flow's counting
// one. Both answers are read by the port of their queries' keys before
// NAT and handed to the cache once each (read 2, lost 0, unparsed 0), the
// cache holds exactly those two addresses, and a datagram from the pod to
// the backend (no NAT) says src_dns_name pod.test, dst_dns_name web.test.
func TestServiceDNSNames(t *testing.T) {
	for _, ad := range []svcAddrs{svcV4, svcV6} {
		name := "ipv4"
		if ad.v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) { serviceDNSNames(t, ad) })
	}
}

func serviceDNSNames(t *testing.T, ad svcAddrs) {
	l := dnsSvcLabOf(t, ad, map[string][]netlab.DNSRecord{
		"web.test": {{Addr: ad.backend, TTL: 300}},
		"pod.test": {{Addr: ad.pod, TTL: 300}},
	})
	agenttest.MustListen(t, l.b, net.JoinHostPort(ad.backend, "9000"))
	h := agenttest.Start(t, svcAllIfaces, agent.Options{}, "--netns="+l.node.Name+","+l.a.Name+","+l.b.Name,
		"--features=dns,xlat", "--dns-ports="+dnsSvcDNSPort, "--dns-names-cache-size=16", "--cache-active-timeout=1s")
	svc := net.JoinHostPort(ad.vip, dnsSvcDNSPort)
	for _, q := range []struct {
		ns        *netlab.Netns
		src, name string
	}{{l.node, ad.nodeB, "web.test"}, {l.a, ad.pod, "pod.test"}} {
		rc, err := netlab.AskDNS(q.ns, net.JoinHostPort(q.src, "43000"), svc, netlab.DNSQuery(0x4300, q.name), 10*time.Second)
		if err != nil || rc != 0 {
			t.Fatalf("%s from %s: rcode %d (%v)", q.name, q.src, rc, err)
		}
	}
	// The answers reach the cache at the evictions (every second).
	gauge := func() float64 {
		v, _ := promtest.Value(promtest.GatherFrom(t, h.A.Metrics.Registry()), "flowlens_agent_dns_names", "")
		return v
	}
	for deadline := time.Now().Add(30 * time.Second); gauge() != 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("flowlens_agent_dns_names = %v, want 2 (web.test, pod.test)", gauge())
		}
	}
	if err := l.a.Do(func() error {
		c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(ad.pod), Port: 43100},
			&net.UDPAddr{IP: net.ParseIP(ad.backend), Port: 9000})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fams := promtest.GatherFrom(t, h.A.Metrics.Registry())
	promtest.Expect(t, fams, 2, "flowlens_agent_dns_answers_total", "result=read")
	promtest.Expect(t, fams, 0, "flowlens_agent_dns_answers_total", "result=lost")
	promtest.Expect(t, fams, 0, "flowlens_agent_dns_answers_total", "result=unparsed")
	promtest.Expect(t, fams, 2, "flowlens_agent_dns_names", "")
	time.Sleep(50 * time.Millisecond)
	flows := h.Stop()
	m := agenttest.Match{Src: ad.pod, Dst: ad.backend, Sport: 43100, Dport: 9000, Proto: 17}
	var n int
	for _, f := range flows {
		if m.OK(f) {
			n++
			if f.SrcDNSName != "pod.test" || f.DstDNSName != "web.test" {
				t.Errorf("datagram: src_dns_name %q, dst_dns_name %q; want pod.test, web.test", f.SrcDNSName, f.DstDNSName)
			}
		}
	}
	if n != 1 {
		t.Errorf("datagram: %d records, want 1", n)
	}
	if t.Failed() {
		logFlows(t, flows)
	}
}

// Issue #29, TLS across a Service's NAT: a ClientHello to ClusterIP:443 and
// the backend's ServerHello are inspected under their flows' keys before
// NAT: the client's flow (pod -> ClusterIP) says client hello, the
// backend's (backend -> pod) the version; nothing is keyed on a tuple after
// NAT and no record is partial.
func TestServiceTLS(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl not installed")
	}
	l := dnsSvcLab(t, svcV4)
	dir := t.TempDir()
	key, cert := filepath.Join(dir, "k.pem"), filepath.Join(dir, "c.pem")
	if out, err := exec.Command("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
		"-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=flowlens-test", "-days", "1").CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v\n%s", err, out)
	}
	var srv *exec.Cmd
	if err := l.b.Do(func() error {
		srv = exec.Command("openssl", "s_server", "-accept", net.JoinHostPort(svcBackend, "443"), "-cert", cert, "-key", key, "-quiet")
		return srv.Start()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	h := agenttest.Start(t, svcAllIfaces, agent.Options{}, "--netns="+l.node.Name+","+l.a.Name+","+l.b.Name, "--features=tls,xlat")
	var out []byte
	var err error
	for range 50 { // until the server listens
		out, err = netlab.RunIn(l.a, "openssl", "s_client", "-connect", net.JoinHostPort(svcVIP, "443"),
			"-bind", fmt.Sprintf("%s:%d", svcPod, svcTLSClient), "-tls1_3")
		if err == nil && strings.Contains(string(out), "TLSv1.3") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(string(out), "TLSv1.3") {
		t.Fatalf("s_client did not report TLSv1.3: %v\n%s", err, out)
	}
	time.Sleep(50 * time.Millisecond)
	flows := h.Stop()
	for _, c := range []struct {
		what     string
		m, after agenttest.Match
		hello    bool
		version  string
	}{
		{"client", agenttest.Match{Src: svcPod, Dst: svcVIP, Dport: svcTLSPort, Proto: 6},
			agenttest.Match{Src: svcPod, Dst: svcBackend, Dport: svcTLSPort, Proto: 6}, true, ""},
		{"server", agenttest.Match{Src: svcBackend, Dst: svcPod, Sport: svcTLSPort, Proto: 6},
			agenttest.Match{Src: svcVIP, Dst: svcPod, Sport: svcTLSPort, Proto: 6}, false, "TLS 1.3"},
	} {
		_, _, recs := agenttest.Sum(flows, c.m)
		var hello bool
		var version string
		for _, r := range recs {
			hello = hello || r.TLSClientHello
			if r.TLSVersion != "" {
				version = r.TLSVersion
			}
			if *r.Partial || len(r.Interfaces) != svcAllIfaces {
				t.Errorf("%s: record partial %v, interfaces %s; want %d", c.what, *r.Partial, r.Ifaces(), svcAllIfaces)
			}
		}
		if len(recs) == 0 || hello != c.hello || version != c.version {
			t.Errorf("%s: %d records, client hello %v, version %q; want %v %q", c.what, len(recs), hello, version, c.hello, c.version)
		}
		if pk, _, recs := agenttest.Sum(flows, c.after); len(recs) != 0 {
			t.Errorf("%s: %d records (%d packets) under the tuple after NAT %+v", c.what, len(recs), pk, c.after)
		}
	}
	if t.Failed() {
		logFlows(t, flows)
	}
}
