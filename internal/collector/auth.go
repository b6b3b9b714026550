package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/history"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/pkg/receiver"
)

// authorizer is --auth kubernetes: receiver.Options.Authorize over the
// API server's reviews (package kubeauth), and the check of every flow's
// node_name against its sender's identity (checkIdentity).
type authorizer struct {
	rev     *kubeauth.Reviewer
	refused *atomic.Uint64 // MetricRefusedFlows{reason="identity"}
	// every is how often a stream's token is reviewed again
	// (Options.ReauthorizeEvery).
	every time.Duration

	log       *slog.Logger
	staleSeen atomic.Uint64 // rev.Stale when staleLog last logged
	staleLast atomic.Int64  // when (UnixNano)
}

// DefaultReauthorizeEvery is how often the token of an open Export stream
// is reviewed again: an agent whose token expired or whose permission was
// revoked is cut off within about this time (plus the reviews' cache
// TTL), not when its stream happens to end.
const DefaultReauthorizeEvery = time.Minute

// senderKey carries the sender of an Export stream in its context, from
// Authorize to the Handler.
type senderKey struct{}

// sender is an Export caller: its node (its identity), and its token to
// review again ("" for a certificate, checked at the handshake).
type sender struct {
	node  string
	token string

	mu      sync.Mutex
	checked time.Time
}

// newAuth decides --auth (auto: kubernetes when the collector reaches an
// API server: --kubeconfig, or in a cluster) and sets up the reviews and
// receiver.Options.Authorize. With --listen "" there is nothing to
// authorize.
func (c *Collector) newAuth() error {
	cfg := &c.cfg
	if cfg.Listen == "" && (cfg.UI.Listen == "" || cfg.History.Size == 0) {
		return nil
	}
	mode := cfg.Auth
	var rc *rest.Config
	var err error
	switch {
	case mode == AuthNone:
	case cfg.Enrichment.Kubeconfig != "":
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Enrichment.Kubeconfig)
	default:
		rc, err = c.opts.InCluster()
		if err != nil && mode == AuthKubernetes {
			if !errors.Is(err, rest.ErrNotInCluster) {
				return fmt.Errorf("--auth kubernetes: %w", err)
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		} else if err != nil {
			if !errors.Is(err, rest.ErrNotInCluster) {
				c.log.Warn("--auth auto: in a cluster without credentials: no per-call authorization", "error", err)
			}
			rc, err = nil, nil
		}
	}
	if err != nil {
		return fmt.Errorf("--auth kubernetes: %w", err)
	}
	if rc == nil {
		c.log.Warn("no per-call authorization (--auth none, or auto without a cluster): whoever reaches --listen may export flows of any node and read every flow (docs/security.md)",
			"listen", cfg.Listen, "auth", mode)
		return nil
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "flowlens-collector"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("--auth kubernetes: %w", err)
	}
	a := &authorizer{rev: kubeauth.New(client, kubeauth.Options{}), refused: &c.refusedIdentity, every: c.opts.ReauthorizeEvery, log: c.log}
	if a.every <= 0 {
		a.every = DefaultReauthorizeEvery
	}
	c.auth = a
	cfg.Limits.Authorize = a.authorize
	cfg.Limits.CheckInstance = a.checkInstance
	c.log.Info("authorizing every call with the API server (--auth kubernetes)", "host", rc.Host,
		"export", kubeauth.Permission(kubeauth.VerbExport), "read", kubeauth.Permission(kubeauth.VerbRead),
		"capture", kubeauth.PermissionOn(kubeauth.SubresourceCapture, kubeauth.VerbCapture))
	return nil
}

