//go:build chaos

package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bin holds the binaries TestMain builds once for every case:
// bin["flowlens-agent"], bin["flowlens-collector"], bin["flowlens"].
var bin = map[string]string{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "flowlens-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := 2
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: building the binaries:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles each command of cmd/ into dir.
func build(dir string) error {
	for _, name := range []string{"flowlens-agent", "flowlens-collector", "flowlens"} {
		out := filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out, "github.com/flowlens/flowlens/cmd/"+name)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		bin[name] = out
	}
	return nil
}
