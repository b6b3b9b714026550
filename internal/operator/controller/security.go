package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
	"github.com/flowlens/flowlens/internal/operator/render"
)

// The certificates (package certs) and NetworkPolicies of the agent
// namespace: issue #27's secure default, docs/security.md.
//
// Secrets, NetworkPolicies and cert-manager Certificates are written in
// the agent namespace only: a Role there grants them (package agentns holds
// its markers), not a ClusterRole. The operator never lists or watches
// Secrets: it reads the few it keeps by name and checks them again when
// they are due (certs.Manager bounds the wait to an hour). The nodes' pod
// CIDRs, excepted from the addresses the collectors accept agents from, are
// read with the ClusterRole's nodes rights (the Kafka collector's
// ClusterRole needs them anyway).

// netpolRefresh is how often the NetworkPolicies are applied again while
// their spec is unchanged: the nodes' pod CIDRs they except may change.
const netpolRefresh = 10 * time.Minute

// securityMemo is what the last reconcile did for the certificates and
// NetworkPolicies of the spec whose key it holds.
type securityMemo struct {
	mu       sync.Mutex
	key      string
	certsDue time.Time // when the certificates are due (certs.Manager)
	netpolAt time.Time // when the NetworkPolicies were last applied
}

// securityKey identifies what the certificates and policies depend on: the
// FlowCollector and its namespace, spec.tls and spec.networkPolicy.
func securityKey(fc *v1alpha1.FlowCollector) string {
	b, _ := json.Marshal([]any{fc.UID, fc.Spec.Namespace, fc.Spec.TLS, fc.Spec.NetworkPolicy})
	return string(b)
}

// ensureSecurity keeps the certificates and the NetworkPolicies, each only
// when due or when what they depend on changed, and returns when the
// certificates are due.
func (r *FlowCollectorReconciler) ensureSecurity(ctx context.Context, fc *v1alpha1.FlowCollector) (time.Time, error) {
	m := &r.security
	m.mu.Lock()
	defer m.mu.Unlock()
	key, now := securityKey(fc), time.Now()
	if key != m.key {
		m.key, m.certsDue, m.netpolAt = key, time.Time{}, time.Time{}
	}
	if m.certsDue.IsZero() || !now.Before(m.certsDue) {
		due, err := r.ensureCerts(ctx, fc)
		if err != nil {
			m.certsDue = time.Time{}
			return time.Time{}, err
		}
		m.certsDue = due
	}
	if m.netpolAt.IsZero() || now.Sub(m.netpolAt) >= netpolRefresh {
		if err := r.applyNetworkPolicies(ctx, fc); err != nil {
			m.netpolAt = time.Time{}
			return time.Time{}, err
		}
		m.netpolAt = now
	}
	due := m.certsDue
	if next := m.netpolAt.Add(netpolRefresh); next.Before(due) {
		due = next
	}
	return due, nil
}

func ownerRef(fc *v1alpha1.FlowCollector) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(v1alpha1.GroupVersion.String()).
		WithKind("FlowCollector").
		WithName(fc.Name).
		WithUID(fc.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

func certLabels() map[string]string {
	return map[string]string{
		render.LabelPartOf:    "flowlens",
		render.LabelComponent: "certificates",
		render.LabelManagedBy: render.ManagedByValue,
	}
}

// ensureCerts keeps the collector's certificate, the metrics endpoints',
// the scrape identity and the CA bundle of spec.tls, and returns when to
// check them again.
func (r *FlowCollectorReconciler) ensureCerts(ctx context.Context, fc *v1alpha1.FlowCollector) (time.Time, error) {
	m := r.Certs
	if m == nil {
		m = &certs.Manager{Client: r.Client, Reader: r.APIReader, FieldOwner: FieldOwner}
	}
	spec := &fc.Spec
	t := certs.Target{
		Namespace: spec.Namespace,
		Leaves: []certs.Leaf{
			{Name: certs.CollectorTLSName, DNSNames: render.CollectorDNSNames(spec.Namespace)},
			// The metrics endpoints' serving certificate, and
			// Prometheus' identity to scrape them (docs/security.md).
			{Name: certs.MetricsTLSName, DNSNames: render.MetricsDNSNames(spec.Namespace)},
			{Name: certs.MetricsClientName, DNSNames: []string{certs.MetricsScraper}, Client: true},
		},
		Labels: certLabels(),
		Owner:  ownerRef(fc),
	}
	if us := render.CertManagerCertificates(fc); us != nil {
		for _, u := range us {
			if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
				return time.Time{}, fmt.Errorf("applying the cert-manager Certificate %s/%s (is cert-manager installed?): %w", spec.Namespace, u.GetName(), err)
			}
		}
		return m.EnsureBundleFrom(ctx, t, certs.CollectorTLSName)
	}
	if ref := spec.TLS.CASecretRef; ref != nil {
		t.UserCA = ref.Name
	}
	return m.Ensure(ctx, t)
}

// applyNetworkPolicies applies the NetworkPolicies of spec.networkPolicy,
// or deletes those the operator applied when it is disabled.
func (r *FlowCollectorReconciler) applyNetworkPolicies(ctx context.Context, fc *v1alpha1.FlowCollector) error {
	spec := &fc.Spec
	np := spec.NetworkPolicy
	in := &render.NetworkPolicyInput{
		Enable:            np.Enable == nil || *np.Enable,
		MetricsNamespaces: np.MetricsNamespaces,
		AgentCIDRs:        np.AgentCIDRs,
	}
	if !in.Enable {
		for _, name := range render.NetworkPolicyNames {
			p := &networkingv1.NetworkPolicy{}
			switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: name}, p); {
			case apierrors.IsNotFound(err):
				continue
			case err != nil:
				return fmt.Errorf("reading the NetworkPolicy %s/%s: %w", spec.Namespace, name, err)
			}
			if p.Labels[render.LabelManagedBy] != render.ManagedByValue || !metav1.IsControlledBy(p, fc) {
				continue // not the operator's
			}
			if err := r.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting the NetworkPolicy %s/%s: %w", spec.Namespace, name, err)
			}
			log.FromContext(ctx).Info("deleted a NetworkPolicy no longer wanted", "networkPolicy", spec.Namespace+"/"+name)
		}
		return nil
	}
	if len(in.AgentCIDRs) == 0 {
		var nodes corev1.NodeList
		if err := r.APIReader.List(ctx, &nodes); err != nil {
			return fmt.Errorf("listing the nodes for their pod CIDRs: %w", err)
		}
		for _, n := range nodes.Items {
			in.PodCIDRs = append(in.PodCIDRs, n.Spec.PodCIDRs...)
			if len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
				in.PodCIDRs = append(in.PodCIDRs, n.Spec.PodCIDR)
			}
		}
	}
	for _, p := range render.NetworkPolicies(spec.Namespace, in, ownerRef(fc)) {
		if err := r.Client.Apply(ctx, p, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying the NetworkPolicy %s/%s: %w", *p.Namespace, *p.Name, err)
		}
	}
	return nil
}
