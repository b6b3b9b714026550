package ifaces

import "fmt"

// Host is the Interface.Netns value, and the Options.Netns entry, for the
// agent's own network namespace.
const Host = "host"

// All, as an Options.Netns entry, selects every named namespace in NetnsDir,
// including those created later. It does not include Host; list both to get
// everything.
const All = "all"

// DefaultNetnsDir is where `ip netns` keeps named namespaces.
const DefaultNetnsDir = "/var/run/netns"

// Interface is one network interface in one network namespace.
type Interface struct {
	Name        string
	Index       int    // ifindex; unique only within its namespace
	Netns       string // Host, or the namespace's name under NetnsDir
	NetnsPath   string // "" for Host
	NetnsCookie uint64 // SO_NETNS_COOKIE of the namespace; 0 if unsupported
}

func (i Interface) String() string {
	return fmt.Sprintf("%s/%s(%d)", i.Netns, i.Name, i.Index)
}

// EventType says whether an interface appeared or went away, or appeared
// and was refused by Options.Allowed.
type EventType int

const (
	Added EventType = iota + 1
	Removed
	// Excluded is an interface that appeared (or was renamed) with a name
	// Options.Allowed refuses; sent only with Options.ReportExcluded, so
	// that the agent can say what it does not watch. No Removed follows.
	Excluded
	// Synced marks the end of the initial listing: every interface present
	// when Run started (in the namespaces that existed then) was reported
	// before it. Sent once, only with Options.ReportSynced; Iface is zero.
	Synced
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Removed:
		return "Removed"
	case Excluded:
		return "Excluded"
	case Synced:
		return "Synced"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change seen by a Watcher. A rename is reported as Removed
// with the old name followed by Added with the new one.
type Event struct {
	Type  EventType
	Iface Interface
}

func (e Event) String() string { return e.Type.String() + " " + e.Iface.String() }
