package render

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
	"github.com/flowlens/flowlens/internal/agent/feature/dns/dnsopt"
	"github.com/flowlens/flowlens/internal/agent/flowrules"
	"github.com/flowlens/flowlens/internal/operator/dashboards"
)

func collector(spec v1alpha1.FlowCollectorSpec) *v1alpha1.FlowCollector {
	return &v1alpha1.FlowCollector{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName, UID: "uid-1"},
		Spec:       WithDefaults(spec),
	}
}

// loadAgentConfig writes the rendered configuration to a file and loads it
// with the agent's own loader, as the agent does with --config, with
// NODE_NAME and the variables of extraEnv.
func loadAgentConfig(t *testing.T, spec v1alpha1.FlowCollectorSpec, extraEnv ...map[string]string) *config.Config {
	t.Helper()
	s := WithDefaults(spec)
	data, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(path, mountedFiles(t, data), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NODE_NAME": "node-1"}
	for _, e := range extraEnv {
		maps.Copy(env, e)
	}
	c, err := config.Load([]string{"--config", path}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the agent rejects the operator's configuration: %v\n%s", err, data)
	}
	return c
}

// TestAgentAcceptsDefaults: the configuration rendered from an empty spec
// loads in the agent and equals the agent's own defaults.
func TestAgentAcceptsDefaults(t *testing.T) {
	c := loadAgentConfig(t, v1alpha1.FlowCollectorSpec{})
	if c.Sampling != 1 || c.CacheActiveTimeout != 5*time.Second || c.CacheMaxFlows != 100000 ||
		c.MetricsAddress != ":9400" || c.NodeName != "node-1" || c.NetnsDir != "/var/run/netns" ||
		!slices.Equal(c.Netns, []string{"host"}) || !slices.Equal(c.ExcludeInterfaces, []string{"lo"}) ||
		len(c.Interfaces) != 0 || !slices.Equal(c.Export, []string{"stdout"}) ||
		!slices.Equal(c.Features, []string{"drops", "rtt", "retransmits", "tcp"}) {
		t.Errorf("agent configuration from the defaults: %+v", c)
	}
}

// TestAgentAcceptsEverySetting: every spec field that reaches the agent
// arrives with its value, and empty lists mean none.
func TestAgentAcceptsEverySetting(t *testing.T) {
	spec := v1alpha1.FlowCollectorSpec{
		Agent: v1alpha1.AgentSpec{
			Sampling:           20,
			CacheActiveTimeout: &metav1.Duration{Duration: 1500 * time.Millisecond},
			CacheMaxFlows:      5000,
			Interfaces:         []string{"eth0", "/^ens[0-9]{1,3}$/"},
			ExcludeInterfaces:  []string{},
			Netns:              []string{"host", "blue"},
			Features:           []v1alpha1.Feature{},
			LogLevel:           "debug",
			MetricsPort:        19400,
		},
		Exporters: []v1alpha1.Exporter{
			{Type: v1alpha1.ExporterStdout},
			{Type: v1alpha1.ExporterGRPC, GRPC: &v1alpha1.GRPCExporter{TargetHost: "fd00::1", TargetPort: 4317, BatchSize: 250}},
		},
	}
	// The metrics port reaches the agent with the node's address, in its
	// variable (the kubelet expands $(HOST_IP)).
	o, err := Build(collector(spec), Options{DefaultImage: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, e := range o.DaemonSet.Spec.Template.Spec.Containers[0].Env {
		if *e.Name == config.EnvName("metrics-address") {
			addr = *e.Value
		}
	}
	c := loadAgentConfig(t, spec, map[string]string{config.EnvName("metrics-address"): strings.ReplaceAll(addr, "$(HOST_IP)", "192.0.2.7")})
	if c.Sampling != 20 || c.CacheActiveTimeout != 1500*time.Millisecond || c.CacheMaxFlows != 5000 ||
		!slices.Equal(c.Interfaces, []string{"eth0", "/^ens[0-9]{1,3}$/"}) || len(c.ExcludeInterfaces) != 0 ||
		!slices.Equal(c.Netns, []string{"host", "blue"}) || len(c.Features) != 0 ||
		!slices.Equal(c.Export, []string{"stdout", "grpc"}) || c.Target != "[fd00::1]:4317" || c.GRPCBatchSize != 250 ||
		c.MetricsAddress != "[192.0.2.7]:19400" || c.LogLevel.String() != "DEBUG" {
		t.Errorf("agent configuration: %+v", c)
	}
}

func TestAgentConfigTLSPaths(t *testing.T) {
	s := WithDefaults(v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC,
		GRPC: &v1alpha1.GRPCExporter{TargetHost: "c", TargetPort: 1, TLS: &v1alpha1.ExporterTLS{
			CASecretRef:     &v1alpha1.SecretKeyRef{Name: "ca"},
			ClientSecretRef: &v1alpha1.SecretRef{Name: "client"},
		}}}}})
	data, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tls_ca: " + TLSCAPath + "\n", "tls_cert: " + TLSCertPath + "\n", "tls_key: " + TLSKeyPath + "\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("config lacks %q:\n%s", want, data)
		}
	}
	if s.Exporters[0].GRPC.TLS.CASecretRef.Key != "ca.crt" {
		t.Errorf("CA key not defaulted: %+v", s.Exporters[0].GRPC.TLS.CASecretRef)
	}

	objs, err := Build(collector(s), Options{DefaultImage: "img"})
	if err != nil {
		t.Fatal(err)
	}
	pod := objs.DaemonSet.Spec.Template.Spec
	mounts := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		mounts[*m.Name] = *m.MountPath
	}
	secrets := map[string]string{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets[*v.Name] = *v.Secret.SecretName
		}
	}
	if mounts["tls-ca"] != TLSCADir || mounts["tls-client"] != TLSCertDir || secrets["tls-ca"] != "ca" || secrets["tls-client"] != "client" {
		t.Errorf("TLS secrets not mounted where the config points: mounts %v secrets %v", mounts, secrets)
	}
}

