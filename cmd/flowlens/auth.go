package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/pkg/tlsclient"
)

// The collector's CA bundle the operator publishes in the collector's
// namespace, for observe to verify the collector with.
const (
	caConfigMap = "flowlens-ca"
	caKey       = "ca.crt"
)

// connection is how observe talks to the collectors: TLS (--tls-ca, or
// the ConfigMap flowlens-ca of the collectors' namespace when it found them
// with the kubeconfig) or plaintext, and the bearer token sent over TLS
// (--token, else the kubeconfig's: the collector's --auth kubernetes asks
// the API server whether its user may get flowcollectors/flows).
type connection struct {
	opts []grpc.DialOption
	tls  bool
	// token: a token is sent. noToken says why not, for the message when
	// the collector wants one.
	token   bool
	noToken string
	// names are the servers' names in messages, by address (the pods
	// behind port-forwards); an address without one is its own name.
	names map[string]string
}

// connect decides the connection for serverName; kube is the kubeconfig's
// configuration when observe found the collectors with it (nil with
// --server).
func connect(ctx context.Context, o *options, serverName string, kube *rest.Config) (*connection, error) {
	c := &connection{}
	var tc *tls.Config
	creds := insecure.NewCredentials()
	switch {
	case o.tlsCA != "" || o.tlsCert != "":
		var err error
		if creds, err = tlsclient.Credentials(o.tlsCA, o.tlsCert, o.tlsKey, serverName); err != nil {
			return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
		}
		c.tls = true
	case kube != nil:
		pool, err := collectorCA(ctx, kube, o.namespace)
		if err != nil {
			return nil, err
		}
		if pool != nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
		}
	}
	if tc != nil {
		creds, c.tls = credentials.NewTLS(tc), true
	}
	c.opts = append(c.opts, grpc.WithTransportCredentials(creds))

	token := o.token
	if token == "" && kube != nil {
		var err error
		if token, err = kubeconfigToken(kube); err != nil {
			return nil, fmt.Errorf("the kubeconfig's credentials: %w", err)
		}
		if token == "" {
			c.noToken = "the kubeconfig's user has no bearer token (a client certificate, which the collector cannot check, authenticates it to the API server)"
		}
	} else if token == "" {
		c.noToken = "no --token given"
	}
	switch {
	case token == "":
	case !c.tls:
		// A token is a credential of the API server: never in plaintext.
		c.noToken = "the token is sent only over TLS, and the collector is asked in plaintext (no ConfigMap " + caConfigMap + " in namespace " + o.namespace + ", no --tls-ca)"
	default:
		c.token = true
		c.opts = append(c.opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	return c, nil
}

// collectorCA reads the CA bundle of ConfigMap flowlens-ca in namespace:
// nil when there is none (a collector installed without TLS).
func collectorCA(ctx context.Context, kube *rest.Config, namespace string) (*x509.CertPool, error) {
	cs, err := kubernetes.NewForConfig(kube)
	if err != nil {
		return nil, err
	}
	cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, caConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the collector's CA (ConfigMap %s in namespace %s; or give --tls-ca): %w", caConfigMap, namespace, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data[caKey])) {
		return nil, fmt.Errorf("ConfigMap %s in namespace %s: no certificate in its key %s", caConfigMap, namespace, caKey)
	}
	return pool, nil
}

// kubeconfigToken is the bearer token client-go would send to the API
// server with kube: a token, a token file, or what an exec plugin or an
// auth provider gives, through client-go's own transport wrappers (so that
// exec plugins run as they do for kubectl). "" when the user has none
// (a client certificate only).
func kubeconfigToken(kube *rest.Config) (string, error) {
	capture := &captureAuth{}
	rt, err := rest.HTTPWrappersForConfig(kube, capture)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequest(http.MethodGet, "https://flowlens.invalid/", nil)
	if err != nil {
		return "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	token, _ := strings.CutPrefix(capture.header, "Bearer ")
	return token, nil
}

// captureAuth is the end of the transport chain: it keeps the request's
// Authorization header and sends nothing.
type captureAuth struct{ header string }

func (c *captureAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	c.header = r.Header.Get("Authorization")
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// bearer is a token as gRPC per-call credentials, only over TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// explain turns a collector's refusal into what to do about it.
func (c *connection) explain(err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch s.Code() {
	case codes.PermissionDenied:
		return errors.New(s.Message())
	case codes.Unauthenticated:
		msg := s.Message()
		if !c.token {
			msg = fmt.Sprintf("%s: %s. The collector authorizes readers by bearer token (%s): give one with --token, e.g. --token \"$(kubectl create token <serviceaccount> -n <namespace>)\" for a ServiceAccount bound to the ClusterRole %s",
				msg, c.noToken, kubeauth.Permission(kubeauth.VerbRead), kubeauth.ReaderClusterRole)
		}
		return errors.New(msg)
	}
	return err
}
