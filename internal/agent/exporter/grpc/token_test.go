package grpc_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/pkg/receiver"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
)

// tokens is a collector's Authorize that records the bearer token of each
// call and refuses those revoked.
type tokens struct {
	mu      sync.Mutex
	seen    []string
	revoked map[string]bool
}

func (k *tokens) authorize(ctx context.Context, _ string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	tok := ""
	if v := md.Get("authorization"); len(v) == 1 {
		tok = v[0]
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = append(k.seen, tok)
	if k.revoked[tok] {
		return nil, status.Error(codes.Unauthenticated, "revoked")
	}
	return ctx, nil
}

func (k *tokens) get() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.seen)
}

// writeToken replaces the token file the way the kubelet does (a new file
// renamed over the old).
func writeToken(t *testing.T, file, tok string) {
	t.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// --token-file: the token goes with every stream as "authorization: Bearer
// <token>", read again for each stream, so a rotated token is the one the
// next stream sends.
func TestTokenFileRotated(t *testing.T) {
	pki := receivertest.NewPKI(t)
	tlsCfg, err := receiver.ServerTLS(pki.ServerCert, pki.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	k := &tokens{revoked: map[string]bool{}}
	opts := receiver.Options{TLS: tlsCfg, Authorize: k.authorize}
	rec := receivertest.Start(t, opts)
	file := filepath.Join(t.TempDir(), "token")
	writeToken(t, file, "tok-1")
	exp := newExporter(t, grpcexp.Config{Target: rec.Addr, TLSCA: pki.CA, TokenFile: file})
	if err := exp.Export(ctxT(t, 10*time.Second), batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	rec.WaitCount(10, 5*time.Second)

	// The kubelet rotates the token; the old one stops being accepted. The
	// open stream goes on until the collector restarts.
	writeToken(t, file, "tok-2")
	k.mu.Lock()
	k.revoked["Bearer tok-1"] = true
	k.mu.Unlock()
	rec.Stop()
	time.Sleep(200 * time.Millisecond)
	rec2 := receivertest.StartAt(t, rec.Addr, opts)
	if err := exp.Export(ctxT(t, 10*time.Second), batch(1, 10)); err != nil {
		t.Fatal(err)
	}
	if err := exp.Close(); err != nil {
		t.Fatal(err)
	}
	if rec2.Count() != 10 {
		t.Errorf("%d flows after the rotation, want 10", rec2.Count())
	}
	if got := k.get(); !slices.Equal(got, []string{"Bearer tok-1", "Bearer tok-2"}) {
		t.Errorf("tokens the collector saw: %q, want tok-1 then tok-2", got)
	}
}

// gRPC sends per-call credentials only over TLS: over plaintext the token
// goes only with InsecurePlaintext (the agent's --insecure-plaintext);
// without it the exporter is refused at New.
func TestTokenNeedsTLS(t *testing.T) {
	k := &tokens{revoked: map[string]bool{}}
	rec := receivertest.Start(t, receiver.Options{Authorize: k.authorize})
	file := filepath.Join(t.TempDir(), "token")
	writeToken(t, file, "tok")
	if _, err := grpcexp.New(grpcexp.Config{Target: rec.Addr, TokenFile: file}); err == nil ||
		err.Error() != "grpc exporter: a token file needs TLS (the token would cross the network in plaintext), or InsecurePlaintext" {
		t.Errorf("a token over plaintext without InsecurePlaintext: %v", err)
	}
	e := newExporter(t, grpcexp.Config{Target: rec.Addr, TokenFile: file, InsecurePlaintext: true})
	if err := e.Export(ctxT(t, 10*time.Second), batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := k.get(); !slices.Equal(got, []string{"Bearer tok"}) || rec.Count() != 10 {
		t.Errorf("with InsecurePlaintext: tokens %q, %d flows", got, rec.Count())
	}
	// A missing token file fails at New, naming it.
	if _, err := grpcexp.New(grpcexp.Config{Target: rec.Addr, TokenFile: file + "-missing"}); err == nil {
		t.Error("New with a missing token file")
	}
}
