// Package certs is the operator's certificate authority: it keeps a CA
// (Secret flowlens-ca, or a CA the user supplies), the CA bundle the agents
// and `flowlens observe` trust (ConfigMap flowlens-ca, key ca.crt) and the
// collector's serving certificate (Secret flowlens-collector-tls), the
// metrics endpoints' (flowlens-metrics-tls) and Prometheus' scrape identity
// (flowlens-metrics-client, a client certificate) in the agent namespace, and renews each at two thirds of its life. pki.go is the
// pure part (keys, certificates, PEM, when to renew); manager.go reads and
// writes the objects. The reconciler in package controller calls Manager
// and requeues itself for the next renewal; docs/security.md describes the
// whole (rotation, bring-your-own CA, cert-manager).
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// backdate is how far before its issuing a certificate is valid, for nodes
// whose clocks are a little behind the operator's.
const backdate = 5 * time.Minute

// keyPair is a certificate and its private key.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// renewAt is when c is renewed: two thirds into its validity.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotBefore.Add(life / 3 * 2)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// newCA creates a self-signed CA valid from now-backdate to now+life.
func newCA(cn string, now time.Time, life time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"flowlens"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(life),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, tmpl, key, key)
}

// newLeaf issues a certificate for dnsNames with the one extended key usage
// (ServerAuth: serving, ClientAuth: client), signed by ca, valid until
// now+life or the CA's end, whichever comes first.
func newLeaf(ca *keyPair, cn string, dnsNames []string, usage x509.ExtKeyUsage, now time.Time, life time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	end := now.Add(life)
	if ca.cert.NotAfter.Before(end) {
		end = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"flowlens"}},
		DNSNames:     slices.Clone(dnsNames),
		NotBefore:    now.Add(-backdate),
		NotAfter:     end,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	return sign(tmpl, ca.cert, key, ca.key)
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (*keyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// parseKeyPair reads a PEM certificate (the first of certPEM) and its
// PEM private key (PKCS#8, PKCS#1 or SEC 1), and checks that they match.
func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	certs, err := parseCerts(certPEM)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in tls.crt")
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("no PEM private key in tls.key")
	}
	var key any
	switch b.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("tls.key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("tls.key: not a signing key")
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, errors.New("tls.key does not match tls.crt")
	}
	return &keyPair{cert: certs[0], key: signer, certPEM: encodeCerts(certs[:1]), keyPEM: keyPEM}, nil
}

// parseCerts reads every PEM certificate of data (other blocks are skipped).
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// bundle returns the CA bundle to publish: current first, then the first
// certificate of the bundle published before (the previous CA) while it is
// valid and differs, so that clients trust a certificate the previous CA
// signed until it is replaced, and the new CA before the collector serves
// a certificate it signed.
func bundle(current *x509.Certificate, previous []*x509.Certificate, now time.Time) []*x509.Certificate {
	out := []*x509.Certificate{current}
	if len(previous) > 0 {
		p := previous[0]
		if !p.Equal(current) && now.Before(p.NotAfter) {
			out = append(out, p)
		}
	}
	return out
}

// verifies reports whether leaf chains to one of roots for usage at now.
func verifies(leaf *x509.Certificate, roots []*x509.Certificate, now time.Time, usage x509.ExtKeyUsage) bool {
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err == nil
}

// sameNames reports whether c's DNS names are exactly names (in any order).
func sameNames(c *x509.Certificate, names []string) bool {
	a, b := slices.Clone(c.DNSNames), slices.Clone(names)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// signedBy reports whether c's signature is ca's.
func signedBy(c, ca *x509.Certificate) bool {
	return c.CheckSignatureFrom(ca) == nil
}
