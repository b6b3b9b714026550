package collector

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
)

func notInCluster() (*rest.Config, error) { return nil, rest.ErrNotInCluster }

// When enrichment is on: in a cluster, with a kubeconfig, or asked for;
// Enable false wins.
func TestEnrichmentChoice(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.10:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	inside := func() (*rest.Config, error) { return &rest.Config{Host: "https://10.96.0.1:443"}, nil }
	noToken := func() (*rest.Config, error) { return nil, fmt.Errorf("no token") }
	on, off := true, false
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name      string
		e         Enrichment
		inCluster func() (*rest.Config, error)
		host      string // "" = off
		err       bool
	}{
		{"auto outside", Enrichment{}, notInCluster, "", false},
		{"auto inside", Enrichment{}, inside, "https://10.96.0.1:443", false},
		{"off inside", Enrichment{Enable: &off}, inside, "", false},
		{"kubeconfig outside", Enrichment{Kubeconfig: kubeconfig}, notInCluster, "https://192.0.2.10:6443", false},
		{"kubeconfig inside", Enrichment{Kubeconfig: kubeconfig}, inside, "https://192.0.2.10:6443", false},
		{"kubeconfig off", Enrichment{Kubeconfig: kubeconfig, Enable: &off}, inside, "", false},
		{"on outside", Enrichment{Enable: &on}, notInCluster, "", true}, // nothing to connect to
		{"auto without token", Enrichment{}, noToken, "", false},
		{"on without token", Enrichment{Enable: &on}, noToken, "", true},
	} {
		cfg, err := kubeConfig(&tc.e, tc.inCluster, log)
		if (err != nil) != tc.err {
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.err)
			continue
		}
		host := ""
		if cfg != nil {
			host = cfg.Host
			if cfg.ContentType != "application/vnd.kubernetes.protobuf" {
				t.Errorf("%s: content type %q", tc.name, cfg.ContentType)
			}
		}
		if host != tc.host {
			t.Errorf("%s: host %q, want %q", tc.name, host, tc.host)
		}
	}
}
