package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/agent/flowrules"
)

const goodRules = `# health checks are noise
- name: no-health
  action: reject
  destination_ports: 10256
- name: rest
  action: accept
  cidr: 10.1.0.0/16
`

var wantGoodRules = []flowrules.Rule{
	{Name: "no-health", Action: flowrules.Reject, DestinationPorts: []flowrules.PortRange{{First: 10256, Last: 10256}}},
	{Name: "rest", Action: flowrules.Accept, CIDR: netip.MustParsePrefix("10.1.0.0/16")},
}

// badRule is rule 1, on line 4.
const badRule = `- {name: ok, action: accept}
- name: no-health
  action: reject
  destination_ports: "100-80"
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// indent nests a rule list under a key of the config file.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

func TestFilterRulesLoad(t *testing.T) {
	rulesFile := writeFile(t, "rules.yaml", goodRules)
	jsonFile := writeFile(t, "rules.json", `[{"name": "no-health", "action": "reject", "destination_ports": 10256},
		{"name": "rest", "action": "accept", "cidr": "10.1.0.0/16"}]`)
	inline := writeFile(t, "agent.yaml", "sampling: 2\nfilter_rules:\n"+indent(goodRules)+"filter_default: accept\n")
	byPath := writeFile(t, "agent.yaml", "filter_rules: "+rulesFile+"\n")
	emptyInline := writeFile(t, "agent.yaml", "filter_rules: []\n")

	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		file     string // want FilterRulesFile
		rules    []flowrules.Rule
		dflt     flowrules.Action
		nilRules bool
	}{
		{"flag", []string{"--filter-rules", rulesFile}, nil, rulesFile, wantGoodRules, flowrules.Reject, false},
		{"JSON", []string{"--filter-rules", jsonFile}, nil, jsonFile, wantGoodRules, flowrules.Reject, false},
		{"environment", nil, map[string]string{"FLOWLENS_AGENT_FILTER_RULES": rulesFile, "FLOWLENS_AGENT_FILTER_DEFAULT": "ACCEPT"},
			rulesFile, wantGoodRules, flowrules.Accept, false},
		{"inline", []string{"--config", inline}, nil, "", wantGoodRules, flowrules.Accept, false},
		{"a path in the config file", []string{"--config", byPath}, nil, rulesFile, wantGoodRules, flowrules.Reject, false},
		{"an empty inline list and a file", []string{"--config", emptyInline, "--filter-rules", rulesFile}, nil,
			rulesFile, wantGoodRules, flowrules.Reject, false},
		{"the last flag wins", []string{"--filter-rules", jsonFile, "--filter-rules", rulesFile}, nil,
			rulesFile, wantGoodRules, flowrules.Reject, false},
		{"--filter-rules= drops an earlier file", nil, map[string]string{"FLOWLENS_AGENT_FILTER_RULES": rulesFile},
			"", nil, flowrules.Reject, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.nilRules {
				args = append(args, "--filter-rules=")
			}
			c, err := Load(args, withEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.FilterRules, tc.rules) || c.FilterRulesFile != tc.file || c.FilterDefault != tc.dflt {
				t.Errorf("got rules %+v from %q, default %s\nwant rules %+v from %q, default %s",
					c.FilterRules, c.FilterRulesFile, c.FilterDefault, tc.rules, tc.file, tc.dflt)
			}
		})
	}
}

// The compiled table is what the datapath gets: the rules, then the default.
func TestFilterTable(t *testing.T) {
	rulesFile := writeFile(t, "rules.yaml", goodRules)
	pkt := func(src string, dport uint16) flowrules.Packet {
		return flowrules.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr("192.168.0.1"),
			Proto: flowrules.TCP, SrcPort: 40000, DstPort: dport, Direction: flowrules.Ingress}
	}
	for _, tc := range []struct {
		args []string
		p    flowrules.Packet
		want flowrules.Action
	}{
		{[]string{"--filter-rules", rulesFile}, pkt("10.1.0.1", 443), flowrules.Accept},
		// rest's /16 wins over no-health, which has no cidr.
		{[]string{"--filter-rules", rulesFile}, pkt("10.1.0.1", 10256), flowrules.Accept},
		{[]string{"--filter-rules", rulesFile}, pkt("10.2.0.1", 10256), flowrules.Reject},
		{[]string{"--filter-rules", rulesFile}, pkt("10.2.0.1", 443), flowrules.Reject},
		{[]string{"--filter-rules", rulesFile, "--filter-default", "accept"}, pkt("10.2.0.1", 443), flowrules.Accept},
		// Without rules --filter-default is accepted and not used: every
		// packet is kept, as with no filter at all.
		{[]string{"--filter-default", "reject"}, pkt("10.2.0.1", 443), flowrules.Accept},
		{nil, pkt("10.2.0.1", 443), flowrules.Accept},
	} {
		c, err := Load(tc.args, withEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		tab, err := c.FilterTable()
		if err != nil {
			t.Fatal(err)
		}
		if got := tab.Action(tc.p); got != tc.want {
			t.Errorf("%v, %s:%d: %s, want %s", tc.args, tc.p.Src, tc.p.DstPort, got, tc.want)
		}
	}
}

func TestFilterRulesErrors(t *testing.T) {
	rulesFile := writeFile(t, "rules.yaml", goodRules)
	badFile := writeFile(t, "bad.yaml", badRule)
	syntaxFile := writeFile(t, "syntax.yaml", "- {action: accept\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	inline := writeFile(t, "agent.yaml", "filter_rules:\n"+indent(goodRules))
	badInline := writeFile(t, "agent.yaml", "sampling: 2\nfilter_rules:\n"+indent(badRule))
	notList := writeFile(t, "agent.yaml", "filter_rules: {action: accept}\n")
	badDefault := writeFile(t, "agent.yaml", "filter_default: drop\n")

	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad rule in the file", []string{"--filter-rules", badFile}, nil,
			`invalid --filter-rules "` + badFile + `": line 4: filter rule 1 ("no-health"): destination_ports "100-80": range is upside down`},
		{"bad rule in the file named by the environment", nil, map[string]string{"FLOWLENS_AGENT_FILTER_RULES": badFile},
			`invalid FLOWLENS_AGENT_FILTER_RULES "` + badFile + `": line 4: filter rule 1 ("no-health"): destination_ports "100-80": range is upside down`},
		{"bad inline rule", []string{"--config", badInline}, nil,
			badInline + `:6: filter rule 1 ("no-health"): destination_ports "100-80": range is upside down`},
		{"inline rules are not a list", []string{"--config", notList}, nil,
			notList + `:1: filter rules: must be a list of rules`},
		{"YAML syntax", []string{"--filter-rules", syntaxFile}, nil,
			`invalid --filter-rules "` + syntaxFile + `": filter rules: yaml: line 1: did not find expected ',' or '}'`},
		{"missing file", []string{"--filter-rules", missing}, nil,
			`invalid --filter-rules "` + missing + `": no such file or directory`},
		{"both inline and a file", []string{"--config", inline, "--filter-rules", rulesFile}, nil,
			`invalid --filter-rules "` + rulesFile + `": the config file lists filter_rules inline: give the rules in one place`},
		{"bad default", []string{"--filter-default", "drop"}, nil,
			`invalid --filter-default "drop": must be accept or reject`},
		{"bad default in the file", []string{"--config", badDefault}, nil,
			badDefault + `:1: invalid filter_default "drop": must be accept or reject`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, withEnv(tc.env))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got  %v\n want %s", err, tc.want)
				if err == nil {
					t.Logf("config %+v", c)
				}
			}
		})
	}
}
