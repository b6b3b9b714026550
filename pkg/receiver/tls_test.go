package receiver_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/pkg/tlsclient"
)

// secretDir is a directory the way the kubelet writes a Secret or
// ConfigMap volume: the files are symlinks into ..data, itself a symlink
// to a timestamped directory, and an update swaps ..data at once.
type secretDir struct {
	dir string
	gen int
}

func newSecretDir(t *testing.T, files map[string]string) *secretDir {
	d := &secretDir{dir: t.TempDir()}
	d.update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(d.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// update writes files (name: the file to copy) into a new timestamped
// directory and swaps ..data to it.
func (d *secretDir) update(t *testing.T, files map[string]string) {
	t.Helper()
	d.gen++
	ts := fmt.Sprintf("..2026_11_28_%02d", d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, from := range files {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.dir, ts, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func (d *secretDir) path(name string) string { return filepath.Join(d.dir, name) }

// servedCert is the DER of the certificate the server at addr presents to
// a gRPC client with creds (after that client verified it).
func servedCert(addr string, creds credentials.TransportCredentials) ([]byte, error) {
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	authority := addr // as gRPC picks it: the credentials' server name first
	if n := creds.Info().ServerName; n != "" {
		authority = n
	}
	conn, info, err := creds.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return info.(credentials.TLSInfo).State.PeerCertificates[0].Raw, nil
}

func certDER(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	return blk.Bytes
}

// Rotated certificates without a restart (issue #27): the collector's
// certificate, key and client CA, and the agent's CA and client
// certificate, all in kubelet-style volumes, are replaced by those of a
// new CA. Open connections go on; new ones use the new files on both
// sides; a client that kept the old files is refused.
func TestTLSFilesRotated(t *testing.T) {
	old, next := receivertest.NewPKI(t), receivertest.NewPKI(t)
	server := newSecretDir(t, map[string]string{"tls.crt": old.ServerCert, "tls.key": old.ServerKey, "ca.crt": old.CA})
	client := newSecretDir(t, map[string]string{"tls.crt": old.ClientCert, "tls.key": old.ClientKey, "ca.crt": old.CA})

	stc, err := receiver.ServerTLS(server.path("tls.crt"), server.path("tls.key"), server.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	rec := receivertest.Start(t, receiver.Options{TLS: stc})
	rotating, err := tlsclient.Credentials(client.path("ca.crt"), client.path("tls.crt"), client.path("tls.key"), "")
	if err != nil {
		t.Fatal(err)
	}
	stale, err := tlsclient.Credentials(old.CA, old.ClientCert, old.ClientKey, "")
	if err != nil {
		t.Fatal(err)
	}
	dialTLS := func(creds credentials.TransportCredentials) *grpc.ClientConn {
		conn, err := grpc.NewClient(rec.Addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	if got, err := servedCert(rec.Addr, rotating); err != nil || !bytes.Equal(got, certDER(t, old.ServerCert)) {
		t.Fatalf("before the rotation: %v, or not the first certificate", err)
	}
	openStream := open(t, dialTLS(rotating))
	if err := openStream.Send(flows(1, 1)); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(1, 5*time.Second)

	server.update(t, map[string]string{"tls.crt": next.ServerCert, "tls.key": next.ServerKey, "ca.crt": next.CA})
	client.update(t, map[string]string{"tls.crt": next.ClientCert, "tls.key": next.ClientKey, "ca.crt": next.CA})

	// The open stream keeps its connection.
	if err := openStream.Send(flows(2, 1)); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(3, 5*time.Second)
	if _, err := openStream.CloseAndRecv(); err != nil {
		t.Fatalf("the stream opened before the rotation: %v", err)
	}
	// New connections: the new server certificate, verified with the new
	// CA; the new client certificate, verified with the new client CA.
	if got, err := servedCert(rec.Addr, rotating); err != nil || !bytes.Equal(got, certDER(t, next.ServerCert)) {
		t.Errorf("after the rotation: %v, or still the old certificate", err)
	}
	if _, err := sendAndFinish(open(t, dialTLS(rotating)), flows(4, 2)); err != nil {
		t.Errorf("a new stream with the rotated files: %v", err)
	}
	if rec.Count() != 7 {
		t.Errorf("%d flows received, want 7", rec.Count())
	}
	// The old files are good for nothing now.
	if _, err := servedCert(rec.Addr, stale); err == nil {
		t.Error("a client with the old CA accepted the new server certificate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := flowv1.NewFlowCollectorClient(dialTLS(stale)).Export(ctx)
	if err == nil {
		_, err = sendAndFinish(st, flows(1, 3))
	}
	if err == nil {
		t.Error("a client with the old certificate and CA exported")
	}
	if rec.Count() != 7 {
		t.Errorf("%d flows received, want 7", rec.Count())
	}

	// Files that do not parse (half written): the last good ones are kept.
	bad := filepath.Join(t.TempDir(), "bad.crt")
	if err := os.WriteFile(bad, []byte("-----BEGIN CERTIFICATE-----\ntruncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	server.update(t, map[string]string{"tls.crt": bad, "tls.key": next.ServerKey, "ca.crt": next.CA})
	client.update(t, map[string]string{"tls.crt": next.ClientCert, "tls.key": next.ClientKey, "ca.crt": bad})
	if got, err := servedCert(rec.Addr, rotating); err != nil || !bytes.Equal(got, certDER(t, next.ServerCert)) {
		t.Errorf("after a bad update: %v, or not the last good certificate", err)
	}
}

// The CA read again at each handshake still verifies the chain and the
// name: the dialled address's (an IP address here) or the one given.
func TestTLSClientVerifiesName(t *testing.T) {
	pki := receivertest.NewPKI(t)
	stc, err := receiver.ServerTLS(pki.ServerCert, pki.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	rec := receivertest.Start(t, receiver.Options{TLS: stc})
	for _, tc := range []struct {
		name, ca string
		ok       bool
	}{
		{"", pki.CA, true}, {"localhost", pki.CA, true}, {"127.0.0.1", pki.CA, true},
		{"collector.example", pki.CA, false}, {"127.0.0.2", pki.CA, false}, {"", pki.OtherCA, false},
	} {
		c, err := tlsclient.Credentials(tc.ca, "", "", tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := servedCert(rec.Addr, c); (err == nil) != tc.ok {
			t.Errorf("server name %q, CA %s: %v, want ok %v", tc.name, filepath.Base(tc.ca), err, tc.ok)
		}
	}
}
