package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flowlens/flowlens/internal/k8smeta"
	"github.com/flowlens/flowlens/internal/pipeline"
	"github.com/flowlens/flowlens/pkg/flow"
)

// filter keeps flows matching every given criterion (any of its values):
// address (source or destination in a prefix), port (source or
// destination), protocol.
type filter struct {
	prefixes []netip.Prefix
	ports    map[uint32]bool
	protos   map[uint32]bool
}

func (f *filter) match(r *flow.Record) bool {
	if f.protos != nil && !f.protos[uint32(r.Proto)] {
		return false
	}
	if f.ports != nil && !f.ports[uint32(r.SrcPort)] && !f.ports[uint32(r.DstPort)] {
		return false
	}
	if f.prefixes != nil {
		src, dst := r.SrcAddr.Unmap(), r.DstAddr.Unmap()
		for _, p := range f.prefixes {
			if p.Contains(src) || p.Contains(dst) {
				return true
			}
		}
		return false
	}
	return true
}

// printer writes the flows of every agent stream to one output.
type printer struct {
	format   string
	filter   filter
	enriched bool // table: add the SRC_K8S and DST_K8S columns
	printed  atomic.Uint64

	mu     sync.Mutex
	w      *bufio.Writer
	buf    []byte
	header bool
	err    error
}

func newPrinter(w io.Writer, format string, f filter, enriched bool) *printer {
	return &printer{format: format, filter: f, enriched: enriched, w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 2048)}
}

// write is the pipeline's Sink: prints the batch's matching flows and
// flushes, so each batch shows at once.
func (p *printer) write(_ context.Context, flows []pipeline.Flow) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err // stdout is gone: refuse, the agents will retry later
	}
	n := 0
	for i := range flows {
		f := &flows[i]
		if !p.filter.match(&f.Record) {
			continue
		}
		if p.format == "table" {
			if !p.header {
				p.header = true
				fmt.Fprintf(p.w, "%-21s   %-21s %-12s %12s %8s  %-28s %-16s %-10s %s",
					"SRC", "DST", "PROTO", "BYTES", "PKTS", "IFACES", "DROPS", "RTT", "NODE")
				if p.enriched {
					fmt.Fprintf(p.w, "  %-32s %s", "SRC_K8S", "DST_K8S")
				}
				p.w.WriteByte('\n')
			}
			p.buf = appendTable(p.buf[:0], f, p.enriched)
		} else {
			p.buf = f.AppendJSON(p.buf[:0])
		}
		p.buf = append(p.buf, '\n')
		if _, err := p.w.Write(p.buf); err != nil {
			p.err = err
			return err
		}
		n++
	}
	p.printed.Add(uint64(n))
	if err := p.w.Flush(); err != nil {
		p.err = err
		return err
	}
	return nil
}

func (p *printer) flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}

// appendTable is one line: src:port → dst:port proto bytes pkts ifaces drops
// rtt node, then, when enriched, the context of each end (k8sName).
func appendTable(b []byte, f *pipeline.Flow, enriched bool) []byte {
	icmp := f.Proto == 1 || f.Proto == 58
	proto := protoName(uint32(f.Proto))
	if icmp {
		proto += ":" + strconv.FormatUint(uint64(f.IcmpType), 10) + "/" + strconv.FormatUint(uint64(f.IcmpCode), 10)
	}
	ifaces := make([]string, 0, len(f.Interfaces))
	for _, it := range f.Interfaces {
		s := it.Name
		if it.Netns != "" && it.Netns != "host" {
			s = it.Netns + "/" + s
		}
		ifaces = append(ifaces, s+"("+dirName(it.Direction)+")")
	}
	ifs := strings.Join(ifaces, ",")
	if f.IfacesOverflow {
		ifs += ",+"
	}
	if ifs == "" {
		ifs = "-"
	}
	drops := "-"
	if f.DropPackets > 0 || f.DropBytes > 0 {
		drops = strconv.FormatUint(f.DropPackets, 10) + "p/" + strconv.FormatUint(f.DropBytes, 10) + "B"
		if f.DropCause != "" {
			drops += " " + f.DropCause
		}
	}
	rtt := "-"
	if f.RTT > 0 {
		rtt = f.RTT.String()
	}
	node := f.NodeName
	if node == "" {
		node = "-"
	}
	b = fmt.Appendf(b, "%-21s → %-21s %-12s %12d %8d  %-28s %-16s %-10s %s",
		endpoint(f.SrcAddr, f.SrcPort, icmp), endpoint(f.DstAddr, f.DstPort, icmp), proto,
		f.Bytes, f.Packets, ifs, drops, rtt, node)
	if enriched {
		b = fmt.Appendf(b, "  %-32s %s", k8sName(&f.Src), k8sName(&f.Dst))
	}
	return b
}

// k8sName is an endpoint's context in one word: namespace/pod (workload
// Kind/name) for a pod, svc:namespace/name, node:name, ext[:subnet].
func k8sName(m *k8smeta.Meta) string {
	switch m.Kind {
	case k8smeta.KindPod:
		s := m.Namespace + "/" + m.Name
		if m.WorkloadKind != k8smeta.WorkloadPod {
			s += "(" + m.WorkloadKind + "/" + m.Workload + ")"
		}
		return s
	case k8smeta.KindService:
		return "svc:" + m.Namespace + "/" + m.Name
	case k8smeta.KindNode:
		return "node:" + m.Name
	}
	if m.Subnet != "" {
		return "ext:" + m.Subnet
	}
	return "ext"
}

func endpoint(a netip.Addr, port uint16, noPort bool) string {
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
