package textfmt

import (
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flowlens/flowlens/internal/shared/enriched"
	"github.com/flowlens/flowlens/pkg/flow"
)

// starts is the rune offset of each header column name in the header.
func starts(t *testing.T, header string, names []string) []int {
	var out []int
	for _, n := range names {
		i := strings.Index(header, " "+n+" ")
		if i < 0 {
			i = strings.Index(header, " "+n) // the last column
		}
		if i < 0 {
			t.Fatalf("no %s in %q", n, header)
		}
		out = append(out, utf8.RuneCountInString(header[:i+1]))
	}
	return out
}

// Whatever the values (long drop causes, IPv6 addresses, huge counters,
// many interfaces), every column of every row starts where its header
// does; a value wider than its column is cut with "…".
func TestTableStaysAligned(t *testing.T) {
	short := enriched.Flow{NodeName: "n", Enriched: true, Src: enriched.K8sContext{Kind: enriched.KindExternal}, Dst: enriched.K8sContext{Kind: enriched.KindExternal}}
	short.SrcAddr, short.DstAddr, short.Proto = netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("2.2.2.2"), 17
	long := short
	long.SrcAddr, long.DstAddr = netip.MustParseAddr("2001:db8:1234:5678:9abc:def0:1234:5678"), netip.MustParseAddr("fd00::2")
	long.SrcPort, long.DstPort, long.Proto = 65535, 443, 6
	long.Bytes, long.Packets = 1<<50, 1<<40
	long.DropPackets, long.DropBytes, long.DropCause = 123456, 1<<33, "SKB_DROP_REASON_NETFILTER_DROP_SOMETHING_LONG"
	long.RTT = 1234567 * time.Microsecond
	long.NodeName = "a-very-long-node-name-in-a-cloud.example.internal"
	long.Interfaces = []flow.Interface{{Name: "veth0123456789ab", Netns: "cni-1234-5678", Direction: flow.DirIngress}, {Name: "eth0", Direction: flow.DirBoth}}
	long.Src = enriched.K8sContext{Kind: enriched.KindPod, Namespace: "a-long-namespace", Name: "a-long-pod-name-7d9f8c6b5-abcde", Workload: "a-long-pod-name", WorkloadKind: "Deployment"}
	for _, withTime := range []bool{false, true} {
		tb := NewTable(withTime, true)
		header := string(tb.AppendHeader(nil))
		names := []string{"DST", "PROTO", "IFACES", "DROPS", "RTT", "NODE", "SRC_K8S", "DST_K8S"}
		want := starts(t, header, names)
		for _, f := range []*enriched.Flow{&short, &long} {
			row := []rune(string(tb.AppendRow(nil, f)))
			for i, at := range want {
				if at > len(row) || row[at-1] != ' ' || row[at] == ' ' {
					t.Errorf("column %s does not start at %d:\n%s\n%s", names[i], at, header, string(row))
				}
			}
		}
		// BYTES and PKTS are right-aligned: values end where the header does.
		for _, f := range []*enriched.Flow{&short, &long} {
			for _, col := range []string{"BYTES", "PKTS"} {
				end := strings.Index(header, col) + len(col)
				row := string(tb.AppendRow(nil, f))
				r := []rune(row)
				hr := []rune(header[:end])
				if r[len(hr)] != ' ' || r[len(hr)-1] == ' ' {
					t.Errorf("%s not right-aligned:\n%s\n%s", col, header, row)
				}
			}
		}
	}
	// Cut values end with "…"; a widened table cuts nothing.
	tb := NewTable(false, true)
	if row := string(tb.AppendRow(nil, &long)); !strings.Contains(row, "…") {
		t.Errorf("nothing cut: %s", row)
	}
	tb.Widen(&long)
	if row := string(tb.AppendRow(nil, &long)); strings.Contains(row, "…") || !strings.Contains(row, "SKB_DROP_REASON_NETFILTER_DROP_SOMETHING_LONG") {
		t.Errorf("widened table cut a value: %s", row)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 9000: "8.8KiB", 5 << 20: "5.0MiB", 3 << 30: "3.0GiB", 1 << 62: "4096.0PiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %s, want %s", n, got, want)
		}
	}
}