func TestValidate(t *testing.T) {
	grpc := func(host string) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterGRPC,
			GRPC: &v1alpha1.GRPCExporter{TargetHost: host, TargetPort: 9999}}}}
	}
	ipfix := func(host string) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX,
			IPFIX: &v1alpha1.IPFIXExporter{TargetHost: host, TargetPort: 4739}}}}
	}
	kafka := func(brokers ...string) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterKafka,
			Kafka: &v1alpha1.KafkaExporter{Brokers: brokers}}}}
	}
	otlp := func(host string) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterOTLP,
			OTLP: &v1alpha1.OTLPExporter{TargetHost: host, TargetPort: 4317}}}}
	}
	for _, tc := range []struct {
		name string
		spec v1alpha1.FlowCollectorSpec
		want string // "" means valid
	}{
		{"defaults", v1alpha1.FlowCollectorSpec{}, ""},
		{"kafka brokers", kafka("kafka-0.kafka.svc:9092", "10.0.0.1:9093", "[fd00::1]:9094"), ""},
		{"kafka broker without port", kafka("kafka-0:9092", "kafka-1"), `spec.exporters[0].kafka.brokers[1] "kafka-1": must be host:port, with an IPv6 address in brackets`},
		{"kafka broker port 0", kafka("kafka:0"), `spec.exporters[0].kafka.brokers[0] "kafka:0": the port must be from 1 to 65535`},
		{"kafka broker port too big", kafka("kafka:65536"), `spec.exporters[0].kafka.brokers[0] "kafka:65536": the port must be from 1 to 65535`},
		{"kafka broker bad name", kafka("kafka_0:9092"), `spec.exporters[0].kafka.brokers[0] "kafka_0:9092": is not a valid DNS name`},
		{"kafka broker bad ipv6", kafka("[fd00::zz]:9092"), `spec.exporters[0].kafka.brokers[0] "[fd00::zz]:9092": is not a valid IP address`},
		{"otlp dns name", otlp("otel-collector.monitoring.svc"), ""},
		{"otlp url", otlp("http://otel:4317"), `spec.exporters[0].otlp.targetHost "http://otel:4317": must be a host name or IP address, not a URL`},
		{"dns name", grpc("flowlens-collector.flowlens.svc"), ""},
		{"fqdn", grpc("collector.example.com."), ""},
		{"ipv4", grpc("10.0.0.1"), ""},
		{"ipv6", grpc("fd00::1"), ""},
		{"host with port", grpc("collector:9999"), "must not include a port"},
		{"bracketed ipv6", grpc("[fd00::1]"), "must not include a port"},
		{"url", grpc("http://collector"), "not a URL"},
		{"bad ipv6", grpc("fd00::zz"), "not a valid IP address"},
		{"space", grpc("my collector"), "not a valid DNS name"},
		{"underscore", grpc("flow_collector"), "not a valid DNS name"},
		{"ipfix dns name", ipfix("ipfix.monitoring.svc"), ""},
		{"ipfix host with port", ipfix("ipfix:4739"), `spec.exporters[0].ipfix.targetHost "ipfix:4739": must not include a port`},
		{"good patterns", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Interfaces: []string{"/^eth[0-9]+$/"}, ExcludeInterfaces: []string{"/^veth/"}}}, ""},
		{"bad include", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Interfaces: []string{"/eth[/"}}}, `spec.agent.interfaces: entry "/eth[/"`},
		{"unclosed", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{ExcludeInterfaces: []string{"/veth"}}}, "spec.agent.excludeInterfaces: entry \"/veth\": a pattern must be written /regex/"},
		{"rule interfaces", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Action: v1alpha1.FilterAccept, Interfaces: []string{"eth0", "/^veth/"}},
			{Action: v1alpha1.FilterAccept, Interfaces: []string{"/ens[/"}},
		}}}}, `spec.agent.flowFilter.rules[1].interfaces "/ens[/": error parsing regexp`},
		// The agent's own checks stand behind the schema's, for a spec that
		// did not go through it.
		{"rule drops with reject", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Action: v1alpha1.FilterReject, Drops: true},
		}}}}, `spec.agent.flowFilter.rules[0].drops "true": needs action accept`},
		{"drops rule without the drops feature", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Features: []v1alpha1.Feature{v1alpha1.FeatureRTT},
			FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{{Action: v1alpha1.FilterAccept}, {Action: v1alpha1.FilterAccept, Drops: true}}}}},
			`spec.agent.flowFilter.rules[1].drops "true": needs the drops feature in spec.agent.features`},
		{"rule families", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Action: v1alpha1.FilterAccept}, {Action: v1alpha1.FilterAccept, CIDR: "10.0.0.0/8", PeerCIDR: "fd00::/8"},
		}}}}, `spec.agent.flowFilter.rules[1].peerCIDR "fd00::/8": is IPv6 but cidr "10.0.0.0/8" is IPv4`},
		{"rule names", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Name: "a", Action: v1alpha1.FilterAccept}, {Name: "a", Action: v1alpha1.FilterAccept},
		}}}}, `spec.agent.flowFilter.rules[1].name "a": already the name of rule 0`},
		{"good rules", v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Action: v1alpha1.FilterAccept, CIDR: "10.0.0.0/8", Interfaces: []string{"/^eth/"}}, {Action: v1alpha1.FilterReject},
		}}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := WithDefaults(tc.spec)
			err := Validate(&s)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestAgentConfigFilterRules: spec.agent.flowFilter reaches the agent's
