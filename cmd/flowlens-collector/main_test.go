package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/collector"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/shared/version"
)

// notInCluster is the in-cluster configuration outside a cluster.
func notInCluster() (*rest.Config, error) { return nil, rest.ErrNotInCluster }

// start runs the collector with args on free loopback ports (flows and
// metrics), as outside a cluster.
func start(t *testing.T, args ...string) (addr string, out *collectortest.SyncBuffer, stop func() int) {
	t.Helper()
	a, out, stop := startFull(t, args...)
	return a.GRPC.String(), out, stop
}

func startFull(t *testing.T, args ...string) (a collector.Addrs, out *collectortest.SyncBuffer, stop func() int) {
	t.Helper()
	out = &collectortest.SyncBuffer{}
	errOut := &collectortest.SyncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan collector.Addrs, 1)
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0"}, args...), out, errOut,
			&env{Options: collector.Options{Ready: func(a collector.Addrs) { addrCh <- a }, InCluster: notInCluster}})
	}()
	select {
	case a = <-addrCh:
	case c := <-code:
		t.Fatalf("collector exited with %d: %s", c, errOut.String())
	}
	var once sync.Once
	res := 0
	stop = func() int {
		once.Do(func() { cancel(); res = <-code })
		return res
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", errOut.String())
		}
	})
	return a, out, stop
}

func TestJSONLinesAreTheAgentsPlusIdentity(t *testing.T) {
	addr, out, stop := start(t)
	recs := collectortest.Records()
	collectortest.Send(t, addr, recs)
	if code := stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	lines := out.Lines()
	if len(lines) != len(recs) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(recs), strings.Join(lines, "\n"))
	}
	for i := range recs {
		agent := string(recs[i].AppendJSON(nil))
		want := agent[:len(agent)-1] + `,"node_name":"node-7","agent_ip":"192.0.2.1"}`
		if lines[i] != want || i == 0 && !strings.Contains(lines[i], `"tunnel_type":"vxlan","tunnel_src_addr":"192.0.2.1","tunnel_dst_addr":"192.0.2.2","tunnel_vni":1`) {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], want)
		}
	}
}

