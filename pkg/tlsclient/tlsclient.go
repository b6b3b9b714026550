// Package tlsclient builds the client side of TLS for every flowlens
// connection that has one: the agent's grpc and otlp exporters, Kafka
// clients (the agent's exporter and the collector's consumer) and
// `flowlens observe`. One home, so that they verify servers, present
// client certificates and pick up rotated files the same way.
package tlsclient

import (
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
// The client certificate is read again at each handshake, so a rotated
// Secret is picked up without a restart; if the new files cannot be read the
// last good certificate is kept.
func Config(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", caFile)
		}
		tc.RootCAs = pool
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
