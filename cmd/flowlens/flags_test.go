package main

import (
	"context"
	"strings"
	"testing"
)

// Bad values are refused before anything is asked, with exit status 2 and
// a message naming the flag.
func TestBadFilterValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ip", "10.0.0.300"}, `invalid --ip "10.0.0.300": must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8`},
		{[]string{"--from-ip", "10.0.0.0/33"}, `invalid --from-ip "10.0.0.0/33": must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8`},
		{[]string{"--to-ip", "10.0.0.1,web"}, `invalid --to-ip "web": must be an IP address or CIDR, such as 10.0.0.1 or 10.0.0.0/8`},
		{[]string{"--port", "70000"}, `invalid --port "70000": must be a port number from 0 to 65535`},
		{[]string{"--from-port", "http"}, `invalid --from-port "http": must be a port number from 0 to 65535`},
		{[]string{"--to-port", "-1"}, `invalid --to-port "-1": must be a port number from 0 to 65535`},
		{[]string{"--protocol", "tcp,bogus"}, `invalid --protocol "bogus": must be tcp, udp, icmp, icmpv6, sctp, gre, esp or a protocol number from 0 to 255`},
		{[]string{"--drops=maybe"}, `invalid --drops "maybe": must be true or false`},
		{[]string{"--drop-cause", "not a cause"}, `invalid --drop-cause "not a cause": must be a kernel drop reason name such as NETFILTER_DROP`},
		{[]string{"--tcp-flags", "SYN|BOGUS"}, `invalid --tcp-flags "SYN|BOGUS": must be TCP flag names joined with |: FIN, SYN, RST, PSH, ACK, URG, ECE, CWR, SYN_ACK, FIN_ACK, RST_ACK`},
		{[]string{"--rtt-above", "5"}, `invalid --rtt-above "5": must be a duration such as 10ms or 1.5s`},
		{[]string{"--rtt-above", "1ms", "--rtt-above", "2ms"}, `--rtt-above given twice: give it once`},
		{[]string{"--dns-rcode", "NXDOMAIN,16"}, `invalid --dns-rcode "16": must be a DNS response code: NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED... or a number from 0 to 15`},
		{[]string{"--namespace", ","}, `invalid --namespace ",": needs at least one value`},
		{[]string{"--not"}, `--not must be followed by a filter flag`},
		{[]string{"--not", "--last", "3"}, `--not must be followed by a filter flag, not --last`},
		{[]string{"--not", "--not", "--drops"}, `--not --not: --not negates the next filter flag`},
		{[]string{"-o", "yaml"}, `invalid --output "yaml": must be table, compact, json or jsonpb`},
		{[]string{"--last", "ten"}, `invalid --last "ten": must be a number of flows (0: all)`},
		{[]string{"--reorder-window", "-1s"}, `invalid --reorder-window "-1s": must be a duration such as 2s or 500ms (0: no waiting)`},
		{[]string{"--since", "yesterday"}, `invalid --since "yesterday": must be a duration ago such as 5m or an RFC 3339 time such as 2026-11-24T08:00:00Z`},
		{[]string{"--since", "1m", "--until", "5m"}, `--until`},
		{[]string{"-f", "--until", "1m"}, `--until and --follow: choose one (followed flows have not ended yet)`},
		{[]string{"--server", "nohost"}, `invalid --server "nohost": must be host:port, such as flowlens-collector.flowlens.svc:9990`},
		{[]string{"--server", "h:1", "--kubeconfig", "/dev/null"}, `--server and --kubeconfig/--context: choose one`},
		{[]string{"--tls-cert", "/nonexistent"}, `--tls-cert and --tls-key must be given together`},
		{[]string{"--tls-ca", "/nonexistent/ca.pem"}, `invalid --tls-ca "/nonexistent/ca.pem"`},
		{[]string{"--bogus"}, `unknown flag --bogus (--help lists them)`},
		{[]string{"--port"}, `--port needs a value (list)`},
		{[]string{"shop"}, `unexpected argument "shop": flowlens observe takes only flags (--help lists them)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(context.Background(), append([]string{"observe"}, tc.args...), nil, &out, &errOut)
			if code != 2 || !strings.HasPrefix(errOut.String(), "flowlens observe: "+tc.want) || out.Len() != 0 {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and %q", code, errOut.String(), out.String(), "flowlens observe: "+tc.want)
			}
		})
	}
}

// --help lists every flag; the command names its subcommand.
func TestHelp(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(context.Background(), []string{"observe", "--help"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"\nCollectors:\n", "\nOutput:\n", "\nFilters:\n", "  -n, --collector-namespace namespace ", "  -o, --output format ", "FLOWLENS_OBSERVE_SOME_NAME"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--help lacks %q:\n%s", w, out.String())
		}
	}
	for _, d := range observeFlags {
		if !strings.Contains(out.String(), "--"+d.Name) {
			t.Errorf("--help lacks --%s", d.Name)
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"bogus"}, nil, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "bogus"`) {
		t.Errorf("bogus command: exit %d, %q", code, errOut.String())
	}
}

// Observe's settings also come from FLOWLENS_OBSERVE_* variables; filters
// given there and on the command line add up, and a bad value names the
// variable.
func TestObserveEnv(t *testing.T) {
	env := map[string]string{"FLOWLENS_OBSERVE_OUTPUT": "json", "FLOWLENS_OBSERVE_NAMESPACE": "shop"}
	o, err := observeSpec.Load([]string{"--port", "53"}, func(k string) string { return env[k] })
	if err != nil || o.output != "json" || len(o.filters) != 1 ||
		strings.Join(o.filters[0].Namespace, ",") != "shop" || len(o.filters[0].Port) != 1 || o.filters[0].Port[0] != 53 {
		t.Errorf("got %+v, %v", o, err)
	}
	env["FLOWLENS_OBSERVE_OUTPUT"] = "yaml"
	_, err = observeSpec.Load(nil, func(k string) string { return env[k] })
	if want := `invalid FLOWLENS_OBSERVE_OUTPUT "yaml": must be table, compact, json or jsonpb`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}
