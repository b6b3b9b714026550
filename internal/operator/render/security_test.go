package render

import (
	"fmt"
	"slices"
	"testing"

	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/flowlens/flowlens/api/v1alpha1"
)

// TestKafkaCollectorServeGRPC: the Kafka collectors serve no gRPC API
// unless spec.collector.serveGRPC; then over TLS with the collector's
// certificate (Secret flowlens-collector-tls), with --auth kubernetes. The
// service map is on either way, on the pod's loopback only (no port
// added), authorized: the ClusterRole may create the reviews in both.
func TestKafkaCollectorServeGRPC(t *testing.T) {
	spec := exporters(v1alpha1.Exporter{Type: v1alpha1.ExporterKafka, Kafka: &v1alpha1.KafkaExporter{Brokers: []string{"kafka:9092"}}})
	reviews := func(c *CollectorObjects) bool {
		for _, r := range c.ClusterRole.Rules {
			if slices.Contains(r.Resources, "tokenreviews") || slices.Contains(r.Resources, "subjectaccessreviews") {
				return true
			}
		}
		return false
	}
	off := build(t, spec).Collector
	// Without gRPC the service map on the pod's loopback is still
	// authorized: the reviews are needed either way.
	if args := off.Deployment.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--listen=") || !slices.Contains(args, "--auth=kubernetes") ||
		!slices.Contains(args, "--ui-listen=127.0.0.1:9402") || !reviews(off) || len(off.Deployment.Spec.Template.Spec.Containers[0].Ports) != 1 {
		t.Errorf("without serveGRPC: args %v, reviews %v, ports %v; want --listen=, --auth=kubernetes, the service map on loopback, the reviews, the metrics port alone",
			args, reviews(off), off.Deployment.Spec.Template.Spec.Containers[0].Ports)
	}
	spec.Collector.ServeGRPC = true
	on := build(t, spec).Collector
	pod := on.Deployment.Spec.Template.Spec
	ctr := pod.Containers[0]
	for _, want := range []string{"--listen=:9990", "--tls-cert=/etc/flowlens/tls/tls.crt", "--tls-key=/etc/flowlens/tls/tls.key", "--auth=kubernetes"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("serveGRPC: args %v lack %s", ctr.Args, want)
		}
	}
	var secret string
	for _, v := range pod.Volumes {
		if *v.Name == "tls" {
			secret = *v.Secret.SecretName
		}
	}
	var mounted string
	for _, m := range ctr.VolumeMounts {
		if *m.Name == "tls" {
			mounted = fmt.Sprint(*m.MountPath, " ro=", *m.ReadOnly)
		}
	}
	if secret != "flowlens-collector-tls" || mounted != "/etc/flowlens/tls ro=true" || !reviews(on) {
		t.Errorf("serveGRPC: Secret %q mounted %q, reviews %v", secret, mounted, reviews(on))
	}
	if on.ConfigHash == off.ConfigHash {
		t.Error("serveGRPC does not change the collectors' config hash: they would not roll")
	}
}

// TestNetworkPolicies: the default policies deny ingress to every pod but
// the collectors' gRPC port from outside the pods' CIDRs (both families,
// the nodes' pod CIDRs excepted, each once) and their metrics port from
// the metrics namespaces; disabled, none.
func TestNetworkPolicies(t *testing.T) {
	owner := metav1ac.OwnerReference().WithName("cluster")
	in := &NetworkPolicyInput{Enable: true, MetricsNamespaces: []string{"monitoring"},
		PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64", "10.244.0.0/24", "10.244.1.0/24", "bogus"}}
	ps := NetworkPolicies("flowlens", in, owner)
	if len(ps) != 2 || *ps[0].Name != DenyPolicyName || *ps[1].Name != CollectorPolicyName {
		t.Fatalf("policies %d", len(ps))
	}
	if d := ps[0].Spec; d.PodSelector == nil || len(d.PodSelector.MatchLabels)+len(d.PodSelector.MatchExpressions) != 0 || len(d.Ingress) != 0 {
		t.Errorf("deny policy %+v", d)
	}
	c := ps[1].Spec
	grpc := c.Ingress[0]
	if grpc.Ports[0].Port.IntVal != 9990 || len(grpc.From) != 2 {
		t.Fatalf("gRPC rule %+v", grpc)
	}
	b4, b6 := grpc.From[0].IPBlock, grpc.From[1].IPBlock
	if *b4.CIDR != "0.0.0.0/0" || !slices.Equal(b4.Except, []string{"10.244.0.0/24", "10.244.1.0/24"}) ||
		*b6.CIDR != "::/0" || !slices.Equal(b6.Except, []string{"fd00:10:244:1::/64"}) {
		t.Errorf("agents' blocks %s except %v, %s except %v", *b4.CIDR, b4.Except, *b6.CIDR, b6.Except)
	}
	m := c.Ingress[1]
	if m.Ports[0].Port.IntVal != 9401 || !slices.Equal(m.From[0].NamespaceSelector.MatchExpressions[0].Values, []string{"monitoring"}) {
		t.Errorf("metrics rule %+v", m)
	}
	if !slices.Equal(c.PodSelector.MatchExpressions[0].Values, []string{"flowlens-collector", CollectorName}) {
		t.Errorf("collector policy selects %+v", c.PodSelector)
	}
	in.AgentCIDRs = []string{"192.0.2.0/24"}
	if from := NetworkPolicies("flowlens", in, owner)[1].Spec.Ingress[0].From; len(from) != 1 || *from[0].IPBlock.CIDR != "192.0.2.0/24" || len(from[0].IPBlock.Except) != 0 {
		t.Errorf("agentCIDRs: %+v", from)
	}
	in.Enable = false
	if ps := NetworkPolicies("flowlens", in, owner); ps != nil {
		t.Errorf("disabled: %d policies", len(ps))
	}
}
