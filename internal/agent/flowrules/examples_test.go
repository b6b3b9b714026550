package flowrules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExamples keeps docs/filters.md and docs/examples/filters/ true: every
// example file parses, compiles and does what the page says to the packets
// below, and the page shows each file verbatim.
func TestExamples(t *testing.T) {
	const dir = "../../../docs/examples/filters"
	doc, err := os.ReadFile("../../../docs/filters.md")
	if err != nil {
		t.Fatal(err)
	}
	syn := with(pkt("10.9.0.1:40000", "10.9.0.2:443"), flags(SYN))
	synAck := with(pkt("10.9.0.2:443", "10.9.0.1:40000"), flags(SYN|ACK))
	rst := with(pkt("10.9.0.1:40000", "10.9.0.2:443"), flags(RST|ACK))
	data := pkt("10.9.0.1:40000", "10.9.0.2:443")
	cases := map[string][]struct {
		p    Packet
		want Action
		rule string // the winner's name, "" for the default
	}{
		"namespace-cidr.yaml": {
			{pkt("10.244.9.7:40000", "10.9.0.2:443"), Accept, "team-a"},
			{pkt("10.9.0.2:443", "10.244.11.255:40000"), Accept, "team-a"},
			{pkt("fd00:10:244:8::5", "2001:db8::1"), Accept, "team-a-v6"},
			{pkt("10.244.12.1:40000", "10.9.0.2:443"), Reject, ""},
		},
		"exclude-health-checks.yaml": {
			{pkt("10.9.0.1:40000", "10.9.0.2:10256"), Reject, "no-health-checks"},
			{pkt("10.9.0.2:8080", "10.9.0.1:40000"), Reject, "no-health-checks"},
			{data, Accept, "everything-else"},
			{with(data, icmp(ICMP, 8, 0)), Accept, "everything-else"},
		},
		"exempt-port-in-cidr.yaml": {
			{pkt("10.9.0.1:40000", "10.244.8.10:9090"), Reject, "team-a-no-scrapes"},
			{pkt("10.244.8.10:9090", "10.9.0.1:40000"), Reject, "team-a-no-scrapes"},
			{pkt("10.9.0.1:40000", "10.244.8.10:443"), Accept, "team-a"},
			{pkt("10.9.0.1:40000", "10.9.0.2:9090"), Reject, ""},
		},
		"tcp-syn-rst.yaml": {
			{syn, Accept, "syn-rst"}, {synAck, Accept, "syn-rst"}, {rst, Accept, "syn-rst"},
			{data, Reject, ""}, {with(data, proto(UDP)), Reject, ""},
		},
		"drops-only.yaml": {
			{data, Accept, "drops"},
		},
		"sample-bulk-except-syn.yaml": {
			{syn, Accept, "syn"}, {synAck, Accept, "syn"}, {data, Accept, "bulk"}, {rst, Accept, "bulk"},
		},
	}

	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in %s: %v", dir, err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(doc), "```yaml\n"+string(data)+"```\n") {
				t.Errorf("docs/filters.md does not show %s as it is", name)
			}
			if !strings.Contains(string(doc), "(examples/filters/"+name+")") {
				t.Errorf("docs/filters.md does not link %s", name)
			}
			rules, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			tab, err := Compile(rules, Reject)
			if err != nil {
				t.Fatal(err)
			}
			if len(cases[name]) == 0 {
				t.Fatalf("no packets for %s: say what it does", name)
			}
			for _, c := range cases[name] {
				got, rule := tab.Action(c.p), ""
				if i, ok := tab.Match(c.p); ok {
					rule = tab.Rules[i].Name
				}
				if got != c.want || rule != c.rule {
					t.Errorf("%s:%d → %s:%d flags %#x: %s by %q, want %s by %q",
						c.p.Src, c.p.SrcPort, c.p.Dst, c.p.DstPort, c.p.TCPFlags, got, rule, c.want, c.rule)
				}
			}
		})
	}
	// The drops and sampling rules say what they do when they win.
	drops, _ := Parse([]byte("- {action: accept, drops: true}\n- {action: accept, sampling: 100}"))
	tab, _ := Compile(drops, Reject)
	if tab.Drops != 0b01 || tab.Rules[1].Sampling != 100 {
		t.Errorf("Drops %b, sampling %d; want 1, 100", tab.Drops, tab.Rules[1].Sampling)
	}
}
