package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	grpcexp "github.com/flowlens/flowlens/internal/agent/exporter/grpc"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/internal/collector/ui"
	"github.com/flowlens/flowlens/internal/shared/kubeauth"
	"github.com/flowlens/flowlens/pkg/receiver/receivertest"
	"github.com/flowlens/flowlens/pkg/tlsclient"
)

// The service map (--ui-listen) is authorized as GetFlows, against a real
// kube-apiserver: a reader's token reads the graph, its flows and the
// page; a token without the read permission gets 403, no token or a token
// of another audience 401, each with the reason; over the collector's TLS.
func TestServiceMapAuthorization(t *testing.T) {
	c, cfg := newAuthCluster(t, []string{"node-7"}, "agent", "reader", "nobody")
	c.role(t, kubeauth.AgentClusterRole, kubeauth.VerbExport, "agent")
	c.role(t, kubeauth.ReaderClusterRole, kubeauth.VerbRead, "reader")
	agent := c.podToken(t, "agent", "node-7", kubeauth.Audience)
	reader := c.podToken(t, "reader", "node-7", "")
	nobody := c.podToken(t, "nobody", "node-7", "")

	pki := receivertest.NewPKI(t)
	a := startAuthCollector(t, cfg, 0, "--tls-cert="+pki.ServerCert, "--tls-key="+pki.ServerKey, "--ui-listen=127.0.0.1:0")
	if a.UI == nil {
		t.Fatal("no service map address")
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	c.must(t, os.WriteFile(tokenFile, []byte(agent), 0o600))
	collectortest.Export(t, grpcexp.Config{Target: a.GRPC.String(), TLSCA: pki.CA, TokenFile: tokenFile, NodeName: "node-7",
		AgentIP: netip.MustParseAddr("192.0.2.1")}, collectortest.Records())

	tc, err := tlsclient.Config(pki.CA, "", "", "")
	c.must(t, err)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	base := "https://" + a.UI.String()
	const since = "?since=2025-01-01T00:00:00Z"
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		c.must(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		c.must(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		c.must(t, err)
		return resp.StatusCode, string(b)
	}

	code, body := get(ui.PathGraph+since, reader)
	var g struct {
		Flows int
		Edges []struct{ Bytes uint64 }
	}
	if err := json.Unmarshal([]byte(body), &g); code != 200 || err != nil || g.Flows != 3 || len(g.Edges) != 3 {
		t.Errorf("graph as a reader: %d %s (%v); want 200, 3 flows on 3 edges", code, body, err)
	}
	if code, body := get("/", reader); code != 200 || !strings.Contains(body, "<html") {
		t.Errorf("page as a reader: %d %.200s", code, body)
	}
	if code, body := get(ui.PathFlows+since+"&source=external:10.0.0.0/24&target=external:192.168.7.0/24", reader); code != 200 || !strings.Contains(body, `"matched":1`) {
		t.Errorf("flows as a reader: %d %s", code, body)
	}
	for _, tc := range []struct {
		name, path, token string
		code              int
		msg               string
	}{
		{"graph, token without the read permission", ui.PathGraph, nobody, 403,
			`forbidden: User "system:serviceaccount:flowlens:nobody" cannot get flowcollectors/flows in API group flowlens.io (resourceName "cluster"); an administrator can bind the ClusterRole flowlens-flows-reader to it`},
		{"flows, token without the read permission", ui.PathFlows + "?source=a&target=b", nobody, 403,
			`forbidden: User "system:serviceaccount:flowlens:nobody" cannot get flowcollectors/flows`},
		{"page, token without the read permission", "/", nobody, 403, `forbidden: User "system:serviceaccount:flowlens:nobody"`},
		{"graph, no token", ui.PathGraph, "", 401, "collector: reading flows needs a bearer token whose user may get flowcollectors/flows"},
		{"page, no token", "/", "", 401, "reading flows needs a bearer token"},
		{"graph, agent token (audience flowlens-collector)", ui.PathGraph, agent, 401, "want a token of the Kubernetes API server"},
		{"graph, forged token", ui.PathGraph, reader[:len(reader)-4] + "AAAA", 401, "the token is not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.path, tc.token)
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(body), &e); code != tc.code || err != nil || !strings.Contains(e.Error, tc.msg) {
				t.Errorf("%d %s (%v); want %d with %q", code, body, err, tc.code, tc.msg)
			}
		})
	}
	// Plaintext to the TLS listener reads nothing.
	if resp, err := http.Get("http://" + a.UI.String() + ui.PathGraph); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), `"nodes"`) {
			t.Errorf("plaintext read the graph: %s", b)
		}
	}
}