// configuration as filter_default and filter_rules, every field under its
// snake_case key, unset fields left out, ports and protocols as strings
// whether the spec wrote numbers or strings, and ICMP type 0 kept.
func TestAgentConfigFilterRules(t *testing.T) {
	port := intstr.FromInt32
	str := intstr.FromString
	zero, three := int32(0), int32(3)
	s := WithDefaults(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{
		Default: v1alpha1.FilterAccept,
		Rules: []v1alpha1.FlowFilterRule{
			{Name: "no-health-checks", Action: v1alpha1.FilterReject, Protocol: ptr(str("tcp")), DestinationPorts: ptr(port(8080))},
			{Name: "namespace-a", Action: v1alpha1.FilterAccept, CIDR: "10.1.0.0/16", PeerCIDR: "10.2.0.0/16",
				Direction: v1alpha1.FilterEgress, Protocol: ptr(port(6)), Ports: ptr(str("80,443,8000-8100")),
				SourcePorts: ptr(str("1024-65535")), TCPFlags: []v1alpha1.TCPFlag{"SYN", "RST-ACK"},
				Interfaces: []string{"eth0", "/^veth/"}, Sampling: 100},
			{Action: v1alpha1.FilterAccept, CIDR: "fd00::/64", Protocol: ptr(str("icmpv6")), ICMPType: &zero, ICMPCode: &three},
			{Action: v1alpha1.FilterAccept, Drops: true},
		},
	}}})
	data, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "filter_default:")
	if !ok {
		t.Fatalf("no filter_default in the configuration:\n%s", data)
	}
	want := ` accept
filter_rules:
    - name: no-health-checks
      action: reject
      protocol: tcp
      destination_ports: "8080"
    - name: namespace-a
      action: accept
      cidr: 10.1.0.0/16
      peer_cidr: 10.2.0.0/16
      direction: egress
      protocol: "6"
      ports: 80,443,8000-8100
      source_ports: 1024-65535
      tcp_flags:
        - SYN
        - RST-ACK
      interfaces:
        - eth0
        - /^veth/
      sampling: 100
    - action: accept
      cidr: fd00::/64
      protocol: icmpv6
      icmp_type: 0
      icmp_code: 3
    - action: accept
      drops: true
`
	if section != want {
		t.Errorf("filter section of the agent configuration:\n%s\nwant:\n%s", section, want)
	}

	// The agent reads them as meant.
	c := loadAgentConfig(t, s)
	if c.FilterDefault != flowrules.Accept || len(c.FilterRules) != 4 {
		t.Fatalf("agent: filter default %v, %d rules; want accept, 4", c.FilterDefault, len(c.FilterRules))
	}
	r := c.FilterRules[1]
	if r.Name != "namespace-a" || r.Action != flowrules.Accept || r.PeerCIDR.String() != "10.2.0.0/16" ||
		r.Protocol == nil || *r.Protocol != 6 || len(r.Ports) != 3 || r.Ports[2] != (flowrules.PortRange{First: 8000, Last: 8100}) ||
		!slices.Equal(r.Interfaces, []string{"eth0", "/^veth/"}) || r.Sampling != 100 {
		t.Errorf("agent rule 1: %+v", r)
	}
	if r := c.FilterRules[2]; r.ICMPType == nil || *r.ICMPType != 0 || r.ICMPCode == nil || *r.ICMPCode != 3 {
		t.Errorf("agent rule 2: ICMP type %v code %v, want 0 and 3", r.ICMPType, r.ICMPCode)
	}
	if !c.FilterRules[3].Drops {
		t.Errorf("agent rule 3: %+v, want drops", c.FilterRules[3])
	}

	// Without spec.agent.flowFilter, or with neither rules nor default, no key
	// at all: the configuration stays as it was before filters existed.
	for _, f := range []*v1alpha1.FlowFilter{nil, {}} {
		s := WithDefaults(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: f}})
		data, err := AgentConfig(&s)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "filter") {
			t.Errorf("flowFilter %+v: the configuration has filter keys:\n%s", f, data)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestCapabilities(t *testing.T) {
	caps := func(spec v1alpha1.FlowCollectorSpec) (bool, []corev1.Capability) {
		objs, err := Build(collector(spec), Options{DefaultImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		sc := objs.DaemonSet.Spec.Template.Spec.Containers[0].SecurityContext
		if sc.Capabilities == nil {
			return *sc.Privileged, nil
		}
		return *sc.Privileged, sc.Capabilities.Add
	}
	if p, c := caps(v1alpha1.FlowCollectorSpec{}); p || !slices.Equal(c, BaseCapabilities) {
		t.Errorf("default: privileged %v caps %v", p, c)
	}
	for _, netns := range [][]string{{"all"}, {"host", "blue"}} {
		if p, c := caps(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Netns: netns}}); p || !slices.Contains(c, "SYS_ADMIN") {
			t.Errorf("netns %v: privileged %v caps %v, want SYS_ADMIN", netns, p, c)
		}
	}
	if p, c := caps(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Privileged: true}}); !p || c != nil {
		t.Errorf("privileged: privileged %v caps %v", p, c)
	}
}

