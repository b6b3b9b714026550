package grpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// tokenFile is Config.TokenFile as gRPC per-call credentials: the bearer
// token is read from the file at each stream, so the token the kubelet
// rotates (a projected ServiceAccount token, refreshed at 80 % of its
// life, written by swapping a symlink) is the one sent on the next
// stream. If the file cannot be read, the last token read is sent (the
// collector refuses it once it expired, and the stream is retried).
type tokenFile struct {
	path string
	// plaintext allows the token over a connection without TLS
	// (--insecure-plaintext): gRPC refuses per-call credentials there
	// unless they say so.
	plaintext bool

	mu   sync.Mutex
	last []byte
}

func newTokenFile(path string, plaintext bool) (*tokenFile, error) {
	t := &tokenFile{path: path, plaintext: plaintext}
	if _, err := t.token(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *tokenFile) token() (string, error) {
	b, err := os.ReadFile(t.path)
	t.mu.Lock()
	defer t.mu.Unlock()
	if b = bytes.TrimSpace(b); err == nil && len(b) > 0 {
		t.last = b
	}
	if len(t.last) == 0 {
		if err == nil {
			err = errors.New("empty")
		}
		return "", fmt.Errorf("grpc exporter: token file %s: %w", t.path, err)
	}
	return string(t.last), nil
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t *tokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (t *tokenFile) RequireTransportSecurity() bool { return !t.plaintext }
