package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// applyDryRun server-side applies a FlowCollector whose spec.agent.flowFilter
// is the given YAML, as kubectl would send it, without storing it.
func applyDryRun(flowFilter string) error {
	manifest := "apiVersion: flowlens.io/v1alpha1\nkind: FlowCollector\nmetadata: {name: cluster}\nspec:\n  agent:\n    flowFilter:\n" +
		indent(flowFilter, "      ")
	return k8s.Patch(context.Background(), newCollector(""), client.RawPatch("application/apply-patch+yaml", []byte(manifest)),
		client.FieldOwner("test"), client.DryRunAll)
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// TestFlowFilterSchemaRejects: the API server refuses bad flow filter rules,
// and its message names the rule (by index), the field and what is wrong.
func TestFlowFilterSchemaRejects(t *testing.T) {
	needEnv(t)
	many := "rules:\n"
	for i := range 65 {
		many += fmt.Sprintf("- {name: r%d, action: accept}\n", i)
	}
	for _, tc := range []struct {
		name, flowFilter, want string
	}{
		{"bad cidr", `rules: [{action: accept, cidr: 10.0.0.0/33}]`,
			`spec.agent.flowFilter.rules[0].cidr: Invalid value: "10.0.0.0/33": not a CIDR or an IP address: write e.g. 10.0.0.0/16, fd00::/64 or 10.0.0.1`},
		{"bad address", `rules: [{action: accept}, {action: accept, peerCIDR: 10.0.0.256}]`,
			`spec.agent.flowFilter.rules[1].peerCIDR: Invalid value: "10.0.0.256": not a CIDR or an IP address`},
		{"host bits", `rules: [{action: accept, cidr: 10.1.2.3/16}]`,
			`spec.agent.flowFilter.rules[0].cidr: Invalid value: "10.1.2.3/16": has host bits set: write 10.1.0.0/16`},
		{"ipv4-mapped ipv6", `rules: [{action: accept, cidr: "::ffff:10.0.0.0/104"}]`,
			`spec.agent.flowFilter.rules[0].cidr: Invalid value: "::ffff:10.0.0.0/104": not a CIDR or an IP address`},
		{"ipv4-mapped address", `rules: [{action: accept, peerCIDR: "::ffff:10.0.0.1"}]`,
			`spec.agent.flowFilter.rules[0].peerCIDR: Invalid value: "::ffff:10.0.0.1": not a CIDR or an IP address`},
		{"cidr families", `rules: [{action: accept, cidr: 10.0.0.0/8, peerCIDR: "fd00::1"}]`,
			`spec.agent.flowFilter.rules[0].peerCIDR: Invalid value: cidr and peerCIDR must both be IPv4 or both IPv6: a flow has one address family`},
		{"icmp with ipv6", `rules: [{action: accept, protocol: icmp, cidr: "fd00::/8"}]`,
			`spec.agent.flowFilter.rules[0].protocol: Invalid value: protocol icmp cannot match cidr fd00::/8: use icmpv6 for IPv6`},
		{"icmpv6 with ipv4", `rules: [{action: accept, protocol: 58, peerCIDR: 10.0.0.1}]`,
			`spec.agent.flowFilter.rules[0].protocol: Invalid value: protocol 58 cannot match peerCIDR 10.0.0.1: use icmp for IPv4`},
		{"upside-down range", `rules: [{action: accept}, {action: accept}, {action: accept, protocol: tcp, sourcePorts: "100-80"}]`,
			`spec.agent.flowFilter.rules[2].sourcePorts: Invalid value: "100-80": a port range goes from low to high, e.g. 80-100, not 100-80`},
		{"upside-down range in a list", `rules: [{action: accept, ports: "80,443,9000-8000"}]`,
			`spec.agent.flowFilter.rules[0].ports: Invalid value: "80,443,9000-8000": a port range goes from low to high`},
		{"port number out of range", `rules: [{action: accept, destinationPorts: 70000}]`,
			`spec.agent.flowFilter.rules[0].destinationPorts: Invalid value: 70000: ports must be from 0 to 65535`},
		{"port out of range in a list", `rules: [{action: accept, ports: "80,65536"}]`,
			`spec.agent.flowFilter.rules[0].ports: Invalid value: "80,65536": ports must be from 0 to 65535`},
		{"port out of range in a range", `rules: [{action: accept, sourcePorts: "1024-99999"}]`,
			`spec.agent.flowFilter.rules[0].sourcePorts: Invalid value: "1024-99999": ports must be from 0 to 65535`},
		{"port syntax", `rules: [{action: accept, ports: "80;443"}]`,
			`spec.agent.flowFilter.rules[0].ports: Invalid value: "80;443": not a port list: write a port (443), a range (80-100) or a comma-separated list of them (80,8000-8100)`},
		{"unknown protocol", `rules: [{action: accept, protocol: tcpp}]`,
			`spec.agent.flowFilter.rules[0].protocol: Invalid value: "tcpp": unknown protocol: use tcp, udp, icmp, icmpv6, sctp or a protocol number from 0 to 255`},
		{"protocol number", `rules: [{action: accept, protocol: 256}]`,
			`spec.agent.flowFilter.rules[0].protocol: Invalid value: 256: unknown protocol: use`},
		{"protocol upper case", `rules: [{action: accept, protocol: TCP}]`,
			`spec.agent.flowFilter.rules[0].protocol: Invalid value: "TCP": unknown protocol: use`},
		{"ports with icmp", `rules: [{action: accept}, {action: accept, protocol: icmp, ports: 80}]`,
			`spec.agent.flowFilter.rules[1].ports: Invalid value: ports need protocol tcp, udp or sctp, not icmp`},
		{"destination ports with protocol 1", `rules: [{action: accept, protocol: 1, destinationPorts: "53"}]`,
			`spec.agent.flowFilter.rules[0].destinationPorts: Invalid value: destinationPorts need protocol tcp, udp or sctp, not 1`},
		{"icmp type with tcp", `rules: [{action: accept, protocol: tcp, icmpType: 8}]`,
			`spec.agent.flowFilter.rules[0].icmpType: Invalid value: icmpType needs protocol icmp or icmpv6, not tcp`},
		{"icmp code with udp", `rules: [{action: accept, protocol: udp, icmpCode: 0}]`,
			`spec.agent.flowFilter.rules[0].icmpCode: Invalid value: icmpCode needs protocol icmp or icmpv6, not udp`},
		{"icmp type range", `rules: [{action: accept, protocol: icmp, icmpType: 256}]`,
			`spec.agent.flowFilter.rules[0].icmpType: Invalid value: 256: spec.agent.flowFilter.rules[0].icmpType in body should be less than or equal to 255`},
		{"icmp code without type", `rules: [{action: accept, protocol: icmp, icmpCode: 1}]`,
			`spec.agent.flowFilter.rules[0].icmpCode: Invalid value: icmpCode needs icmpType: a code means something only within its type`},
		{"icmp type with ports", `rules: [{action: accept, icmpType: 8, sourcePorts: 80}]`,
			`spec.agent.flowFilter.rules[0].icmpType: Invalid value: icmpType cannot go with ports, sourcePorts or destinationPorts: ICMP packets have no ports`},
		{"tcp flags with icmp type", `rules: [{action: accept, icmpType: 3, tcpFlags: [RST]}]`,
			`spec.agent.flowFilter.rules[0].tcpFlags: Invalid value: tcpFlags cannot go with icmpType: ICMP packets have no TCP flags`},
		{"tcp flags with udp", `rules: [{action: accept, protocol: udp, tcpFlags: [SYN]}]`,
			`spec.agent.flowFilter.rules[0].tcpFlags: Invalid value: tcpFlags need protocol tcp, not udp`},
		{"unknown tcp flag", `rules: [{action: accept, tcpFlags: [SYN, SYNACK]}]`,
			`spec.agent.flowFilter.rules[0].tcpFlags[1]: Unsupported value: "SYNACK": supported values: "FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR", "SYN-ACK", "FIN-ACK", "RST-ACK"`},
		{"sampling 0", `rules: [{action: accept, sampling: 0}]`,
			`spec.agent.flowFilter.rules[0].sampling: Invalid value: 0: spec.agent.flowFilter.rules[0].sampling in body should be greater than or equal to 1`},
		{"drops with reject", `rules: [{action: reject, drops: true}]`,
			`spec.agent.flowFilter.rules[0].drops: Invalid value: drops needs action accept: a reject rule keeps nothing`},
		{"sampling with reject", `rules: [{action: accept}, {action: reject, sampling: 10}]`,
			`spec.agent.flowFilter.rules[1].sampling: Invalid value: sampling needs action accept: a reject rule keeps nothing`},
		{"no action", `rules: [{name: web}]`,
			`spec.agent.flowFilter.rules[0].action: Required value`},
		{"action spelling", `rules: [{action: Accept}]`,
			`spec.agent.flowFilter.rules[0].action: Unsupported value: "Accept": supported values: "accept", "reject"`},
		{"direction", `rules: [{action: accept, direction: in}]`,
			`spec.agent.flowFilter.rules[0].direction: Unsupported value: "in": supported values: "ingress", "egress"`},
		{"default", `{default: drop}`,
			`spec.agent.flowFilter.default: Unsupported value: "drop": supported values: "accept", "reject"`},
		{"too many rules", many,
			`spec.agent.flowFilter.rules: Too many: 65: must have at most 64 items`},
		{"duplicate names", `rules: [{name: web, action: accept}, {action: accept}, {name: dns, action: accept}, {name: web, action: reject}]`,
			`spec.agent.flowFilter.rules: Invalid value: rules[3].name: "web" is already the name of an earlier rule: rule names must be unique`},
		{"duplicate rules", `rules: [{name: a, action: accept}, {name: web, action: accept}, {name: web, action: accept}, {name: b, action: accept}]`,
			`rules[2].name: "web" is already the name of an earlier rule`},
		{"name syntax", `rules: [{name: "web rule", action: accept}]`,
			`spec.agent.flowFilter.rules[0].name: Invalid value: "web rule": spec.agent.flowFilter.rules[0].name in body should match`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := applyDryRun(tc.flowFilter)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v\nwant an Invalid error containing %q", err, tc.want)
			}
		})
	}
}

