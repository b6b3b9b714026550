package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Names of the objects, in the agent namespace (issue #27's contract: the
// agents mount the ConfigMap, the collector the Secret, `flowlens observe`
// reads the ConfigMap).
const (
	// CAName is the Secret of the operator's CA (tls.crt, tls.key) and the
	// ConfigMap of the CA bundle (BundleKey).
	CAName = "flowlens-ca"
	// BundleKey is the CA bundle's key in the ConfigMap CAName and in the
	// serving certificate's Secret.
	BundleKey = "ca.crt"
	// CollectorTLSName is the collector's serving certificate: a
	// kubernetes.io/tls Secret with tls.crt, tls.key and BundleKey.
	CollectorTLSName = "flowlens-collector-tls"
	// CollectorService is the Service whose DNS names the collector's
	// certificate holds (manifests/flowlens-collector.yaml's, the chart's).
	CollectorService = "flowlens-collector"
	// MetricsTLSName is the metrics endpoints' serving certificate (the
	// agents', the collectors'): a kubernetes.io/tls Secret like
	// CollectorTLSName, whose BundleKey is also the CA that client
	// certificates must chain to.
	MetricsTLSName = "flowlens-metrics-tls"
	// MetricsClientName is Prometheus' scrape identity: a kubernetes.io/tls
	// Secret with a client certificate (ExtKeyUsage ClientAuth only, the
	// one certificate of the CA that has it) for MetricsScraper.
	MetricsClientName = "flowlens-metrics-client"
	// MetricsScraper is the scrape identity's common name and DNS name.
	MetricsScraper = "flowlens-metrics-scraper"
	// PublishedAnnotation, on the bundle ConfigMap, is when its first
	// certificate (the current CA) was published (RFC 3339): a serving
	// certificate is signed by a new CA only Propagation after that.
	PublishedAnnotation = "flowlens.io/ca-published-at"
)

// Lifetimes: the CA lives long, a serving certificate 90 days; each is
// renewed at two thirds of its life (renewAt). Propagation is how long a new
// CA is in the published bundle before the collector serves a certificate it
// signed: the kubelet updates a mounted ConfigMap within about two minutes
// (its sync period plus its cache's), and the agents re-read the file.
const (
	DefaultCALifetime   = 3 * 365 * 24 * time.Hour
	DefaultLeafLifetime = 90 * 24 * time.Hour
	DefaultPropagation  = 10 * time.Minute
	// recheck bounds the wait before the next check, so that a Secret
	// deleted by hand is recreated (the operator does not watch Secrets:
	// that would need the right to list every Secret of the cluster).
	recheck = time.Hour
)

// Manager keeps the CA, the bundle and the serving certificates of a
// namespace. The zero lifetimes mean the defaults; Now nil means time.Now.
type Manager struct {
	// Client writes (server-side apply, field manager FieldOwner).
	Client client.Client
	// Reader reads the Secrets and the ConfigMap from the API server (they
	// are not in the operator's cache).
	Reader     client.Reader
	FieldOwner string

	Now                                   func() time.Time
	CALifetime, LeafLifetime, Propagation time.Duration
}

// Target is what Ensure keeps, in Namespace.
type Target struct {
	Namespace string
	// UserCA names a Secret of Namespace with the CA to issue from
	// (tls.crt, tls.key); empty: the operator's own CA, Secret CAName. The
	// operator never renews a user's CA; when the user replaces it, the
	// bundle holds the old and the new one, as for its own.
	UserCA string
	// Leaves are the serving certificates to issue.
	Leaves []Leaf
	Labels map[string]string
	Owner  *metav1ac.OwnerReferenceApplyConfiguration
}

// Leaf is a serving certificate, or with Client a client certificate,
// kept in Secret Name. Its common name is DNSNames[0].
type Leaf struct {
	Name     string
	DNSNames []string
	// Client issues a client certificate (ExtKeyUsage ClientAuth alone)
	// instead of a serving one (ServerAuth alone): no serving certificate
	// passes a server's client verification, no client one serves.
	Client bool
}

// usage is the one extended key usage of l's certificate.
func (l Leaf) usage() x509.ExtKeyUsage {
	if l.Client {
		return x509.ExtKeyUsageClientAuth
	}
	return x509.ExtKeyUsageServerAuth
}

// ServiceDNSNames are the names a client in the cluster may reach Service
// svc of namespace ns by.
func ServiceDNSNames(svc, ns string) []string {
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
}

func (m *Manager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Ensure creates or renews what t needs and returns when to call it again
// (the next renewal, at most an hour away).
func (m *Manager) Ensure(ctx context.Context, t Target) (time.Time, error) {
	now := m.now()
	next := now.Add(recheck)
	soon := func(at time.Time) {
		if at.Before(next) {
			next = at
		}
	}
	ca, err := m.ca(ctx, t, now)
	if err != nil {
		return time.Time{}, err
	}
	if t.UserCA == "" {
		soon(renewAt(ca.cert))
	}

	// The bundle: the current CA and the previous one.
	cm := &corev1.ConfigMap{}
	var previous []*x509.Certificate
	published := now
	switch err := m.Reader.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: CAName}, cm); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return time.Time{}, fmt.Errorf("reading the CA bundle ConfigMap %s/%s: %w", t.Namespace, CAName, err)
	default:
		previous, _ = parseCerts([]byte(cm.Data[BundleKey])) // an unreadable bundle is replaced
		if at, err := time.Parse(time.RFC3339, cm.Annotations[PublishedAnnotation]); err == nil && len(previous) > 0 && previous[0].Equal(ca.cert) {
			published = at
		}
	}
	roots := bundle(ca.cert, previous, now)
	if len(roots) > 1 {
		soon(roots[1].NotAfter) // drop the previous CA once it has expired
	}
	bundlePEM := encodeCerts(roots)
	if err := m.Client.Apply(ctx, corev1ac.ConfigMap(CAName, t.Namespace).
		WithLabels(t.Labels).
		WithAnnotations(map[string]string{PublishedAnnotation: published.UTC().Format(time.RFC3339)}).
		WithOwnerReferences(t.owners()...).
		WithData(map[string]string{BundleKey: string(bundlePEM)}),
		client.FieldOwner(m.FieldOwner), client.ForceOwnership); err != nil {
		return time.Time{}, fmt.Errorf("applying the CA bundle ConfigMap %s/%s: %w", t.Namespace, CAName, err)
	}

	// A new CA signs serving certificates once clients had the time to
	// read the bundle that holds it.
	trusted := published.Add(orDefault(m.Propagation, DefaultPropagation))
	for _, l := range t.Leaves {
		at, err := m.leaf(ctx, t, l, ca, roots, bundlePEM, now, trusted)
		if err != nil {
			return time.Time{}, err
		}
		soon(at)
	}
	return next, nil
}