// authorize is receiver.Options.Authorize: Export takes an agent (a token
// of audience flowlens-collector bound to a pod on a node, whose user may
// create flowcollectors/flows; or a verified client certificate, its CN the
// node), GetFlows a person or a program whose kubeconfig's token may get
// flowcollectors/flows. Certificates never read. Anything else is refused.
func (a *authorizer) authorize(ctx context.Context, method string) (context.Context, error) {
	token := bearer(ctx)
	switch method {
	case flowv1.FlowCollector_Export_FullMethodName, flowv1.FlowCollector_ExportAcked_FullMethodName, flowv1.PacketCapture_AgentCapture_FullMethodName:
		if token == "" {
			if cn, ok := verifiedCN(ctx); ok {
				return context.WithValue(ctx, senderKey{}, &sender{node: cn}), nil
			}
			return nil, status.Error(codes.Unauthenticated, "collector: Export needs a bearer token (a ServiceAccount token of audience "+
				kubeauth.Audience+", --token-file) or a client certificate of the collector's --tls-client-ca")
		}
		id, err := a.review(ctx, token, kubeauth.Audience, kubeauth.VerbExport)
		if err != nil {
			return nil, err
		}
		if id.Node == "" {
			return nil, status.Errorf(codes.PermissionDenied, "forbidden: the token of User %q is bound to no node: agents send a projected ServiceAccount token (audience %s) of their pod",
				id.User, kubeauth.Audience)
		}
		return context.WithValue(ctx, senderKey{}, &sender{node: id.Node, token: token, checked: time.Now()}), nil
	case flowv1.FlowHistory_GetFlows_FullMethodName:
		if token == "" {
			return nil, status.Error(codes.Unauthenticated, "collector: reading flows needs a bearer token whose user may "+
				kubeauth.Permission(kubeauth.VerbRead)+" (flowlens observe sends the kubeconfig's)")
		}
		id, err := a.review(ctx, token, "", kubeauth.VerbRead)
		if err != nil {
			return nil, err
		}
		return history.WithClient(ctx, "user "+id.User), nil
	case flowv1.PacketCapture_Capture_FullMethodName:
		// Capturing packets is a permission of its own: packets carry
		// payload, flows do not.
		perm := kubeauth.PermissionOn(kubeauth.SubresourceCapture, kubeauth.VerbCapture)
		if token == "" {
			return nil, status.Error(codes.Unauthenticated, "collector: capturing packets needs a bearer token whose user may "+
				perm+" (flowlens capture sends the kubeconfig's)")
		}
		id, err := a.reviewOn(ctx, token, "", kubeauth.SubresourceCapture, kubeauth.VerbCapture)
		if err != nil {
			return nil, err
		}
		return context.WithValue(ctx, userKey{}, id.User), nil
	}
	return nil, status.Errorf(codes.PermissionDenied, "forbidden: %s", method)
}

// maxTokenBytes bounds a bearer token sent on to the API server: service
// account and OIDC tokens are a few KiB; a larger one is refused without
// a review.
const maxTokenBytes = 16 << 10

// review asks the reviewer and turns its answer into a gRPC status.
func (a *authorizer) review(ctx context.Context, token, audience, verb string) (*kubeauth.Identity, error) {
	return a.reviewOn(ctx, token, audience, kubeauth.Subresource, verb)
}

// reviewOn is review for another subresource (capture).
func (a *authorizer) reviewOn(ctx context.Context, token, audience, subresource, verb string) (*kubeauth.Identity, error) {
	if len(token) > maxTokenBytes {
		return nil, status.Errorf(codes.Unauthenticated, "collector: a bearer token of %d bytes, max %d", len(token), maxTokenBytes)
	}
	id, err := a.rev.AuthorizeOn(ctx, token, audience, subresource, verb)
	var forbidden *kubeauth.ForbiddenError
	switch {
	case err == nil:
		a.staleLog()
		return id, nil
	case errors.As(err, &forbidden):
		return nil, status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, kubeauth.ErrUnauthenticated):
		what := "a token of the Kubernetes API server"
		if audience != "" {
			what = "a token of audience " + audience
		}
		return nil, status.Errorf(codes.Unauthenticated, "collector: %v (want %s)", err, what)
	}
	return nil, status.Errorf(codes.Unavailable, "collector: cannot authorize the call: %v", err)
}

// MetricAuthStaleAnswers counts the calls authorized with an answer past
// its TTL because the API server could not renew it (docs/metrics.md).
const MetricAuthStaleAnswers = "flowlens_collector_auth_stale_answers_total"

