// Package tlsclient builds the client side of TLS for every flowlens
// connection that has one: the agent's grpc and otlp exporters, Kafka
// clients (the agent's exporter and the collector's consumer) and
// `flowlens observe`. One home, so that they verify servers, present
// client certificates and pick up rotated files the same way.
package tlsclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"google.golang.org/grpc/credentials"
)

// Config returns a client configuration that verifies the server with the
// PEM bundle in caFile (the system's roots when caFile is empty) under
// serverName (the dialled host when empty), and presents the certificate in
// certFile and keyFile when they are given (together, or it is an error).
// The client certificate is read again at each handshake, so a rotated
// Secret is picked up without a restart; if the new files cannot be read the
// last good certificate is kept. The CA bundle is read once: gRPC clients
// use Credentials, which reads it again too.
func Config(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc, _, err := config(caFile, certFile, keyFile, serverName)
	return tc, err
}

func config(caFile, certFile, keyFile, serverName string) (*tls.Config, *caBundle, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	var roots *caBundle
	if caFile != "" {
		roots = &caBundle{file: caFile}
		pool, err := roots.pool()
		if err != nil {
			return nil, nil, err
		}
		tc.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, nil, errors.New("TLS certificate and key must be given together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("load client certificate: %w", err)
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
	return tc, roots, nil
}

// Credentials are Config's as gRPC transport credentials that also read
// the CA bundle again at each handshake (when its bytes changed; the last
// good one is kept if the new one holds no certificate): a CA rotated in a
// Secret or ConfigMap volume (the kubelet swaps a symlink) verifies the
// next connection without a restart. Verification is crypto/tls's own,
// chain and name, with a configuration made for the handshake.
func Credentials(caFile, certFile, keyFile, serverName string) (credentials.TransportCredentials, error) {
	tc, roots, err := config(caFile, certFile, keyFile, serverName)
	if err != nil {
		return nil, err
	}
	if roots == nil {
		return credentials.NewTLS(tc), nil
	}
	return &reloadingCA{base: tc, roots: roots}, nil
}

// reloadingCA is TLS credentials whose RootCAs come from roots at each
// handshake.
type reloadingCA struct {
	base  *tls.Config
	roots *caBundle
}

func (r *reloadingCA) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	pool, err := r.roots.pool()
	if err != nil {
		return nil, nil, err
	}
	tc := r.base.Clone()
	tc.RootCAs = pool
	return credentials.NewTLS(tc).ClientHandshake(ctx, authority, conn)
}

func (r *reloadingCA) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsclient: client credentials only")
}

func (r *reloadingCA) Info() credentials.ProtocolInfo { return credentials.NewTLS(r.base).Info() }

func (r *reloadingCA) Clone() credentials.TransportCredentials {
	return &reloadingCA{base: r.base.Clone(), roots: r.roots}
}

// OverrideServerName implements a deprecated method of the interface.
func (r *reloadingCA) OverrideServerName(name string) error {
	r.base.ServerName = name
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