// TestFlowFilterSchemaAcceptsLargest: 64 rules, each with every port field
// at its longest, pass the API server's CEL runtime cost budget.
func TestFlowFilterSchemaAcceptsLargest(t *testing.T) {
	needEnv(t)
	ports := "10000-10001"
	for len(ports)+len(",10000-10001") <= 64 {
		ports += ",10000-10001"
	}
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 64 {
		fmt.Fprintf(&b, "- {name: rule-%d, action: accept, protocol: tcp, ports: %q, sourcePorts: %q, destinationPorts: %q, tcpFlags: [SYN, ACK]}\n",
			i, ports, ports, ports)
	}
	if err := applyDryRun(b.String()); err != nil {
		t.Errorf("64 rules with %d-character port lists refused: %v", len(ports), err)
	}
}

// TestFlowFilterSample: the sample with filter rules in config/samples,
// which no kustomization applies, is valid.
func TestFlowFilterSample(t *testing.T) {
	needEnv(t)
	objs := readYAML(t, "config/samples/flowlens_v1alpha1_flowcollector_flowfilter.yaml")
	if len(objs) != 1 || objs[0].GetKind() != "FlowCollector" {
		t.Fatalf("want one FlowCollector, got %d objects", len(objs))
	}
	if rules, _, _ := unstructured.NestedSlice(objs[0].Object, "spec", "agent", "flowFilter", "rules"); len(rules) == 0 {
		t.Fatal("the sample has no flow filter rules")
	}
	err := k8s.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(objs[0]),
		client.FieldOwner("kubectl"), client.ForceOwnership, client.DryRunAll)
	if err != nil {
		t.Errorf("the API server refuses the sample: %v", err)
	}
	// And the agent would start with it.
	var fc v1alpha1.FlowCollector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &fc); err != nil {
		t.Fatal(err)
	}
	spec := render.WithDefaults(fc.Spec)
	if err := render.Validate(&spec); err != nil {
		t.Errorf("the operator (the agent's checks) refuses the sample: %v", err)
	}
}