// metrics are the authorizer's: how often an outage of the API server
// made it stand on old answers (kubeauth.DefaultStaleTTL at most).
func (a *authorizer) metrics() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{Name: MetricAuthStaleAnswers,
		Help: "Calls authorized with the API server's last answer past its TTL, because the API server could not be asked (at most kubeauth.DefaultStaleTTL past it)."},
		func() float64 { return float64(a.rev.Stale.Load()) })}
}

// staleLog says, at most once a minute, that calls were authorized with
// answers the API server could not renew (kubeauth.DefaultStaleTTL).
func (a *authorizer) staleLog() {
	n := a.rev.Stale.Load()
	if n == a.staleSeen.Load() {
		return
	}
	now, last := time.Now().UnixNano(), a.staleLast.Load()
	if now-last < int64(time.Minute) || !a.staleLast.CompareAndSwap(last, now) {
		return
	}
	a.staleSeen.Store(n)
	a.log.Warn("API server unreachable: authorizing agents with its last answers", "stale_for_up_to", kubeauth.DefaultStaleTTL,
		"stale_answers_total", n)
}

// bearer is the call's "authorization: Bearer <token>", "" without one.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok && t != "" {
			return t
		}
	}
	return ""
}

// verifiedCN is the subject CN of the client certificate the TLS handshake
// verified (--tls-client-ca), if any.
func verifiedCN(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.PeerCertificates) == 0 {
		return "", false
	}
	cn := ti.State.PeerCertificates[0].Subject.CommonName
	return cn, cn != ""
}

// checkIdentity hands next the flows of the sender's own node and refuses
// the others, counted: the stream then ends with PermissionDenied. Without
// an identity (--auth none) every flow goes through.
func (a *authorizer) checkIdentity(next receiver.Handler) receiver.Handler {
	return func(ctx context.Context, b *receiver.Batch) error {
		s, ok := ctx.Value(senderKey{}).(*sender)
		if !ok {
			return next(ctx, b)
		}
		if err := a.recheck(ctx, s); err != nil {
			return err
		}
		node := s.node
		own := b.Flows[:0:0]
		var other string
		refused := 0
		for _, f := range b.Flows {
			if f.GetNodeName() == node {
				own = append(own, f)
				continue
			}
			refused++
			other = f.GetNodeName()
		}
		if refused == 0 {
			return next(ctx, b)
		}
		a.refused.Add(uint64(refused))
		if len(own) > 0 {
			if err := next(ctx, &receiver.Batch{Peer: b.Peer, Flows: own}); err != nil {
				return err
			}
		}
		// The message is refused for good (its own node's flows went
		// through): an agent on ExportAcked drops it rather than resending.
		return receiver.Refuse(status.Errorf(codes.PermissionDenied, "forbidden: %d flows of node %q from the agent of node %q", refused, other, node))
	}
}

// checkInstance is receiver.Options.CheckInstance: an agent instance is
// its node's name, "/" and a random part (flowpb.CheckAgentInstance), and
// a sender may only use instances of its own node. Without an identity
// (--auth none) every instance goes through.
func (a *authorizer) checkInstance(ctx context.Context, instance string) error {
	s, ok := ctx.Value(senderKey{}).(*sender)
	if !ok {
		return nil
	}
	if node, _, _ := strings.Cut(instance, "/"); node != s.node {
		return status.Errorf(codes.PermissionDenied, "forbidden: agent_instance %q is not of node %q, the caller's", instance, s.node)
	}
	return nil
}

// recheck reviews the token of s again when it was last reviewed more than
// a.every ago: an error (a gRPC status) ends the stream, and the agent
// comes back with its current token.
func (a *authorizer) recheck(ctx context.Context, s *sender) error {
	if s.token == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.checked) < a.every {
		return nil
	}
	id, err := a.review(ctx, s.token, kubeauth.Audience, kubeauth.VerbExport)
	if err != nil {
		return err
	}
	if id.Node != s.node {
		return status.Errorf(codes.PermissionDenied, "forbidden: the token now names node %q, not %q", id.Node, s.node)
	}
	s.checked = time.Now()
	return nil
}