// ca returns the CA to issue from: the user's, or the operator's, created
// or renewed when due.
func (m *Manager) ca(ctx context.Context, t Target, now time.Time) (*keyPair, error) {
	name := t.UserCA
	if name == "" {
		name = CAName
	}
	s := &corev1.Secret{}
	err := m.Reader.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, s)
	switch {
	case err != nil && !(apierrors.IsNotFound(err) && t.UserCA == ""):
		return nil, fmt.Errorf("reading the CA Secret %s/%s: %w", t.Namespace, name, err)
	case err == nil:
		kp, perr := parseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
		switch {
		case perr != nil && t.UserCA != "":
			return nil, fmt.Errorf("the CA Secret %s/%s: %w", t.Namespace, name, perr)
		case perr == nil && t.UserCA != "":
			if !kp.cert.IsCA {
				return nil, fmt.Errorf("the CA Secret %s/%s: its tls.crt is not a CA certificate", t.Namespace, name)
			}
			return kp, nil
		case perr == nil && kp.cert.IsCA && now.Before(renewAt(kp.cert)):
			return kp, nil
		}
	}
	// The operator's CA is missing, unreadable or due: a new one.
	kp, err := newCA("flowlens-ca", now, orDefault(m.CALifetime, DefaultCALifetime))
	if err != nil {
		return nil, err
	}
	if err := m.Client.Apply(ctx, corev1ac.Secret(CAName, t.Namespace).
		WithLabels(t.Labels).
		WithOwnerReferences(t.owners()...).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{corev1.TLSCertKey: kp.certPEM, corev1.TLSPrivateKeyKey: kp.keyPEM}),
		client.FieldOwner(m.FieldOwner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("applying the CA Secret %s/%s: %w", t.Namespace, CAName, err)
	}
	log.FromContext(ctx).Info("issued a new CA", "secret", t.Namespace+"/"+CAName, "notAfter", kp.cert.NotAfter)
	return kp, nil
}

