package render

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/operator/certs"
)

// CertManagerCertificates render the cert-manager Certificates of
// spec.tls.certManager, as unstructured (flowlens does not link
// cert-manager's API): the collector's serving certificate, the metrics
// endpoints' and Prometheus' scrape identity, each in the Secret the
// operator would otherwise issue (certs.CollectorTLSName,
// certs.MetricsTLSName, certs.MetricsClientName) with the same names and
// the one usage (server auth, or client auth for the scrape identity);
// cert-manager renews them at two thirds of their 90 days, as the operator
// does its own. nil without spec.tls.certManager.
func CertManagerCertificates(fc *v1alpha1.FlowCollector) []*unstructured.Unstructured {
	if fc.Spec.TLS.CertManager == nil {
		return nil
	}
	ns := fc.Spec.Namespace
	out := []*unstructured.Unstructured{
		certManagerCertificate(fc, certs.CollectorTLSName, CollectorDNSNames(ns)[2], CollectorDNSNames(ns), "server auth"),
		certManagerCertificate(fc, certs.MetricsTLSName, MetricsDNSNames(ns)[2], MetricsDNSNames(ns), "server auth"),
		certManagerCertificate(fc, certs.MetricsClientName, certs.MetricsScraper, []string{certs.MetricsScraper}, "client auth"),
	}
	return out
}

// certManagerCertificate is the Certificate of Secret name.
func certManagerCertificate(fc *v1alpha1.FlowCollector, name, commonName string, dnsNames []string, usage string) *unstructured.Unstructured {
	cm := fc.Spec.TLS.CertManager
	names := []any{}
	for _, n := range dnsNames {
		names = append(names, n)
	}
	labels := map[string]any{}
	for k, v := range commonLabels() {
		labels[k] = v
	}
	labels[LabelComponent] = "certificates"
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": CertManagerAPIVersion,
		"kind":       "Certificate",
		"metadata": map[string]any{
			"name":      name,
			"namespace": fc.Spec.Namespace,
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
			"secretName":  name,
			"commonName":  commonName,
			"dnsNames":    names,
			"duration":    "2160h",
			"renewBefore": "720h",
			"privateKey":  map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
			"usages":      []any{usage, "digital signature"},
			"issuerRef": map[string]any{
				"name":  cm.IssuerRef.Name,
				"kind":  cm.IssuerRef.Kind,
				"group": cm.IssuerRef.Group,
			},
		},
	}}
}

// CertManagerAPIVersion is the API of cert-manager's Certificate.
const CertManagerAPIVersion = "cert-manager.io/v1"

// CollectorDNSNames are the DNS names of the collectors' serving
// certificate: the Service of manifests/flowlens-collector.yaml (and the
// chart's), flowlens-collector, and the Kafka collectors' Service, in ns.
func CollectorDNSNames(ns string) []string {
	return append(certs.ServiceDNSNames(certs.CollectorService, ns), certs.ServiceDNSNames(CollectorName, ns)...)
}

// MetricsDNSNames are the DNS names of the metrics endpoints' serving
// certificate (certs.MetricsTLSName): the metrics Services of the agents
// (MetricsServiceName), of the Kafka collectors (CollectorName) and of the
// chart's collector (certs.CollectorService), in ns. A scrape's TLS
// configuration names one as serverName: the endpoints are scraped at
// their nodes' or pods' addresses.
func MetricsDNSNames(ns string) []string {
	return slices.Concat(certs.ServiceDNSNames(MetricsServiceName, ns), certs.ServiceDNSNames(CollectorName, ns), certs.ServiceDNSNames(certs.CollectorService, ns))
}
