package k8smeta

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ReconnectEvery is how often the caches' lists and watches try the API
// server again while it cannot be reached.
const ReconnectEvery = time.Second

// NewClient is the client the caches read the API server through. While
// the API server cannot be reached (down, restarting, its address
// refusing or resetting connections), its lists and watches try again
// every ReconnectEvery, as long as the caller waits, instead of failing:
// client-go's informers back off exponentially after each failure, to
// between 30 and 60 s, so after an outage of a minute they would come
// back up to a minute late, the caches stale meanwhile. Errors the API
// server answers (403, 429, 5xx) still go to client-go, and its backoff.
// A few collectors asking once a second cost an API server that is back
// nothing. log says when the API server went and came back.
func NewClient(cfg *rest.Config, log *slog.Logger) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	r := &reconnecting{every: ReconnectEvery, log: log}
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { r.next = next; return r })
	return kubernetes.NewForConfig(cfg)
}

// reconnecting retries GET requests (lists and watches: no body, safe to
// send again) that could not reach the API server.
type reconnecting struct {
	next  http.RoundTripper
	every time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	down bool // the API server could not be reached, not since
}

func (r *reconnecting) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		resp, err := r.next.RoundTrip(req)
		if err == nil || req.Method != http.MethodGet || !unreachable(err) {
			if err == nil {
				r.state(false, nil)
			}
			return resp, err
		}
		r.state(true, err)
		t := time.NewTimer(r.every)
		select {
		case <-req.Context().Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// state logs the changes between reachable and not.
func (r *reconnecting) state(down bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down == down {
		return
	}
	r.down = down
	if down {
		r.log.Warn("Kubernetes API server unreachable: enriching from the caches, trying again", "every", r.every, "error", err)
	} else {
		r.log.Info("Kubernetes API server reachable again: the caches catch up")
	}
}

// unreachable reports whether err says the API server could not be
// reached or went away mid-request, not that it answered.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}
