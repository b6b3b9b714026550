package render

import (
	"strings"
	"testing"

	"github.com/flowlens/flowlens/api/v1alpha1"
	"github.com/flowlens/flowlens/internal/agent/config"
)

// TestAgentConfigCapture: spec.agent.capture reaches the agent's --capture
// and --capture-max-snaplen, read back by the agent's own loader; left out,
// or set to the defaults, the configuration has no capture key and is the
// one rendered before the keys existed (same hash: no roll of the agents
// on an operator upgrade), and the agent runs with its defaults (capture
// on, 128 bytes).
func TestAgentConfigCapture(t *testing.T) {
	capture := func(enable *bool, snaplen int32) v1alpha1.FlowCollectorSpec {
		return v1alpha1.FlowCollectorSpec{Agent: v1alpha1.AgentSpec{Capture: v1alpha1.AgentCapture{Enable: enable, MaxSnaplen: snaplen}}}
	}
	rendered := func(spec v1alpha1.FlowCollectorSpec) (string, string) {
		t.Helper()
		s := WithDefaults(spec)
		data, err := AgentConfig(&s)
		if err != nil {
			t.Fatal(err)
		}
		return string(data), build(t, spec).ConfigHash
	}
	base, baseHash := rendered(v1alpha1.FlowCollectorSpec{})
	for _, tc := range []struct {
		name    string
		spec    v1alpha1.FlowCollectorSpec
		keys    []string // the capture lines of the configuration, in order
		on      bool
		snaplen int
	}{
		{"unset", v1alpha1.FlowCollectorSpec{}, nil, true, 128},
		{"the defaults, explicit", capture(ptr(true), 128), nil, true, 128},
		{"disabled", capture(ptr(false), 0), []string{"capture: false"}, false, 128},
		{"payload", capture(nil, 1500), []string{"capture_max_snaplen: 1500"}, true, 1500},
		{"both, largest", capture(ptr(false), config.MaxCaptureSnaplen), []string{"capture: false", "capture_max_snaplen: 65000"}, false, 65000},
		{"smallest", capture(ptr(true), 1), []string{"capture_max_snaplen: 1"}, true, 1},
	} {
		data, hash := rendered(tc.spec)
		var keys []string
		for _, l := range strings.Split(data, "\n") {
			if strings.HasPrefix(l, "capture") {
				keys = append(keys, l)
			}
		}
		if strings.Join(keys, "\n") != strings.Join(tc.keys, "\n") {
			t.Errorf("%s: capture keys %q, want %q", tc.name, keys, tc.keys)
		}
		if (tc.keys == nil) != (data == base && hash == baseHash) {
			t.Errorf("%s: configuration equal to the default one (and its hash %s, default %s): %v; want %v",
				tc.name, hash, baseHash, data == base, tc.keys == nil)
		}
		c := loadAgentConfig(t, tc.spec)
		if c.Capture != tc.on || c.CaptureMaxSnaplen != tc.snaplen {
			t.Errorf("%s: the agent reads capture %v, max snaplen %d; want %v, %d", tc.name, c.Capture, c.CaptureMaxSnaplen, tc.on, tc.snaplen)
		}
	}
}
