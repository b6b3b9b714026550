// Package kubeauth is who may write and read flows, asked of the
// Kubernetes API server: a bearer token is authenticated with a
// TokenReview, the permission it needs is checked with a
// SubjectAccessReview. The collector's --auth kubernetes asks it for every
// Export stream and every GetFlows call (docs/security.md); the names of
// the permission, the token's audience and the ClusterRoles are written
// here once, for the collector, `flowlens observe` and the tests.
//
// The permission is a subresource of the FlowCollector named cluster, so
// that RBAC says it like any other: agents may create
// flowcollectors/flows (ClusterRole flowlens-agent-export), readers may
// get them (ClusterRole flowlens-flows-reader, bound by an administrator).
// No object is read: the API server only answers the reviews.
//
// The answers are kept for a short time (Options.TTL), in a bounded
// cache, so that a reconnecting agent or a follow loop costs no review
// each time; a revoked permission takes effect within the TTL. While the
// API server cannot answer (down, restarting, unreachable), the last
// answer for a token stands for up to Options.StaleTTL past its TTL, so
// that an outage of the API server does not cut the agents off
// (docs/design/faults.md); a token never reviewed before is refused then.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The permission to write or read flows, on the API server.
const (
	Group       = "flowlens.io"
	Resource    = "flowcollectors"
	Subresource = "flows"
	// Name is the FlowCollector the permission is on (the singleton).
	Name = "cluster"
	// VerbExport may Export (agents); VerbRead may GetFlows (people).
	VerbExport = "create"
	VerbRead   = "get"

	// Audience is the audience of the agents' tokens: a projected
	// ServiceAccount token for it is good for the collector only, and the
	// API server refuses it (and the collector refuses a token made for
	// the API server on Export).
	Audience = "flowlens-collector"
	// NodeNameExtra is the TokenReview's user.extra key naming the node of
	// the pod a token is bound to: the agent's identity.
	NodeNameExtra = "authentication.kubernetes.io/node-name"

	// ReaderClusterRole may read flows (get flowcollectors/flows); shipped
	// unbound. AgentClusterRole may export them, bound to the agents'
	// ServiceAccount. ObserveRole, a Role of the collector's namespace
	// shipped unbound, holds the rest `flowlens observe` needs: find the
	// collector pods, port-forward to one, read the CA bundle.
	ReaderClusterRole = "flowlens-flows-reader"
	AgentClusterRole  = "flowlens-agent-export"
	ObserveRole       = "flowlens-observe"

	// SubresourceCapture is the permission to capture packets
	// (`flowlens capture`, issue #32): create flowcollectors/capture, a
	// permission of its own because packets carry payload, which flows do
	// not. CaptureClusterRole grants it; shipped unbound.
	SubresourceCapture = "capture"
	VerbCapture        = "create"
	CaptureClusterRole = "flowlens-capture"
)

// Permission is how a refusal names what is missing, the way the API
// server says it: "get flowcollectors/flows in API group flowlens.io".
func Permission(verb string) string {
	return fmt.Sprintf("%s %s/%s in API group %s", verb, Resource, Subresource, Group)
}

// Identity is an authenticated caller.
type Identity struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
	// Node is the node of the pod the token is bound to (NodeNameExtra),
	// "" for a token that is not bound to a pod on a node.
	Node string
}

// ErrUnauthenticated is a token the API server does not accept (for the
// audience asked): expired, revoked, forged, or made for another audience.
var ErrUnauthenticated = errors.New("the token is not valid")

// ForbiddenError is an authenticated caller without the permission.
type ForbiddenError struct {
	User, Verb string
	Reason     string // the authorizer's, often ""
}

