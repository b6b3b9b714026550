package enriched

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// The collector's JSON lines carry node names and Kubernetes names as
// valid JSON (strconv's quoting wrote \x1b, which no JSON decoder reads)
// with no raw control character, and a real decoder reads them back.
func TestAppendJSONHostileNames(t *testing.T) {
	for _, s := range []string{"\x1b[31mnode\x1b[0m", "nul\x00del\x7f", "csi\u009b", `q"b\`, "ls\u2028\u202e", "é"} {
		k := K8sContext{Kind: KindPod, Namespace: s, Name: s, Workload: s, WorkloadKind: s, Node: s}
		f := Flow{NodeName: s, Enriched: true, Src: k, Dst: k}
		js := f.AppendJSON(nil)
		var got struct {
			NodeName string `json:"node_name"`
			Src      struct {
				Namespace, Name, Workload, Node string
				WorkloadKind                    string `json:"workload_kind"`
			} `json:"src_k8s"`
		}
		if err := json.Unmarshal(js, &got); err != nil {
			t.Errorf("%q: invalid JSON: %v\n%s", s, err, js)
			continue
		}
		if got.NodeName != s || got.Src.Namespace != s || got.Src.Name != s || got.Src.Workload != s || got.Src.WorkloadKind != s || got.Src.Node != s {
			t.Errorf("%q: read back %+v", s, got)
		}
		for i := 0; i < len(js); {
			r, n := utf8.DecodeRune(js[i:])
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x202e {
				t.Errorf("%q: raw %U at %d of %s", s, r, i, js)
				break
			}
			i += n
		}
	}
}
