package collector

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/flowlens/flowlens/internal/collector/k8smeta"
	"github.com/flowlens/flowlens/internal/shared/enriched"
)

// newResolver builds the enrichment's source (a static file, a cluster's
// caches in c.cache, or none) and the resolver over it and the subnet
// labels (nil: no enrichment at all). It names the source in c.source.
func (c *Collector) newResolver() (*k8smeta.Resolver, error) {
	e := &c.cfg.Enrichment
	var source k8smeta.Source
	c.source = "off"
	switch {
	case e.StaticFile != "":
		static, err := loadStatic(e.StaticFile)
		if err != nil {
			return nil, err
		}
		source, c.source = static, "static:"+e.StaticFile
	default:
		cfg, err := kubeConfig(e, c.opts.InCluster, c.log)
		if err != nil {
			return nil, fmt.Errorf("Kubernetes enrichment: %w", err)
		}
		if cfg == nil {
			break
		}
		client, err := k8smeta.NewClient(cfg, c.log)
		if err == nil {
			c.cache, err = k8smeta.NewCache(client)
		}
		if err != nil {
			return nil, fmt.Errorf("Kubernetes enrichment: %w", err)
		}
		source, c.source = c.cache, "cluster"
		if e.Kubeconfig != "" {
			c.source = "kubeconfig:" + e.Kubeconfig
		}
	}
	if source == nil && len(e.Subnets.Labels()) == 0 {
		return nil, nil
	}
	return &k8smeta.Resolver{Source: source, Subnets: e.Subnets}, nil
}

// kubeConfig decides whether to enrich from a cluster and returns its
// configuration (nil: no enrichment). Default: on in a cluster or with a
// kubeconfig. Enable true without either falls back to client-go's usual
// kubeconfig search ($KUBECONFIG, ~/.kube/config).
func kubeConfig(e *Enrichment, inCluster func() (*rest.Config, error), log *slog.Logger) (*rest.Config, error) {
	if e.Enable != nil && !*e.Enable {
		return nil, nil
	}
	asked := e.Enable != nil
	var cfg *rest.Config
	var err error
	switch {
	case e.Kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	default:
		cfg, err = inCluster()
		if errors.Is(err, rest.ErrNotInCluster) {
			if !asked {
				return nil, nil // outside a cluster, not asked: off
			}
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		} else if err != nil && !asked {
			// In a pod without a usable service account token: run
			// without enrichment rather than not at all.
			log.Warn("running in a cluster without credentials: Kubernetes enrichment off", "error", err)
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "flowlens-collector"
	// Protobuf is smaller and cheaper to decode than JSON for the
	// informers' lists and watches.
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.ContentType = runtime.ContentTypeProtobuf
	return cfg, nil
}

// loadStatic reads a --k8s-static file: a JSON object from addresses to
// contexts (enriched.K8sContext's JSON fields).
func loadStatic(file string) (k8smeta.StaticSource, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--k8s-static: %w", err)
	}
	var raw map[string]enriched.K8sContext
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("--k8s-static %s: %w", file, err)
	}
	out := make(k8smeta.StaticSource, len(raw))
	for ip, m := range raw {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("--k8s-static %s: %q is not an address", file, ip)
		}
		switch m.Kind {
		case enriched.KindPod, enriched.KindService, enriched.KindNode:
		default:
			return nil, fmt.Errorf("--k8s-static %s: %s: kind %q, want pod, service or node", file, ip, m.Kind)
		}
		out[a.Unmap()] = m
	}
	return out, nil
}