// validRules are accepted by the schema: every field, both spellings of
// ports and protocols, port 0, ICMP type 0, IPv6, an address without a
// prefix length, a rule with no match field.
const validRules = `default: accept
rules:
- name: no-health-checks
  action: reject
  protocol: tcp
  destinationPorts: 8080
- name: namespace-a
  action: accept
  cidr: 10.1.0.0/16
  peerCIDR: 10.2.0.7
  direction: egress
  protocol: 6
  ports: "80,443,8000-8100"
  sourcePorts: 1024-65535
  tcpFlags: [SYN, RST-ACK]
  interfaces: [eth0, /^veth/]
  sampling: 100
- action: accept
  cidr: fd00::/64
  protocol: "58"
  icmpType: 0
  icmpCode: 3
- name: drops
  action: accept
  drops: true
- name: sctp
  action: accept
  protocol: sctp
  ports: 0-1023,65535
- action: reject
`

// validRulesAgent is validRules as the agent's filter_rules: snake_case
// keys, ports and protocols as strings.
var validRulesAgent = []map[string]any{
	{"name": "no-health-checks", "action": "reject", "protocol": "tcp", "destination_ports": "8080"},
	{"name": "namespace-a", "action": "accept", "cidr": "10.1.0.0/16", "peer_cidr": "10.2.0.7", "direction": "egress",
		"protocol": "6", "ports": "80,443,8000-8100", "source_ports": "1024-65535", "tcp_flags": []any{"SYN", "RST-ACK"},
		"interfaces": []any{"eth0", "/^veth/"}, "sampling": float64(100)},
	{"action": "accept", "cidr": "fd00::/64", "protocol": "58", "icmp_type": float64(0), "icmp_code": float64(3)},
	{"name": "drops", "action": "accept", "drops": true},
	{"name": "sctp", "action": "accept", "protocol": "sctp", "ports": "0-1023,65535"},
	{"action": "reject"},
}

