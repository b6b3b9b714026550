// Package textfmt writes enriched flows for people: the table (one line
// per flow, columns that stay aligned whatever the values: a value wider
// than its column is cut with "…"), the compact one-line form, and the
// names they use (protocols, TCP flags, human-readable sizes). Every name
// they print has its control characters escaped (Safe): a flow's strings
// are untrusted. It is shared
// by flowlens-collector --output table and flowlens observe.
package textfmt

import (
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// column is one table column: its header and its (minimum) width; right
// aligns numbers.
type column struct {
	name  string
	width int
	right bool
}

// Table lays out flows in columns. Widths start at the defaults; Widen
// grows them to fit given flows (before the header is written: a table
// whose rows are known in advance is never cut). The last column is never
// padded or cut.
type Table struct {
	cols     []column
	time     bool
	enriched bool
	cells    []string
}

// NewTable returns a table with a TIME column (the flow's end time) when
// withTime, and SRC_K8S and DST_K8S columns when enriched.
func NewTable(withTime, enriched bool) *Table {
	t := &Table{time: withTime, enriched: enriched}
	if withTime {
		t.cols = append(t.cols, column{"TIME", 12, false})
	}
	t.cols = append(t.cols,
		column{"SRC", 21, false}, column{"", 1, false}, column{"DST", 21, false},
		column{"PROTO", 12, false}, column{"BYTES", 9, true}, column{"PKTS", 8, true},
		column{"IFACES", 28, false}, column{"DROPS", 22, false}, column{"RTT", 9, false}, column{"NODE", 16, false})
	if enriched {
		t.cols = append(t.cols, column{"SRC_K8S", 32, false}, column{"DST_K8S", 32, false})
	}
	return t
}

// Widen grows the columns so that f's values fit uncut.
func (t *Table) Widen(f *enriched.Flow) {
	t.cells = t.fill(t.cells[:0], f)
	for i, c := range t.cells {
		if n := utf8.RuneCountInString(c); n > t.cols[i].width {
			t.cols[i].width = n
		}
	}
}

// AppendHeader appends the header line (no newline).
func (t *Table) AppendHeader(b []byte) []byte {
	t.cells = t.cells[:0]
	for _, c := range t.cols {
		t.cells = append(t.cells, c.name)
	}
	return t.appendCells(b, t.cells)
}

// AppendRow appends f's line (no newline).
func (t *Table) AppendRow(b []byte, f *enriched.Flow) []byte {
	t.cells = t.fill(t.cells[:0], f)
	return t.appendCells(b, t.cells)
}

func (t *Table) appendCells(b []byte, cells []string) []byte {
	for i, c := range cells {
		col := t.cols[i]
		switch {
		case i == 0:
		case col.name == "" || t.cols[i-1].name == "": // around the arrow
			b = append(b, ' ')
		default:
			b = append(b, "  "...)
		}
		if i == len(cells)-1 {
			b = append(b, c...)
			break
		}
		n := utf8.RuneCountInString(c)
		if n > col.width {
			b = append(b, cut(c, col.width)...)
			continue
		}
		if col.right {
			b = append(b, strings.Repeat(" ", col.width-n)...)
			b = append(b, c...)
		} else {
			b = append(b, c...)
			b = append(b, strings.Repeat(" ", col.width-n)...)
		}
	}
	return b
}

// cut shortens s to width runes, the last one "…".
func cut(s string, width int) string {
	if width <= 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

func (t *Table) fill(cells []string, f *enriched.Flow) []string {
	if t.time {
		cells = append(cells, f.EndTime.Local().Format("15:04:05.000"))
	}
	icmp := f.Proto == 1 || f.Proto == 58
	proto := ProtoName(f.Proto)
	if icmp {
		proto += ":" + strconv.FormatUint(uint64(f.IcmpType), 10) + "/" + strconv.FormatUint(uint64(f.IcmpCode), 10)
	}
	cells = append(cells, Endpoint(f.SrcAddr, f.SrcPort, icmp), "→", Endpoint(f.DstAddr, f.DstPort, icmp), proto,
		HumanBytes(f.Bytes), strconv.FormatUint(f.Packets, 10), ifaces(f), drops(f), rtt(f), dash(Safe(f.NodeName)))
	if t.enriched {
		cells = append(cells, K8sName(&f.Src), K8sName(&f.Dst))
	}
	return cells
}

func ifaces(f *enriched.Flow) string {
	parts := make([]string, 0, len(f.Interfaces))
	for _, it := range f.Interfaces {
		s := Safe(it.Name)
		if it.Netns != "" && it.Netns != "host" {
			s = Safe(it.Netns) + "/" + s
		}
		parts = append(parts, s+"("+dirName(it.Direction)+")")
	}
	s := strings.Join(parts, ",")
	if f.IfacesOverflow {
		s += ",+"
	}
	return dash(s)
}

func drops(f *enriched.Flow) string {
	if f.DropPackets == 0 && f.DropBytes == 0 {
		return "-"
	}
	s := strconv.FormatUint(f.DropPackets, 10) + "p/" + HumanBytes(f.DropBytes)
	if f.DropCause != "" {
		s += " " + Safe(f.DropCause)
	}
	return s
}

func rtt(f *enriched.Flow) string {
	if f.RTT <= 0 {
		return "-"
	}
	return f.RTT.Round(time.Microsecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// HumanBytes is n bytes in IEC units with one decimal: 512B, 1.5KiB,
// 3.2MiB, 7.0GiB.
func HumanBytes(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + "B"
	}
	v := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= 1024
		if v < 1024 || u == "PiB" {
			return strconv.FormatFloat(v, 'f', 1, 64) + u
		}
	}
	return "" // not reached
}

// K8sName is an endpoint's context in one word: namespace/pod (workload
// Kind/name) for a pod, svc:namespace/name, node:name, ext[:subnet];
// control characters escaped (Safe).
func K8sName(m *enriched.K8sContext) string { return Safe(k8sName(m)) }

func k8sName(m *enriched.K8sContext) string {
	switch m.Kind {
	case enriched.KindPod:
		s := m.Namespace + "/" + m.Name
		if m.WorkloadKind != enriched.WorkloadPod {
			s += "(" + m.WorkloadKind + "/" + m.Workload + ")"
		}
		return s
	case enriched.KindService:
		return "svc:" + m.Namespace + "/" + m.Name
	case enriched.KindNode:
		return "node:" + m.Name
	}
	if m.Subnet != "" {
		return "ext:" + m.Subnet
	}
	return "ext"
}

// Endpoint is addr:port, or the address alone when noPort.
func Endpoint(a netip.Addr, port uint16, noPort bool) string {
	if noPort {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}

func dirName(d flow.Direction) string {
	switch d {
	case flow.DirIngress:
		return "in"
	case flow.DirEgress:
		return "out"
	case flow.DirBoth:
		return "both"
	}
	return "?"
}
