package config

import (
	"reflect"
	"testing"
)

// TestCaptureOptions: --capture and --capture-max-snaplen from flags, and
// from the environment the operator sets.
func TestCaptureOptions(t *testing.T) {
	got, err := Load([]string{"--capture=false", "--capture-max-snaplen=512"}, withEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := defaultConfig()
	want.Capture, want.CaptureMaxSnaplen = false, 512
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flags: got  %+v\nwant %+v", got, want)
	}
	got, err = Load(nil, withEnv(map[string]string{"FLOWLENS_AGENT_CAPTURE": "false", "FLOWLENS_AGENT_CAPTURE_MAX_SNAPLEN": "1500"}))
	if err != nil {
		t.Fatal(err)
	}
	want.CaptureMaxSnaplen = 1500
	if !reflect.DeepEqual(got, want) {
		t.Errorf("environment: got  %+v\nwant %+v", got, want)
	}
}