// The unprivileged agent runs under the runtime's default seccomp profile
// (make e2e-kubelet proves it works under containerd's), the privileged one
// without; neither pod gets a service account token.
func TestSeccompAndToken(t *testing.T) {
	for _, privileged := range []bool{false, true} {
		objs, err := Build(collector(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Privileged: privileged}}), Options{DefaultImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		pod := objs.DaemonSet.Spec.Template.Spec
		sc := pod.Containers[0].SecurityContext
		switch {
		case !privileged && (sc.SeccompProfile == nil || *sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault):
			t.Errorf("unprivileged: seccomp profile %+v, want RuntimeDefault", sc.SeccompProfile)
		case privileged && sc.SeccompProfile != nil:
			t.Errorf("privileged: seccomp profile %+v, want none", sc.SeccompProfile)
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Errorf("privileged %v: automountServiceAccountToken %v, want false", privileged, pod.AutomountServiceAccountToken)
		}
	}
}

func TestImageAndScheduling(t *testing.T) {
	objs, err := Build(collector(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{
		NodeSelector:     map[string]string{"pool": "net"},
		Tolerations:      []corev1.Toleration{},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
	}}), Options{DefaultImage: "default/agent:1"})
	if err != nil {
		t.Fatal(err)
	}
	pod := objs.DaemonSet.Spec.Template.Spec
	if *pod.Containers[0].Image != "default/agent:1" {
		t.Errorf("image %q, want the operator's default", *pod.Containers[0].Image)
	}
	if pod.NodeSelector["pool"] != "net" || pod.NodeSelector[corev1.LabelOSStable] != "linux" {
		t.Errorf("node selector %v", pod.NodeSelector)
	}
	if len(pod.Tolerations) != 0 {
		t.Errorf("tolerations %v: an explicit empty list must tolerate nothing", pod.Tolerations)
	}
	if len(pod.ImagePullSecrets) != 1 || *pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("image pull secrets %v", pod.ImagePullSecrets)
	}
	if objs.Namespace != nil {
		t.Errorf("namespace rendered though the operator does not own it")
	}

	objs, err = Build(collector(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Image: "mine/agent:2"}}), Options{DefaultImage: "default/agent:1", OwnNamespace: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := *objs.DaemonSet.Spec.Template.Spec.Containers[0].Image; got != "mine/agent:2" {
		t.Errorf("image %q, want spec.agent.image", got)
	}
	if objs.Namespace == nil || objs.Namespace.Labels[PodSecurityEnforceLabel] != "privileged" {
		t.Errorf("owned namespace %+v: want the privileged pod security level", objs.Namespace)
	}
}