// leaf keeps certificate l and returns when it is due. A client
// certificate follows a new CA after Propagation too: the servers that
// verify it read the bundle from their serving certificate's Secret.
func (m *Manager) leaf(ctx context.Context, t Target, l Leaf, ca *keyPair, roots []*x509.Certificate, bundlePEM []byte, now, trusted time.Time) (time.Time, error) {
	s := &corev1.Secret{}
	var cur *keyPair
	switch err := m.Reader.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: l.Name}, s); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return time.Time{}, fmt.Errorf("reading the Secret %s/%s: %w", t.Namespace, l.Name, err)
	default:
		cur, _ = parseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]) // unreadable: reissued
	}
	caReady := !now.Before(trusted)
	reissue := cur == nil || !sameNames(cur.cert, l.DNSNames) || !now.Before(renewAt(cur.cert)) ||
		!verifies(cur.cert, roots, now, l.usage()) || (caReady && !signedBy(cur.cert, ca.cert))
	if !reissue {
		due := renewAt(cur.cert)
		if !signedBy(cur.cert, ca.cert) && trusted.Before(due) {
			due = trusted
		}
		if !bytes.Equal(s.Data[BundleKey], bundlePEM) {
			if err := m.applyLeaf(ctx, t, l, cur, bundlePEM); err != nil {
				return time.Time{}, err
			}
		}
		return due, nil
	}
	kp, err := newLeaf(ca, l.DNSNames[0], l.DNSNames, l.usage(), now, orDefault(m.LeafLifetime, DefaultLeafLifetime))
	if err != nil {
		return time.Time{}, err
	}
	if err := m.applyLeaf(ctx, t, l, kp, bundlePEM); err != nil {
		return time.Time{}, err
	}
	log.FromContext(ctx).Info("issued a certificate", "secret", t.Namespace+"/"+l.Name, "notAfter", kp.cert.NotAfter)
	due := renewAt(kp.cert)
	if !caReady && trusted.Before(due) {
		due = trusted // issued by a CA clients may not trust yet: missing or invalid before
	}
	return due, nil
}

func (m *Manager) applyLeaf(ctx context.Context, t Target, l Leaf, kp *keyPair, bundlePEM []byte) error {
	if err := m.Client.Apply(ctx, corev1ac.Secret(l.Name, t.Namespace).
		WithLabels(t.Labels).
		WithOwnerReferences(t.owners()...).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{corev1.TLSCertKey: kp.certPEM, corev1.TLSPrivateKeyKey: kp.keyPEM, BundleKey: bundlePEM}),
		client.FieldOwner(m.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying the Secret %s/%s: %w", t.Namespace, l.Name, err)
	}
	return nil
}

// EnsureBundleFrom publishes the CA of Secret secret (key BundleKey, which
// cert-manager writes) as the bundle ConfigMap: with cert-manager issuing
// the collector's certificate, the operator only copies its CA. A Secret
// not written yet is no error: the next check copies it.
func (m *Manager) EnsureBundleFrom(ctx context.Context, t Target, secret string) (time.Time, error) {
	now := m.now()
	s := &corev1.Secret{}
	switch err := m.Reader.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: secret}, s); {
	case apierrors.IsNotFound(err):
		return now.Add(10 * time.Second), nil
	case err != nil:
		return time.Time{}, fmt.Errorf("reading the Secret %s/%s: %w", t.Namespace, secret, err)
	}
	ca := s.Data[BundleKey]
	if len(ca) == 0 {
		return now.Add(10 * time.Second), nil
	}
	if err := m.Client.Apply(ctx, corev1ac.ConfigMap(CAName, t.Namespace).
		WithLabels(t.Labels).
		WithOwnerReferences(t.owners()...).
		WithData(map[string]string{BundleKey: string(ca)}),
		client.FieldOwner(m.FieldOwner), client.ForceOwnership); err != nil {
		return time.Time{}, fmt.Errorf("applying the CA bundle ConfigMap %s/%s: %w", t.Namespace, CAName, err)
	}
	return now.Add(5 * time.Minute), nil
}

func (t Target) owners() []*metav1ac.OwnerReferenceApplyConfiguration {
	if t.Owner == nil {
		return nil
	}
	return []*metav1ac.OwnerReferenceApplyConfiguration{t.Owner}
}
