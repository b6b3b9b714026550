package enriched

import (
	"encoding/json"
	"testing"
)

// AppendJSON gives encoding/json's bytes, without allocating.
func TestK8sContextJSON(t *testing.T) {
	for _, m := range []K8sContext{
		{},
		{Kind: KindExternal},
		{Kind: KindExternal, Subnet: "corp"},
		{Kind: KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"},
		{Kind: KindService, Namespace: "a\"b", Name: "é\n"},
	} {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	m := K8sContext{Kind: KindPod, Namespace: "shop", Name: "web-1", Workload: "web", WorkloadKind: "Deployment", Node: "node-a"}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = m.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("AppendJSON allocates %v times", n)
	}
}