// TestHash: the hash follows the agent configuration only.
// TestAgentConfigOverlayOuterFlows: spec.agent.overlayOuterFlows reaches
// the agent's --overlay-outer-flows, and its default leaves the rendered
// configuration (so every agent's hash) as it was before the field existed.
func TestAgentConfigOverlayOuterFlows(t *testing.T) {
	if c := loadAgentConfig(t, v1alpha1.FlowCollectorSpec{}); c.OverlayOuterFlows {
		t.Error("overlay outer flows on by default")
	}
	if c := loadAgentConfig(t, v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{OverlayOuterFlows: true}}); !c.OverlayOuterFlows {
		t.Error("spec.agent.overlayOuterFlows: true did not reach the agent")
	}
	s := WithDefaults(v1alpha1.FlowCollectorSpec{})
	data, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "overlay_outer_flows") {
		t.Errorf("the default configuration writes overlay_outer_flows:\n%s", data)
	}
}

func TestHash(t *testing.T) {
	hash := func(spec v1alpha1.FlowCollectorSpec) string {
		objs, err := Build(collector(spec), Options{DefaultImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		if objs.DaemonSet.Spec.Template.Annotations[ConfigHashAnnotation] != objs.ConfigHash {
			t.Fatal("pod template annotation differs from ConfigHash")
		}
		return objs.ConfigHash
	}
	base := hash(v1alpha1.FlowCollectorSpec{})
	if hash(v1alpha1.FlowCollectorSpec{}) != base {
		t.Error("hash is not stable")
	}
	if hash(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Sampling: 2}}) == base {
		t.Error("hash ignores sampling")
	}
	if hash(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{OverlayOuterFlows: true}}) == base {
		t.Error("hash ignores overlayOuterFlows")
	}
	rule := func(ports string) v1alpha1.FlowCollectorSpec {
		p := intstr.FromString(ports)
		return v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{FlowFilter: &v1alpha1.FlowFilter{Rules: []v1alpha1.FlowFilterRule{
			{Action: v1alpha1.FilterAccept, Protocol: ptr(intstr.FromString("tcp")), Ports: &p},
		}}}}
	}
	if a, b := hash(rule("80")), hash(rule("443")); a == base || a == b {
		t.Error("hash ignores the flow filter rules")
	}
	if hash(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{DNSPorts: []int32{5353}}}) != base {
		t.Error("hash changes with dnsPorts while the dns feature is off")
	}
	dns := func(ports ...int32) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Features: []v1alpha1.Feature{v1alpha1.FeatureDNS}, DNSPorts: ports}}
	}
	if a, b := hash(dns(53)), hash(dns(5353)); a == b {
		t.Error("hash ignores dnsPorts with the dns feature on")
	}
	if hash(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{NodeSelector: map[string]string{"a": "b"}}}) != base {
		t.Error("hash changes with the node selector, which is not agent configuration")
	}
}

