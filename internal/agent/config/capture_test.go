package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCaptureOptions: --capture and --capture-max-snaplen from each source
// (flag, environment, file, as the operator writes them), and the bounds
// of the snaplen (1 to 65535), refused with the flag named.
func TestCaptureOptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte("capture: false\ncapture_max_snaplen: 65535\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		on      bool
		snaplen uint32
	}{
		{"defaults", nil, nil, true, 128},
		{"flags", []string{"--capture=false", "--capture-max-snaplen=1"}, nil, false, 1},
		{"bare flag", []string{"--capture", "--capture-max-snaplen", "1500"}, nil, true, 1500},
		{"env", nil, map[string]string{"FLOWLENS_AGENT_CAPTURE": "false", "FLOWLENS_AGENT_CAPTURE_MAX_SNAPLEN": "9000"}, false, 9000},
		{"file", []string{"--config", file}, nil, false, 65535},
		{"flag over file", []string{"--config", file, "--capture=true"}, nil, true, 65535},
	} {
		c, err := Load(tc.args, withEnv(tc.env))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if c.Capture != tc.on || c.CaptureMaxSnaplen != tc.snaplen {
			t.Errorf("%s: capture %v, max snaplen %d; want %v, %d", tc.name, c.Capture, c.CaptureMaxSnaplen, tc.on, tc.snaplen)
		}
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--capture-max-snaplen=0"}, nil, `invalid --capture-max-snaplen "0": must be an integer from 1 to 65535`},
		{[]string{"--capture-max-snaplen=65536"}, nil, `invalid --capture-max-snaplen "65536": must be an integer from 1 to 65535`},
		{[]string{"--capture-max-snaplen=-1"}, nil, `invalid --capture-max-snaplen "-1": must be an integer from 1 to 65535`},
		{[]string{"--capture=sometimes"}, nil, `invalid --capture "sometimes": must be true or false`},
		{nil, map[string]string{"FLOWLENS_AGENT_CAPTURE_MAX_SNAPLEN": "big"}, `invalid FLOWLENS_AGENT_CAPTURE_MAX_SNAPLEN "big": must be an integer from 1 to 65535`},
	} {
		_, err := Load(tc.args, withEnv(tc.env))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v %v: error\n got  %v\n want %s", tc.args, tc.env, err, tc.want)
		}
	}
}
