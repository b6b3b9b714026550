package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/agent"
	"github.com/flowlens/flowlens/internal/testkit/agenttest"
	"github.com/flowlens/flowlens/internal/testkit/netlab"
)

// logRecords is a slog.Handler keeping every record as one line, "msg
// k=v k=v" with the attributes in order.
type logRecords struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return r } // the agent's own lines use none
func (r *logRecords) WithGroup(string) slog.Handler            { return r }

func (r *logRecords) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, b.String())
	return nil
}

// has reports whether line was logged.
func (r *logRecords) has(line string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if l == line {
			return true
		}
	}
	return false
}

func (r *logRecords) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// waitLogged waits for each line to be logged (a guard against a hang).
func waitLogged(t *testing.T, r *logRecords, lines ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, l := range lines {
		for !r.has(l) {
			if time.Now().After(deadline) {
				t.Fatalf("not logged: %s\nlog:\n%s", l, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// The agent says which interfaces it attached to (name, namespace, ifindex,
// tcx or clsact) and which it skipped and why, at start in one summary line
// and as they come and go, one info line each.
func TestInterfaceLog(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		hook := map[bool]string{false: "tcx", true: "clsact"}[legacy]
		t.Run(hook, func(t *testing.T) {
			dir := t.TempDir()
			a, b := netlab.NewNetnsIn(t, dir, "la"), netlab.NewNetnsIn(t, dir, "lb")
			la, lb := netlab.Veth(t, a, "fl-a0", b, "fl-b0")
			sa, sb := netlab.Veth(t, a, "sk-a1", b, "sk-b1")
			rec := &logRecords{}
			agenttest.Start(t, 2, agent.Options{Logger: slog.New(rec), ForceLegacyTC: legacy},
				"--netns="+a.Name+","+b.Name, "--netns-dir="+dir, "--exclude-interfaces=lo,/^sk-/")
			attached := func(ns *netlab.Netns, name string, index int) string {
				return fmt.Sprintf("INFO attached interface=%s netns=%s ifindex=%d hook=%s", name, ns.Name, index, hook)
			}
			skipped := func(ns *netlab.Netns, name string, index int) string {
				return fmt.Sprintf("INFO interface skipped interface=%s netns=%s ifindex=%d reason=excluded by --interfaces/--exclude-interfaces", name, ns.Name, index)
			}
			first, second := a, b
			if b.Name < a.Name {
				first, second = b, a
			}
			firstIf, secondIf := map[*netlab.Netns]string{a: "fl-a0", b: "fl-b0"}[first], map[*netlab.Netns]string{a: "fl-a0", b: "fl-b0"}[second]
			waitLogged(t, rec,
				attached(a, "fl-a0", la.Attrs().Index), attached(b, "fl-b0", lb.Attrs().Index),
				skipped(a, "sk-a1", sa.Attrs().Index), skipped(b, "sk-b1", sb.Attrs().Index),
				skipped(a, "lo", 1), skipped(b, "lo", 1),
				fmt.Sprintf("INFO watching 2 interfaces in 2 namespaces (%s): %s: %s; %s: %s skipped=4", hook, first.Name, firstIf, second.Name, secondIf))

			// As interfaces come and go.
			na, nb := netlab.Veth(t, a, "fl-a2", b, "fl-b2")
			waitLogged(t, rec, attached(a, "fl-a2", na.Attrs().Index), attached(b, "fl-b2", nb.Attrs().Index))
			h2, err := netlab.Handle(a)
			if err != nil {
				t.Fatal(err)
			}
			defer h2.Close()
			if err := h2.LinkDel(na); err != nil { // both ends go
				t.Fatal(err)
			}
			detached := func(ns *netlab.Netns, name string, index int) string {
				return fmt.Sprintf("INFO detached interface=%s netns=%s ifindex=%d reason=interface removed or renamed", name, ns.Name, index)
			}
			waitLogged(t, rec, detached(a, "fl-a2", na.Attrs().Index), detached(b, "fl-b2", nb.Attrs().Index))
		})
	}
}
