package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
)

// CertManagerCertificate renders the cert-manager Certificate of the
// collector's serving certificate (spec.tls.certManager), as unstructured:
// flowlens does not link cert-manager's API. Its Secret is the one the
// operator would otherwise issue (certs.CollectorTLSName), with the same DNS
// names (CollectorDNSNames); cert-manager renews it at two thirds of its
// 90 days, as the operator does its own. nil without spec.tls.certManager.
func CertManagerCertificate(fc *v1alpha1.FlowCollector) *unstructured.Unstructured {
	cm := fc.Spec.TLS.CertManager
	if cm == nil {
		return nil
	}
	ns := fc.Spec.Namespace
	names := []any{}
	for _, n := range CollectorDNSNames(ns) {
		names = append(names, n)
	}
	labels := map[string]any{}
	for k, v := range commonLabels() {
		labels[k] = v
	}
	labels[LabelComponent] = "certificates"
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": CertManagerAPIVersion,
		"kind":       "Certificate",
		"metadata": map[string]any{
			"name":      certs.CollectorTLSName,
			"namespace": ns,
			"labels":    labels,
			"ownerReferences": []any{map[string]any{
				"apiVersion":         v1alpha1.GroupVersion.String(),
				"kind":               "FlowCollector",
				"name":               fc.Name,
				"uid":                string(fc.UID),
				"controller":         true,
				"blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{
			"secretName":  certs.CollectorTLSName,
			"commonName":  CollectorDNSNames(ns)[2],
			"dnsNames":    names,
			"duration":    "2160h",
			"renewBefore": "720h",
			"privateKey":  map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"usages":      []any{"server auth", "digital signature"},
			"issuerRef": map[string]any{
				"name":  cm.IssuerRef.Name,
				"kind":  cm.IssuerRef.Kind,
				"group": cm.IssuerRef.Group,
			},
		},
	}}
	return u
}

// CertManagerAPIVersion is the API of cert-manager's Certificate.
const CertManagerAPIVersion = "cert-manager.io/v1"

// CollectorDNSNames are the DNS names of the collectors' serving
// certificate: the Service of manifests/flowlens-collector.yaml (and the
// chart's), flowlens-collector, and the Kafka collectors' Service, in ns.
func CollectorDNSNames(ns string) []string {
	return append(certs.ServiceDNSNames(certs.CollectorService, ns), certs.ServiceDNSNames(CollectorName, ns)...)
}