func TestTableAndFilters(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // substrings of the expected rows, in order
	}{
		{nil, []string{
			"10.0.0.1:40000        → 10.0.0.53:53           udp                120B         2  pod-a/veth1(in),eth0(out)     -                       -          node-7",
			"10.0.0.1:40001        → 192.168.7.7:443        tcp              8.8KiB        10  eth0(both)                    1p/60B NETFILTER_DROP   1.5ms      node-7",
			"fd00::1               → fd00::2                icmpv6:128/0       104B         1  -                             -                       -          node-7",
		}},
		{[]string{"--proto", "udp"}, []string{"10.0.0.53:53"}},
		{[]string{"--port", "443,53"}, []string{"10.0.0.53:53", "192.168.7.7:443"}},
		{[]string{"--ip", "192.168.0.0/16"}, []string{"192.168.7.7:443"}},
		{[]string{"--ip", "fd00::2", "--proto", "58"}, []string{"fd00::2"}},
		{[]string{"--ip", "10.0.0.1", "--proto", "tcp", "--port", "53"}, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			addr, out, stop := start(t, append([]string{"--output", "table"}, tc.args...)...)
			collectortest.Send(t, addr, collectortest.Records())
			stop()
			lines := out.Lines()
			if len(tc.want) == 0 {
				if len(lines) != 0 {
					t.Fatalf("want no output, got:\n%s", strings.Join(lines, "\n"))
				}
				return
			}
			if len(lines) != 1+len(tc.want) || !strings.HasPrefix(lines[0], "SRC") {
				t.Fatalf("want a header and %d rows, got:\n%s", len(tc.want), strings.Join(lines, "\n"))
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[1+i], w) {
					t.Errorf("row %d:\n got %q\nwant it to contain %q", i, lines[1+i], w)
				}
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--output", "xml"}, {"--ip", "10.0.0.300"}, {"--port", "70000"}, {"--proto", "bogus"},
		{"--tls-cert", "x"}, {"--tls-client-ca", "ca.pem"}, {"extra"},
	} {
		var errOut bytes.Buffer
		if code := run(context.Background(), args, &bytes.Buffer{}, &errOut, nil); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
}

// Every value is range-checked with an error naming the flag (or the
// variable or YAML key it came from), in the collector's own words, and exit
// status 2.
func TestRangeChecks(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--max-agents=-5"}, nil, `invalid --max-agents "-5": must be -1 (unlimited) or at least 1`},
		{[]string{"--max-agents", "0"}, nil, `invalid --max-agents "0": must be -1 (unlimited) or at least 1`},
		{[]string{"--max-agents", "many"}, nil, `invalid --max-agents "many": must be an integer`},
		{[]string{"--max-flows-per-batch=0"}, nil, `invalid --max-flows-per-batch "0": must be at least 1`},
		{[]string{"--max-message-bytes=100"}, nil, `invalid --max-message-bytes "100": must be from 1024 to 1073741824`},
		{[]string{"--max-message-bytes=2147483648"}, nil, `invalid --max-message-bytes "2147483648": must be from 1024 to 1073741824`},
		{[]string{"--shutdown-grace=0s"}, nil, `invalid --shutdown-grace "0s": must be more than 0`},
		{[]string{"--shutdown-grace=soon"}, nil, `invalid --shutdown-grace "soon": must be a duration such as 5s or 500ms`},
		{[]string{"--k8s-sync-timeout=-1s"}, nil, `invalid --k8s-sync-timeout "-1s": must be more than 0`},
		{[]string{"--output", "xml"}, nil, `invalid --output "xml": must be json, table or none`},
		{[]string{"--log-level", "verbose"}, nil, `invalid --log-level "verbose": must be one of debug, info, warn, error`},
		{[]string{"--log-level", "info+2"}, nil, `invalid --log-level "info+2": must be one of debug, info, warn, error`},
		{[]string{"--subnet-labels", "corp"}, nil, `invalid --subnet-labels "corp": must be name=CIDR, such as corp=10.0.0.0/8`},
		{[]string{"--subnet-labels", "corp=10.0.0.0/33"}, nil,
			`invalid --subnet-labels "corp=10.0.0.0/33": "10.0.0.0/33" is not a CIDR such as 10.0.0.0/8 or fd00::/8`},
		{[]string{"--subnet-labels", "a=10.0.0.0/8", "--subnet-labels", "b=10.1.0.0/8"}, nil,
			`invalid --subnet-labels "a=10.0.0.0/8,b=10.1.0.0/8": subnet label "b=10.1.0.0/8": 10.0.0.0/8 is already labelled "a"`},
		{[]string{"--ip", "10.0.0.1,10.0.0.300"}, nil, `invalid --ip "10.0.0.300": must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8`},
		{[]string{"--port", "443", "--port", "70000"}, nil, `invalid --port "70000": must be a port number from 0 to 65535`},
		{[]string{"--proto", "bogus"}, nil, `invalid --proto "bogus": must be tcp, udp, icmp, icmpv6, sctp, gre, esp or a protocol number from 0 to 255`},
		{[]string{"--proto", "256"}, nil, `invalid --proto "256": must be tcp, udp, icmp, icmpv6, sctp, gre, esp or a protocol number from 0 to 255`},
		{[]string{"--metrics", "flow_bytes"}, nil,
			`invalid --metrics "flow_bytes": unknown metric: must be all, none or some of flow_bytes_total, flow_packets_total, node_bytes_total, drop_packets_total, drop_bytes_total, rtt_seconds, retransmits_total, flows_total, sampling, translated_bytes_total, translated_flows_total, tls_flows_total, dns_latency_seconds, dns_responses_total, dns_timeouts_total, tcp_connects_total, tcp_resets_total, tcp_zero_windows_total, tcp_handshake_seconds`},
		{[]string{"--listen", "9990"}, nil, `invalid --listen "9990": must be host:port, e.g. :9990 or 127.0.0.1:9990: missing port in address`},
		{[]string{"--listen", ":99999"}, nil, `invalid --listen ":99999": port must be a number from 0 to 65535`},
		// Plaintext off the machine only when asked for (issue #27).
		{[]string{"--listen", ":9990"}, nil, `invalid --listen ":9990": is not a loopback address: serve TLS (--tls-cert and --tls-key), or give --insecure-plaintext to let anyone who reaches it read and write flows in plaintext`},
		{[]string{"--listen", "10.0.0.1:9990"}, nil, `invalid --listen "10.0.0.1:9990": is not a loopback address: serve TLS (--tls-cert and --tls-key), or give --insecure-plaintext to let anyone who reaches it read and write flows in plaintext`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_LISTEN": "collector.example:9990"}, `invalid --listen "collector.example:9990": is not a loopback address: serve TLS (--tls-cert and --tls-key), or give --insecure-plaintext to let anyone who reaches it read and write flows in plaintext`},
		{[]string{"--listen", "", "--insecure-plaintext"}, nil, `--tls-cert and --insecure-plaintext need a gRPC listener: --listen is ""`},
		{[]string{"--auth", "rbac"}, nil, `invalid --auth "rbac": must be auto, kubernetes or none`},
		{[]string{"--metrics-address", "9401"}, nil, `invalid --metrics-address "9401": must be host:port, e.g. :9990 or 127.0.0.1:9990: missing port in address`},
		{[]string{"--web-config-file", filepath.Join(dir, "web.yml")}, nil,
			fmt.Sprintf(`invalid --web-config-file %q: open %s: no such file or directory`, filepath.Join(dir, "web.yml"), filepath.Join(dir, "web.yml"))},
		{[]string{"--k8s-enrich=maybe"}, nil, `invalid --k8s-enrich "maybe": must be true, false or auto`},
		{[]string{"--pod-labels=yes"}, nil, `invalid --pod-labels "yes": must be true or false`},
		{[]string{"--metrics-series-ttl=500ms"}, nil, `invalid --metrics-series-ttl "500ms": must be 0 (never) or at least 1s`},
		{[]string{"--metrics-series-ttl=-1m"}, nil, `invalid --metrics-series-ttl "-1m0s": must be 0 (never) or at least 1s`},
		{[]string{"--metrics-max-series=-1"}, nil, `invalid --metrics-max-series "-1": must be 0 (no cap) or more`},
		{[]string{"--tls-cert", "x"}, nil, `--tls-cert and --tls-key must be given together` + "\n" + `invalid --tls-cert "x": no such file or directory`},
		{[]string{"--kubeconfig", dir}, nil, fmt.Sprintf(`invalid --kubeconfig %q: is a directory, not a file`, dir)},
		{[]string{"--history-size=-1"}, nil, `invalid --history-size "-1": must be 0 (no history) or more`},
		{[]string{"--history-max-age=0s"}, nil, `invalid --history-max-age "0s": must be more than 0`},
		{[]string{"--history-max-filter-terms=0"}, nil, `invalid --history-max-filter-terms "0": must be at least 1`},
		{[]string{"--history-max-request-bytes=-1"}, nil, `invalid --history-max-request-bytes "-1": must be at least 1`},
		{[]string{"--history-max-followers=0"}, nil, `invalid --history-max-followers "0": must be at least 1`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_HISTORY_MAX_FOLLOWERS_PER_CLIENT": "0"}, `invalid --history-max-followers-per-client "0": must be at least 1`},
		{[]string{"--history-max-queries=0"}, nil, `invalid --history-max-queries "0": must be at least 1`},
		{[]string{"--ui-listen=0.0.0.0:9402"}, nil, `invalid --ui-listen "0.0.0.0:9402": is not a loopback address: serve TLS (--tls-cert and --tls-key), or give --insecure-plaintext to let anyone who reaches it read flows in plaintext`},
		{[]string{"--ui-max-nodes=0"}, nil, `invalid --ui-max-nodes "0": must be at least 1`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_UI_MAX_EDGES": "-3"}, `invalid --ui-max-edges "-3": must be at least 1`},
		{[]string{"--max-streams-per-connection=0"}, nil, `invalid --max-streams-per-connection "0": must be at least 1`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_HISTORY_SIZE": "lots"}, `invalid FLOWLENS_COLLECTOR_HISTORY_SIZE "lots": must be an integer`},
		{[]string{"extra"}, nil, `unexpected argument "extra": flowlens-collector takes only flags (--help lists them)`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_MAX_AGENTS": "-2"}, `invalid --max-agents "-2": must be -1 (unlimited) or at least 1`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_PORT": "http"}, `invalid FLOWLENS_COLLECTOR_PORT "http": must be a port number from 0 to 65535`},
		{nil, map[string]string{"FLOWLENS_COLLECTOR_CONFIG": filepath.Join(dir, "missing.yaml")},
			fmt.Sprintf(`invalid FLOWLENS_COLLECTOR_CONFIG %q: no such file or directory`, filepath.Join(dir, "missing.yaml"))},
	} {
		var errOut bytes.Buffer
		// A loopback --listen unless the case sets one: the default
		// (":9990", plaintext) is refused, which is a case of its own.
		getenv := func(k string) string {
			if v, ok := tc.env[k]; ok || k != "FLOWLENS_COLLECTOR_LISTEN" {
				return v
			}
			return "127.0.0.1:0"
		}
		env := &env{Options: collector.Options{InCluster: notInCluster}, getenv: getenv}
		if code := run(context.Background(), tc.args, &bytes.Buffer{}, &errOut, env); code != 2 {
			t.Errorf("%v %v: exit %d, want 2 (%s)", tc.args, tc.env, code, errOut.String())
			continue
		}
		if want := "flowlens-collector: " + tc.want + "\n"; errOut.String() != want {
			t.Errorf("%v %v:\n got  %s want %s", tc.args, tc.env, errOut.String(), want)
		}
	}
}

// A key the collector does not know fails with the file and line, and exit
// status 2 (the option table's parsing is tested beside it, in
// internal/collector).
func TestUnknownConfigKey(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("output: table\nmax_streams: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	if code := run(context.Background(), []string{"--config", bad}, &bytes.Buffer{}, &errOut, &env{Options: collector.Options{InCluster: notInCluster}}); code != 2 ||
		errOut.String() != fmt.Sprintf("flowlens-collector: %s:2: unknown key \"max_streams\"\n", bad) {
		t.Errorf("unknown key: exit %d, %q", code, errOut.String())
	}
}

// --help prints the help on stdout, --version the version; both exit 0.
func TestHelpAndVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, &out, &errOut, nil); code != 0 || errOut.Len() != 0 {
		t.Errorf("--version: exit %d, stderr %q", code, errOut.String())
	}
	want := fmt.Sprintf("flowlens-collector %s (%s %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
	out.Reset()
	if code := run(context.Background(), []string{"-h"}, &out, &errOut, nil); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for _, w := range []string{
		"Usage: flowlens-collector [flags]",
		"FLOWLENS_COLLECTOR_SOME_NAME",
		"(or FLOWLENS_COLLECTOR_CONFIG)",
		"Receiving from agents:\n" + `  --listen host:port           address serving agents (Export) and the flow history (GetFlows); "" serves no gRPC at all`,
		`--max-agents n               most agent streams served at once, and as many capture streams (AgentCapture, one per agent identity) (-1: unlimited) (default "4096")`,
		`--insecure-plaintext bool    serve plaintext gRPC on an address that is not loopback`,
		`--auth auto|kubernetes|none  per-call authorization`,
		"\nFlow history:\n  --history-size n ",
		"--port list", "(repeatable)", "--version",
	} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help lacks %q:\n%s", w, out.String())
		}
	}
}