func (e *ForbiddenError) Error() string {
	msg := fmt.Sprintf("forbidden: %s cannot %s", quoteUser(e.User), Permission(e.Verb))
	if e.Verb == VerbRead {
		msg += fmt.Sprintf(" (resourceName %q); an administrator can bind the ClusterRole %s to it", Name, ReaderClusterRole)
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

func quoteUser(u string) string { return fmt.Sprintf("User %q", u) }

// Options tune a Reviewer. Zero values take the defaults.
type Options struct {
	// TTL is how long an answer (allowed or not) is reused; default 10 s.
	TTL time.Duration
	// StaleTTL is how long past its TTL an answer stands while the API
	// server cannot answer again (its reviews fail, not refuse); default
	// DefaultStaleTTL. Meanwhile each token is reviewed again at most
	// every TTL.
	StaleTTL time.Duration
	// Timeout bounds each review (the API server may hang, not refuse);
	// default 5 s.
	Timeout time.Duration
	// MaxEntries bounds the cache; default 4096. When full, expired
	// entries go first, then any.
	MaxEntries int
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// MaxInFlight bounds the reviews asked at once; default 16. Tokens
	// nobody saw before each cost a review: callers beyond the bound wait
	// (as long as their context lets them), so that a flood of made-up
	// tokens costs the API server no more than this.
	MaxInFlight int
}

// DefaultStaleTTL is Options.StaleTTL's default: an outage of the API
// server this long (past the TTL) keeps the agents that were allowed
// before it exporting; past it, or for a revoked permission that the API
// server could not say, they are refused until it answers.
const DefaultStaleTTL = 5 * time.Minute

// Reviewer asks the API server, through a client whose identity may
// create tokenreviews and subjectaccessreviews (system:auth-delegator).
type Reviewer struct {
	client kubernetes.Interface
	opts   Options
	// Stale counts the answers given past their TTL because the API
	// server could not answer.
	Stale atomic.Uint64

	inFlight chan struct{}

	mu    sync.Mutex
	cache map[cacheKey]cacheEntry
}

type cacheKey struct {
	token    [sha256.Size]byte // the token's hash: no token is kept
	audience string
	verb     string
}

type cacheEntry struct {
	id      *Identity
	err     error
	expires time.Time
	// staleUntil is when the answer can no longer stand in for one the
	// API server cannot give: its TTL plus StaleTTL after it was given.
	staleUntil time.Time
}

// New returns a Reviewer over client.
func New(client kubernetes.Interface, opts Options) *Reviewer {
	if opts.TTL <= 0 {
		opts.TTL = 10 * time.Second
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 16
	}
	if opts.StaleTTL <= 0 {
		opts.StaleTTL = DefaultStaleTTL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	return &Reviewer{client: client, opts: opts, inFlight: make(chan struct{}, opts.MaxInFlight), cache: map[cacheKey]cacheEntry{}}
}

// Authorize authenticates token for audience ("": the API server's own,
// a person's token) and checks that its user may verb flowcollectors/flows.
// It returns the identity, or ErrUnauthenticated, a *ForbiddenError, or
// the error of a review that could not be made (not cached); while the
// API server cannot answer, the last answer within its StaleTTL instead.
func (r *Reviewer) Authorize(ctx context.Context, token, audience, verb string) (*Identity, error) {
	key := cacheKey{sha256.Sum256([]byte(token)), audience, verb}
	now := r.opts.Now()
	r.mu.Lock()
	e, ok := r.cache[key]
	r.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.id, e.err
	}
	select {
	case r.inFlight <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	rctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	id, err := r.authenticate(rctx, token, audience)
	if err == nil {
		err = r.allowed(rctx, id, verb)
	}
	cancel()
	<-r.inFlight
	var forbidden *ForbiddenError
	if err != nil && !errors.Is(err, ErrUnauthenticated) && !errors.As(err, &forbidden) {
		// The API server could not answer. Its last answer stands, if
		// recent enough, and is asked for again after another TTL;
		// without one, ask again next time.
		if ok && ctx.Err() == nil && now.Before(e.staleUntil) {
			r.Stale.Add(1)
			e.expires = now.Add(r.opts.TTL)
			r.store(key, e, now)
			return e.id, e.err
		}
		return nil, err
	}
	if err != nil {
		id = nil
	}
	r.store(key, cacheEntry{id, err, now.Add(r.opts.TTL), now.Add(r.opts.TTL + r.opts.StaleTTL)}, now)
	return id, err
}

// Len is the number of answers kept.
func (r *Reviewer) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}

func (r *Reviewer) store(key cacheKey, e cacheEntry, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= r.opts.MaxEntries {
		// Answers too old to stand in for the API server go first, then
		// expired ones, then any.
		for k, old := range r.cache {
			if !now.Before(old.staleUntil) {
				delete(r.cache, k)
			}
		}
		for k, old := range r.cache {
			if len(r.cache) < r.opts.MaxEntries {
				break
			}
			if !now.Before(old.expires) {
				delete(r.cache, k)
			}
		}
		for k := range r.cache {
			if len(r.cache) < r.opts.MaxEntries {
				break
			}
			delete(r.cache, k)
		}
	}
	r.cache[key] = e
}

func (r *Reviewer) authenticate(ctx context.Context, token, audience string) (*Identity, error) {
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}
	if audience != "" {
		tr.Spec.Audiences = []string{audience}
	}
	res, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	if !res.Status.Authenticated {
		if res.Status.Error != "" {
			return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, res.Status.Error)
		}
		return nil, ErrUnauthenticated
	}
	u := res.Status.User
	id := &Identity{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: map[string][]string{}}
	for k, v := range u.Extra {
		id.Extra[k] = v
	}
	if v := u.Extra[NodeNameExtra]; len(v) == 1 {
		id.Node = v[0]
	}
	return id, nil
}

func (r *Reviewer) allowed(ctx context.Context, id *Identity, verb string) error {
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: id.User, UID: id.UID, Groups: id.Groups, Extra: map[string]authzv1.ExtraValue{},
		ResourceAttributes: &authzv1.ResourceAttributes{Group: Group, Resource: Resource, Subresource: Subresource, Name: Name, Verb: verb},
	}}
	for k, v := range id.Extra {
		sar.Spec.Extra[k] = v
	}
	res, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !res.Status.Allowed || res.Status.Denied {
		return &ForbiddenError{User: id.User, Verb: verb, Reason: res.Status.Reason}
	}
	return nil
}
