package datapath_test

import (
	"testing"

	"github.com/flowlens/flowlens/internal/testkit"
)

// needBPF gates a test that loads the datapath's BPF programs, which needs
// root, through internal/testkit: skipped in short mode and, outside CI,
// when not root; failed in CI when not root.
func needBPF(t *testing.T) {
	t.Helper()
	testkit.NeedRoot(t, "BPF")
}
