// Package tlsclient builds the client side of TLS for every flowlens
// connection that has one: the agent's grpc and otlp exporters, Kafka
// clients (the agent's exporter and the collector's consumer) and
// `flowlens observe`. One home, so that they verify servers, present
// client certificates and pick up rotated files the same way.
package tlsclient

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Config returns a client configuration that verifies the server with the
// PEM bundle in caFile (the system's roots when caFile is empty) under
// serverName (the dialled host when empty), and presents the certificate in
// certFile and keyFile when they are given (together, or it is an error).
//
// The files are read again at each handshake, so a rotated Secret (the
// kubelet swaps a symlink; cert-manager renews) is picked up by the next
// connection without a restart: the client certificate, and the CA bundle,
// which is then checked in VerifyConnection (crypto/tls takes RootCAs once;
// the verification itself is the standard one, chain and name). If the new
// files cannot be read or parsed, the last good ones are kept.
func Config(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		roots := &caBundle{file: caFile}
		if _, err := roots.pool(); err != nil {
			return nil, err
		}
		// Verified below, with the bundle as it is at this handshake.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			pool, _ := roots.pool()
			return verify(cs, pool)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("TLS certificate and key must be given together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		var mu sync.Mutex
		last := &cert
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			mu.Lock()
			defer mu.Unlock()
			if c, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
				last = &c
			}
			return last, nil
		}
	}
	return tc, nil
}

// verify is crypto/tls's own verification of a server (the chain to
// roots, the name the client asked for), with roots of our choosing.
func verify(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// caBundle is a CA file and the pool last parsed from it.
type caBundle struct {
	file string

	mu   sync.Mutex
	pem  []byte
	last *x509.CertPool
}

// pool returns the file's certificates as they are now, parsed again when
// its bytes changed; the last good pool if they cannot be read or hold no
// certificate (an error only when there never was a good one).
func (b *caBundle) pool() (*x509.CertPool, error) {
	pem, err := os.ReadFile(b.file)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		if b.last != nil {
			return b.last, nil
		}
		return nil, fmt.Errorf("read CA: %w", err)
	}
	if b.last != nil && bytes.Equal(pem, b.pem) {
		return b.last, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		if b.last != nil {
			return b.last, nil
		}
		return nil, fmt.Errorf("no certificate in %s", b.file)
	}
	b.pem, b.last = pem, pool
	return pool, nil
}
