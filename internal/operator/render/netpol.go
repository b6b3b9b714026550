package render

import (
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/flowlens/flowlens/internal/collector/collectoropt"
)

// The NetworkPolicies of spec.namespace (spec.networkPolicy.enable), so that
// only the agents reach the collectors' gRPC port and only the monitoring
// namespaces their metrics. docs/security.md says what they do not cover:
// the agents run in the host network, which NetworkPolicies do not apply
// to, and traffic from a pod's own node (the kubelet's probes) is always
// allowed; `flowlens observe`'s port-forward enters the collector's network
// namespace and connects over its loopback, which no policy sees.
const (
	// DenyPolicyName selects every pod of the namespace and allows no
	// ingress: whatever another policy does not allow is refused.
	DenyPolicyName = "flowlens-default-deny"
	// CollectorPolicyName allows the collectors' gRPC port from the agents
	// and their metrics port from the monitoring namespaces.
	CollectorPolicyName = "flowlens-collector"
	// ManifestCollectorName is the gRPC collector of
	// manifests/flowlens-collector.yaml and of the chart, in the agent
	// namespace: the policy selects it too.
	ManifestCollectorName = "flowlens-collector"
	// CollectorGRPCPort is the collectors' gRPC port (their --listen).
	CollectorGRPCPort = 9990
)

// NetworkPolicyNames are the policies the operator applies, which it deletes
// when spec.networkPolicy.enable turns false.
var NetworkPolicyNames = []string{DenyPolicyName, CollectorPolicyName}

// NetworkPolicies renders the policies of a defaulted spec; nil when
// spec.networkPolicy.enable is false. podCIDRs are the nodes' pod ranges
// (spec.podCIDRs), excepted from the agents' addresses when
// spec.networkPolicy.agentCIDRs is empty.
func NetworkPolicies(ns string, spec *NetworkPolicyInput, owner *metav1ac.OwnerReferenceApplyConfiguration) []*networkingv1ac.NetworkPolicyApplyConfiguration {
	if !spec.Enable {
		return nil
	}
	labels := commonLabels()
	labels[LabelComponent] = "network-policy"

	deny := networkingv1ac.NetworkPolicy(DenyPolicyName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector()).
			WithPolicyTypes(networkingv1.PolicyTypeIngress))

	tcp := corev1.ProtocolTCP
	grpcFrom := []*networkingv1ac.NetworkPolicyPeerApplyConfiguration{}
	for _, b := range agentBlocks(spec.AgentCIDRs, spec.PodCIDRs) {
		grpcFrom = append(grpcFrom, networkingv1ac.NetworkPolicyPeer().WithIPBlock(b))
	}
	coll := networkingv1ac.NetworkPolicy(CollectorPolicyName, ns).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchExpressions(
				metav1ac.LabelSelectorRequirement().
					WithKey(LabelName).
					WithOperator("In").
					WithValues(ManifestCollectorName, CollectorName))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(
				networkingv1ac.NetworkPolicyIngressRule().
					WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(tcp).WithPort(intstr.FromInt32(CollectorGRPCPort))).
					WithFrom(grpcFrom...),
				networkingv1ac.NetworkPolicyIngressRule().
					WithPorts(networkingv1ac.NetworkPolicyPort().WithProtocol(tcp).WithPort(intstr.FromInt32(collectoropt.DefaultMetricsPort))).
					WithFrom(networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(metav1ac.LabelSelector().WithMatchExpressions(
						metav1ac.LabelSelectorRequirement().
							WithKey(corev1.LabelMetadataName).
							WithOperator("In").
							WithValues(spec.MetricsNamespaces...))))))
	return []*networkingv1ac.NetworkPolicyApplyConfiguration{deny, coll}
}

// NetworkPolicyInput is what the policies are rendered from:
// spec.networkPolicy, defaulted, and the nodes' pod CIDRs.
type NetworkPolicyInput struct {
	Enable            bool
	MetricsNamespaces []string
	AgentCIDRs        []string
	PodCIDRs          []string
}

// agentBlocks are the ipBlocks the agents connect from: cidrs if any; else
// every IPv4 and IPv6 address but the pods' (the agents use their node's
// address, and a pod of the cluster has one of podCIDRs).
func agentBlocks(cidrs, podCIDRs []string) []*networkingv1ac.IPBlockApplyConfiguration {
	var out []*networkingv1ac.IPBlockApplyConfiguration
	if len(cidrs) > 0 {
		for _, c := range cidrs {
			out = append(out, networkingv1ac.IPBlock().WithCIDR(c))
		}
		return out
	}
	var v4, v6 []string
	for _, c := range podCIDRs {
		ip, n, err := net.ParseCIDR(c)
		if err != nil {
			continue
		}
		ones, _ := n.Mask.Size()
		if ip.To4() != nil {
			if ones > 0 {
				v4 = append(v4, n.IP.String()+"/"+strconv.Itoa(ones))
			}
		} else if ones > 0 {
			v6 = append(v6, n.IP.String()+"/"+strconv.Itoa(ones))
		}
	}
	slices.Sort(v4)
	slices.Sort(v6)
	v4, v6 = slices.Compact(v4), slices.Compact(v6)
	b4 := networkingv1ac.IPBlock().WithCIDR("0.0.0.0/0")
	if len(v4) > 0 {
		b4.WithExcept(v4...)
	}
	b6 := networkingv1ac.IPBlock().WithCIDR("::/0")
	if len(v6) > 0 {
		b6.WithExcept(v6...)
	}
	return append(out, b4, b6)
}
