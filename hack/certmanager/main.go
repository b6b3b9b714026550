// Command certmanager runs cert-manager's certificate controllers (the
// Certificate life cycle, the CertificateRequest approver, the CA and
// SelfSigned issuers and their Issuer/ClusterIssuer readiness) against the
// API server of --kubeconfig: the part of cert-manager's controller that
// the operator's spec.tls.certManager needs, so that its test
// (internal/operator/controller's TestCertManagerIssues) watches real
// cert-manager issue the Secrets.
//
// cert-manager's own command (github.com/cert-manager/cert-manager/cmd/controller)
// is a module of its own that the Go module proxy does not serve; its
// controllers are in the main module, registered by the packages imported
// here, and started the way that command starts them (a ContextFactory,
// each constructor, then the informer factories).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"k8s.io/klog/v2"

	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	clusterNS := flag.String("cluster-resource-namespace", "cert-manager", "namespace of ClusterIssuers' Secrets")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *clusterNS); err != nil {
		fmt.Fprintln(os.Stderr, "certmanager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterNS string) error {
	ctx = klog.NewContext(ctx, klog.Background())
	opts := controllerpkg.ContextOptions{Kubeconfig: kubeconfig}
	opts.ClusterResourceNamespace = clusterNS
	opts.KubernetesAPIQPS, opts.KubernetesAPIBurst = 50, 100
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(controllerpkg.Known()))
	for n := range controllerpkg.Known() {
		names = append(names, n)
	}
	sort.Strings(names)
	errs := make(chan error, len(names))
	for _, n := range names {
		c, err := controllerpkg.Known()[n](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", n, err)
		}
		go func() { errs <- c.Run(2, ctx) }()
		klog.InfoS("started controller", "name", n)
	}
	cc, err := factory.Build()
	if err != nil {
		return err
	}
	cc.KubeSharedInformerFactory.Start(ctx.Done())
	cc.SharedInformerFactory.Start(ctx.Done())
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}