// TestDashboards: the dashboard ConfigMaps are rendered only when enabled,
// in spec.dashboards.namespace (spec.namespace when empty), with the
// operator's labels, the sidecar label, the dashboards component, the owner
// reference and internal/operator/dashboards' data.
func TestDashboards(t *testing.T) {
	build := func(spec v1alpha1.FlowCollectorSpec) *Objects {
		t.Helper()
		objs, err := Build(collector(spec), Options{DefaultImage: "img"})
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	if objs := build(v1alpha1.FlowCollectorSpec{}); len(objs.Dashboards) != 0 {
		t.Errorf("dashboards unset: %d rendered", len(objs.Dashboards))
	}
	if objs := build(v1alpha1.FlowCollectorSpec{Dashboards: &v1alpha1.Dashboards{Namespace: "grafana"}}); len(objs.Dashboards) != 0 {
		t.Errorf("dashboards disabled: %d rendered", len(objs.Dashboards))
	}

	for _, tc := range []struct{ spec, want string }{{"", "agents"}, {"grafana", "grafana"}} {
		objs := build(v1alpha1.FlowCollectorSpec{Namespace: "agents", Dashboards: &v1alpha1.Dashboards{Enabled: true, Namespace: tc.spec}})
		want, err := dashboards.ConfigMaps(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs.Dashboards) != len(want) || len(want) != 4 {
			t.Fatalf("%d dashboard ConfigMaps, want %d (4)", len(objs.Dashboards), len(want))
		}
		for i, cm := range objs.Dashboards {
			w := want[i]
			if *cm.Name != w.Name || *cm.Namespace != tc.want {
				t.Errorf("ConfigMap %s/%s, want %s/%s", *cm.Namespace, *cm.Name, tc.want, w.Name)
			}
			if !reflect.DeepEqual(cm.Data, w.Data) {
				t.Errorf("%s: data differs from internal/operator/dashboards", w.Name)
			}
			for k, v := range map[string]string{
				dashboards.SidecarLabel: dashboards.SidecarLabelValue,
				LabelComponent:          DashboardsComponent,
				LabelManagedBy:          ManagedByValue,
				LabelPartOf:             "flowlens",
			} {
				if cm.Labels[k] != v {
					t.Errorf("%s: label %s=%q, want %q (labels %v)", w.Name, k, cm.Labels[k], v, cm.Labels)
				}
			}
			if len(cm.OwnerReferences) != 1 || *cm.OwnerReferences[0].UID != "uid-1" || !*cm.OwnerReferences[0].Controller {
				t.Errorf("%s: owner references %+v", w.Name, cm.OwnerReferences)
			}
		}
	}
}

// TestAgentConfigDNS: with the dns feature, the configuration carries
// dns_ports and dns_timeout (the defaults when unset) and the agent reads
// them as meant; without it, neither key, whatever spec.agent.dnsPorts and
// dnsTimeout say, so the configuration and its hash stay as they were.
func TestAgentConfigDNS(t *testing.T) {
	s := WithDefaults(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{
		Features:   []v1alpha1.Feature{v1alpha1.FeatureDNS},
		DNSPorts:   []int32{53, 5353},
		DNSTimeout: &metav1.Duration{Duration: 1500 * time.Millisecond},
	}})
	data, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Generated by the flowlens operator from the FlowCollector: do not edit.
interfaces: []
exclude_interfaces:
    - lo
netns:
    - host
netns_dir: /var/run/netns
cache_active_timeout: 5s
cache_max_flows: 100000
sampling: 1
export:
    - stdout
features:
    - dns
web_config_file: /etc/flowlens/web-config.yml
log_level: info
dns_ports:
    - 53
    - 5353
dns_timeout: 1.5s
`
	if string(data) != want {
		t.Errorf("agent configuration:\n%s\nwant:\n%s", data, want)
	}
	c := loadAgentConfig(t, s)
	if o := dnsopt.OptionsOf(c); !slices.Equal(c.Features, []string{"dns"}) || !slices.Equal(o.Ports, []uint16{53, 5353}) || o.Timeout != 1500*time.Millisecond {
		t.Errorf("agent: features %v, ports %v, timeout %v; want [dns], [53 5353], 1.5s", c.Features, o.Ports, o.Timeout)
	}

	// Defaults: the agent's own.
	c = loadAgentConfig(t, v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Features: []v1alpha1.Feature{v1alpha1.FeatureDNS}}})
	if o := dnsopt.OptionsOf(c); !slices.Equal(o.Ports, []uint16{53}) || o.Timeout != 5*time.Second {
		t.Errorf("agent from the defaults: ports %v, timeout %v; want [53], 5s", o.Ports, o.Timeout)
	}

	// Without the dns feature: no dns key, and the same configuration as
	// without the dns fields.
	base, err := AgentConfig(ptr(WithDefaults(v1alpha1.FlowCollectorSpec{})))
	if err != nil {
		t.Fatal(err)
	}
	other, err := AgentConfig(ptr(WithDefaults(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{
		DNSPorts: []int32{5353}, DNSTimeout: &metav1.Duration{Duration: time.Second},
	}})))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(base), "dns") || string(other) != string(base) {
		t.Errorf("without the dns feature, the configuration has dns keys or depends on them:\n%s\nwant:\n%s", other, base)
	}
}

// TestAgentConfigIPFIX: with the ipfix exporter, the configuration carries
// the agent's ipfix_* keys (the defaults when unset) and the agent reads them
// as meant; without it, none, so other configurations and their hash stay as
// they were.
func TestAgentConfigIPFIX(t *testing.T) {
	s := WithDefaults(v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{
		{Type: v1alpha1.ExporterStdout},
		{Type: v1alpha1.ExporterIPFIX, IPFIX: &v1alpha1.IPFIXExporter{
			TargetHost: "fd00::2", TargetPort: 4739, Transport: v1alpha1.IPFIXTCP,
			DomainID: ptr(int64(4294967295)), TemplateRefresh: &metav1.Duration{Duration: 90 * time.Second},
			MaxMessageSize: ptr(int32(9000)), EnterpriseNumber: ptr(int64(4294967295)),
		}},
	}})
	data, err := AgentConfig(&s)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Generated by the flowlens operator from the FlowCollector: do not edit.
interfaces: []
exclude_interfaces:
    - lo
netns:
    - host
netns_dir: /var/run/netns
cache_active_timeout: 5s
cache_max_flows: 100000
sampling: 1
export:
    - stdout
    - ipfix
features:
    - drops
    - rtt
    - retransmits
    - tcp
web_config_file: /etc/flowlens/web-config.yml
log_level: info
ipfix_target: '[fd00::2]:4739'
ipfix_transport: tcp
ipfix_domain_id: 4294967295
ipfix_template_refresh: 1m30s
ipfix_max_message_size: 9000
ipfix_enterprise_number: 4294967295
`
	if string(data) != want {
		t.Errorf("agent configuration:\n%s\nwant:\n%s", data, want)
	}
	c := loadAgentConfig(t, s)
	if !slices.Equal(c.Export, []string{"stdout", "ipfix"}) || c.IPFIXTarget != "[fd00::2]:4739" || c.IPFIXTransport != "tcp" ||
		c.IPFIXDomainID != 4294967295 || c.IPFIXTemplateRefresh != 90*time.Second ||
		c.IPFIXMaxMessageSize != 9000 || c.IPFIXEnterpriseNumber != 4294967295 {
		t.Errorf("agent: export %v, ipfix %q %q %d %v; want [stdout ipfix], [fd00::2]:4739 tcp 4294967295 1m30s",
			c.Export, c.IPFIXTarget, c.IPFIXTransport, c.IPFIXDomainID, c.IPFIXTemplateRefresh)
	}

	// Defaults: the agent's own; domain id 0 is a value, not "unset".
	only := func(x *v1alpha1.IPFIXExporter) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Exporters: []v1alpha1.Exporter{{Type: v1alpha1.ExporterIPFIX, IPFIX: x}}}
	}
	c = loadAgentConfig(t, only(&v1alpha1.IPFIXExporter{TargetHost: "ipfix.monitoring.svc", TargetPort: 4739}))
	if c.IPFIXTarget != "ipfix.monitoring.svc:4739" || c.IPFIXTransport != "udp" || c.IPFIXDomainID != 1 || c.IPFIXTemplateRefresh != time.Minute ||
		c.IPFIXMaxMessageSize != 0 || c.IPFIXEnterpriseNumber != 32473 {
		t.Errorf("agent from the defaults: %q %q %d %v; want ipfix.monitoring.svc:4739 udp 1 1m0s",
			c.IPFIXTarget, c.IPFIXTransport, c.IPFIXDomainID, c.IPFIXTemplateRefresh)
	}
	c = loadAgentConfig(t, only(&v1alpha1.IPFIXExporter{TargetHost: "10.0.0.9", TargetPort: 4739, DomainID: ptr(int64(0))}))
	if c.IPFIXDomainID != 0 {
		t.Errorf("agent: domain id %d, want 0", c.IPFIXDomainID)
	}

	// Without the ipfix exporter: no ipfix key.
	base, err := AgentConfig(ptr(WithDefaults(v1alpha1.FlowCollectorSpec{})))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(base), "ipfix") {
		t.Errorf("without the ipfix exporter, the configuration has ipfix keys:\n%s", base)
	}
}

