package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowlens/flowlens/pkg/flow"
)

// --tcp-failed and --tcp-result against a real collector: exactly the
// flows whose source had connects with those outcomes; the compact line
// shows the outcome.
func TestObserveTCPFilters(t *testing.T) {
	static := filepath.Join(t.TempDir(), "cluster.json")
	js, err := json.Marshal(cluster)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(static, js, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startCollector(t, "--k8s-static="+static)
	client, server := flow.TCPRoleClient, flow.TCPRoleServer
	// web-1 → db-0: 100 connects refused (port 41000) and the server's
	// RSTs; 10 timed out, their SYNs dropped (41001); 50 established
	// (41002); a UDP flow without tcp fields.
	refused := rec("10.0.0.1", "10.0.1.1", 41000, 5433, 6, 1)
	refused.TCPFlags, refused.TCPFields = 0x02, flow.TCPFields{TCPRole: client, TCPConnects: 100, TCPRefused: 100}
	resets := rec("10.0.1.1", "10.0.0.1", 5433, 41000, 6, 2)
	resets.TCPFlags, resets.TCPFields = 0x14, flow.TCPFields{TCPRole: server, TCPResets: 100}
	timedOut := rec("10.0.0.1", "10.0.1.1", 41001, 5434, 6, 3)
	timedOut.TCPFlags, timedOut.DropPackets, timedOut.DropBytes, timedOut.DropCause = 0x02, 30, 1800, "NETFILTER_DROP"
	timedOut.TCPFields = flow.TCPFields{TCPRole: client, TCPConnects: 10, TCPTimeouts: 10, TCPSynRetrans: 20}
	ok := rec("10.0.0.1", "10.0.1.1", 41002, 5432, 6, 4)
	ok.TCPFlags = 0x12
	ok.TCPFields = flow.TCPFields{TCPRole: client, TCPConnects: 50, TCPHandshake: 200 * time.Microsecond, TCPHandshakeMax: 300 * time.Microsecond}
	udp := rec("10.0.0.1", "10.96.0.10", 41003, 53, 17, 5)
	send(t, srv, "node-a", []flow.Record{refused, resets, timedOut, ok, udp})

	names := map[uint16]string{41000: "refused", 5433: "resets", 41001: "timedOut", 41002: "ok", 41003: "udp"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "refused resets timedOut ok udp"},
		{[]string{"--tcp-failed"}, "refused timedOut"},
		{[]string{"--tcp-result", "refused"}, "refused"},
		{[]string{"--tcp-result", "timeout"}, "timedOut"},
		{[]string{"--tcp-result", "established"}, "ok"},
		{[]string{"--tcp-result", "refused,timeout"}, "refused timedOut"},
		{[]string{"--tcp-result", "established", "--tcp-result", "timeout"}, "timedOut ok"},
		{[]string{"--not", "--tcp-failed"}, "resets ok udp"},
		{[]string{"--tcp-failed", "--tcp-result", "established"}, ""},
		{[]string{"--tcp-failed", "--drop-cause", "NETFILTER_DROP"}, "timedOut"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := observeOut(t, append([]string{"--server", srv, "--last=0", "-o", "json"}, tc.args...)...)
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if line == "" {
					continue
				}
				var f struct {
					SrcPort uint16 `json:"src_port"`
				}
				if err := json.Unmarshal([]byte(line), &f); err != nil {
					t.Fatalf("not JSON: %q: %v", line, err)
				}
				got = append(got, names[f.SrcPort])
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("got %q, want %q", s, tc.want)
			}
		})
	}

	// compact: the role and the outcomes.
	for port, want := range map[string]string{
		"41000": " tcp 1.5KiB 1p flags=SYN tcp=client refused=100\n",
		"5433":  " tcp 1.5KiB 1p flags=RST|ACK tcp=server resets=100\n",
		"41001": " tcp 1.5KiB 1p flags=SYN drops=30p/1.8KiB:NETFILTER_DROP tcp=client timeout=10 syn_retrans=20\n",
		"41002": " tcp 1.5KiB 1p flags=SYN|ACK tcp=client established=50 handshake=200µs\n",
		"41003": " 10.96.0.10:53 udp 1.5KiB 1p\n",
	} {
		if out := observeOut(t, "--server", srv, "--last=0", "-o", "compact", "--from-port", port); !strings.HasSuffix(out, want) {
			t.Errorf("compact of %s: %q, want suffix %q", port, out, want)
		}
	}
}

// Bad --tcp-result values are refused before anything is asked, naming
// the flag.
func TestObserveTCPBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tcp-result", "refused,reset"}, `invalid --tcp-result "reset": must be one of established, refused, timeout`},
		{[]string{"--tcp-failed=maybe"}, `invalid --tcp-failed "maybe": must be true or false`},
	} {
		var out, errOut strings.Builder
		code := run(context.Background(), append([]string{"observe"}, tc.args...), nil, &out, &errOut)
		if code != 2 || !strings.HasPrefix(errOut.String(), "flowlens observe: "+tc.want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}
