package netlab

import (
	"os"

	"golang.org/x/sys/unix"
)

// MountTracefs mounts tracefs where the classic tracepoint needs it (a fresh
// machine may not have it mounted; the agent's docs say so).
func MountTracefs(t T) {
	t.Helper()
	Require(t) // the gate (internal/testkit): mounting needs root
	if _, err := os.Stat("/sys/kernel/tracing/events"); err == nil {
		return
	}
	if err := unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, ""); err != nil {
		t.Fatalf("mount tracefs: %v", err)
	}
}