// TestPriorityClass: the agent pods get spec.agent.priorityClassName, and
// system-node-critical when it is unset.
func TestPriorityClass(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"", DefaultPriorityClassName},
		{"flowlens-node", "flowlens-node"},
	} {
		objs, err := Build(collector(v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{PriorityClassName: c.set}}), Options{DefaultImage: "default/agent:1"})
		if err != nil {
			t.Fatal(err)
		}
		got := objs.DaemonSet.Spec.Template.Spec.PriorityClassName
		if got == nil || *got != c.want {
			t.Errorf("priorityClassName %q: rendered %v, want %q", c.set, got, c.want)
		}
	}
	if DefaultPriorityClassName != "system-node-critical" {
		t.Errorf("default priority class %q, want system-node-critical", DefaultPriorityClassName)
	}
}

// mountedFiles points the paths of files the pod mounts (the CA bundle, the
// token, the web configuration), which the agent checks exist, at files of
// the test's. (The web configuration's stand-in, which the agent parses,
// serves plain HTTP: TestDefaultMetricsTLSServes checks the real one.)
func mountedFiles(t *testing.T, data []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{CABundlePath, TokenPath, WebConfigPath} {
		f := filepath.Join(dir, filepath.Base(p))
		if err := os.WriteFile(f, []byte("# x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		data = []byte(strings.ReplaceAll(string(data), p, f))
	}
	return data
}