// agentFilter returns filter_default and filter_rules of the agent
// configuration in ConfigMap cm.
func agentFilter(t *testing.T, cm *corev1.ConfigMap) (string, []map[string]any) {
	t.Helper()
	var cfg struct {
		Default string           `json:"filter_default"`
		Rules   []map[string]any `json:"filter_rules"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data[render.ConfigKey]), &cfg); err != nil {
		t.Fatalf("agent configuration: %v", err)
	}
	return cfg.Default, cfg.Rules
}

// TestFlowFilterRendered: valid rules are stored, reach the agent's
// configuration exactly, and changing one rule rolls the agents (the pod
// template's configuration hash changes).
func TestFlowFilterRendered(t *testing.T) {
	needEnv(t)
	const ns = "fl-filter"
	if err := applyDryRun(validRules); err != nil {
		t.Fatalf("valid rules refused: %v", err)
	}

	// Created from YAML as a user would: the Go types decode it (ports and
	// protocols as numbers or strings).
	fc := newCollector(ns)
	if err := yaml.UnmarshalStrict([]byte(validRules), &fc.Spec.Agent.FlowFilter); err != nil {
		t.Fatal(err)
	}
	create(t, fc)
	stored := get(t)
	if f := stored.Spec.Agent.FlowFilter; f == nil || len(f.Rules) != 6 || f.Default != v1alpha1.FilterAccept ||
		f.Rules[1].Protocol.Type != intstr.Int || f.Rules[1].Ports.StrVal != "80,443,8000-8100" || *f.Rules[2].ICMPType != 0 {
		t.Fatalf("stored flowFilter %+v", stored.Spec.Agent.FlowFilter)
	}

	cm := waitFor(t, configMap(ns), exists)
	def, rules := agentFilter(t, cm)
	if def != "accept" || !reflect.DeepEqual(rules, validRulesAgent) {
		t.Errorf("agent filter_default %q, filter_rules:\n%v\nwant accept and:\n%v\nconfiguration:\n%s", def, rules, validRulesAgent, cm.Data[render.ConfigKey])
	}
	ds := waitFor(t, agentDaemonSet(ns), exists)
	oldHash := hashOf(ds)
	if oldHash != render.Hash([]byte(cm.Data[render.ConfigKey])) {
		t.Errorf("pod template hash %s is not the hash of the agent configuration", oldHash)
	}

	// One port of one rule changes: the configuration and the hash follow.
	if err := update(t, func(fc *v1alpha1.FlowCollector) {
		p := intstr.FromString("8081")
		fc.Spec.Agent.FlowFilter.Rules[0].DestinationPorts = &p
	}); err != nil {
		t.Fatal(err)
	}
	cm = waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		if _, rules := agentFilter(t, cm); len(rules) == 0 || rules[0]["destination_ports"] != "8081" {
			return errors.New("ConfigMap not updated yet")
		}
		return nil
	})
	_, rules = agentFilter(t, cm)
	if !reflect.DeepEqual(rules[1:], validRulesAgent[1:]) {
		t.Errorf("the other rules changed: %v", rules[1:])
	}
	ds = waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		if hashOf(ds) == oldHash {
			return errors.New("pod template hash unchanged")
		}
		return nil
	})
	if got, want := hashOf(ds), render.Hash([]byte(cm.Data[render.ConfigKey])); got != want {
		t.Errorf("hash %s, want %s (the new configuration's)", got, want)
	}

	// Removing the filter removes the keys, and rolls the agents again.
	hash := hashOf(ds)
	if err := update(t, func(fc *v1alpha1.FlowCollector) { fc.Spec.Agent.FlowFilter = nil }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, configMap(ns), func(cm *corev1.ConfigMap) error {
		if strings.Contains(cm.Data[render.ConfigKey], "filter") {
			return errors.New("filter keys still in the configuration")
		}
		return nil
	})
	waitFor(t, agentDaemonSet(ns), func(ds *appsv1.DaemonSet) error {
		if hashOf(ds) == hash {
			return errors.New("pod template hash unchanged")
		}
		return nil
	})
}
