//go:build e2e_kubelet

package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// clusterDomain is the node's DNS domain (the kubelet's clusterDomain).
const clusterDomain = "cluster.local"

// startDNS gives the cluster the Service names README's steps use
// (flowlens-collector.flowlens.svc): no DNS image can be pulled here, so
// instead of CoreDNS, Debian's dnsmasq on the node's address answers for
// cluster.local from a hosts file that a loop keeps equal to the
// Services' cluster IPs (dnsmasq rereads the directory by itself). Names
// under cluster.local it does not have are NXDOMAIN, so a resolver walks
// its search list as with CoreDNS; nothing else is answered. The kubelet
// points pods (and hostNetwork pods with ClusterFirstWithHostNet, the
// agent's policy) at it through clusterDNS.
func (n *node) startDNS(ctx context.Context, t *testing.T, kubeconfig string) {
	t.Helper()
	hosts := filepath.Join(n.dir, "dns-hosts")
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		t.Fatal(err)
	}
	n.start(ctx, t, "dnsmasq", "dnsmasq", "--keep-in-foreground", "--log-facility=-", "--no-resolv", "--no-hosts",
		"--bind-interfaces", "--listen-address="+n.ip, "--port=53", "--hostsdir="+hosts,
		"--local=/"+clusterDomain+"/", "--pid-file=", "--user=root", "--group=root", "--cache-size=0")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		last := ""
		for tick := time.NewTicker(500 * time.Millisecond); ; {
			if s := serviceHosts(loopCtx, cs); s != "" && s != last {
				tmp := filepath.Join(n.dir, "services.hosts.tmp")
				if os.WriteFile(tmp, []byte(s), 0o644) == nil && os.Rename(tmp, filepath.Join(hosts, "services")) == nil {
					last = s
				}
			}
			select {
			case <-loopCtx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
		}
	}()
}

// serviceHosts is a hosts file of every Service with a cluster IP:
// "IP name.namespace.svc.cluster.local" ("" if the list fails).
func serviceHosts(ctx context.Context, cs kubernetes.Interface) string {
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	var lines []string
	for _, s := range svcs.Items {
		if ip := s.Spec.ClusterIP; ip != "" && ip != "None" {
			lines = append(lines, fmt.Sprintf("%s %s.%s.svc.%s", ip, s.Name, s.Namespace, clusterDomain))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}
