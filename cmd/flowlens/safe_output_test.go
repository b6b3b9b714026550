package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/flow"
)

// Hostile names (terminal escape sequences, a C1 CSI, a line separator, a
// bidirectional override), as an interface name, netns, drop cause and DNS
// name a forged or compromised agent may send, reach every output format
// of observe without one raw control character, and the JSON formats
// carry them exactly, read back by a real decoder.
func TestObserveEscapesHostileNames(t *testing.T) {
	const (
		ifname = "\x1b[31mevil\x1b[0m"
		netns  = "ns\u009b2J"
		cause  = "\x1b]0;pwned\x07"
		dns    = "a\x1b[2J.example\u2028\u202eloc"
	)
	addr := startCollector(t)
	r := rec("10.0.0.1", "10.0.1.1", 40000, 53, 17, 1)
	r.Interfaces = []flow.Interface{{Name: ifname, Ifindex: 9, Netns: netns, Direction: flow.DirEgress}}
	r.DropPackets, r.DropBytes, r.DropCause = 1, 60, cause
	r.DNSID, r.DNSFlags, r.DNSName = 7, 0x0100, dns
	send(t, addr, "node-a", []flow.Record{r})

	for _, format := range []string{"table", "compact", "json", "jsonpb"} {
		out := observeOut(t, "--server", addr, "-o", format)
		for i := 0; i < len(out); {
			c, n := utf8.DecodeRuneInString(out[i:])
			if (c < 0x20 && c != '\n') || (c >= 0x7f && c <= 0x9f) || c == '\u2028' || c == '\u202e' || (c == utf8.RuneError && n == 1) {
				t.Errorf("%s: raw %U at %d: %q", format, c, i, out)
				break
			}
			i += n
		}
		switch format {
		case "json":
			var got struct {
				Interfaces []struct{ Name, Netns string }
				DropCause  string `json:"drop_cause"`
				DNSName    string `json:"dns_name"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("json: %v\n%s", err, out)
			}
			if got.Interfaces[0].Name != ifname || got.Interfaces[0].Netns != netns || got.DropCause != cause || got.DNSName != dns {
				t.Errorf("json: read back %+v", got)
			}
		case "jsonpb":
			var h flowv1.HistoryFlow
			if err := protojson.Unmarshal([]byte(out), &h); err != nil {
				t.Fatalf("jsonpb: %v\n%s", err, out)
			}
			f := h.GetFlow()
			if f.GetInterfaces()[0].GetName() != ifname || f.GetInterfaces()[0].GetNetns() != netns || f.GetDrops().GetDropCause() != cause || f.GetDns().GetDnsName() != dns {
				t.Errorf("jsonpb: read back %v", f)
			}
		case "table":
			for _, want := range []string{`\x1b[31mevil\x1b[0m`, `ns\u009b2J`, `\x1b]0;pwned\a`} {
				if !strings.Contains(out, want) {
					t.Errorf("%s: no %s in %q", format, want, out)
				}
			}
		case "compact":
			if !strings.Contains(out, `drops=1p/60B:\x1b]0;pwned\a dns=a\x1b[2J.example\u2028\u202eloc`) {
				t.Errorf("compact: names not escaped as expected: %q", out)
			}
		}
	}
}
