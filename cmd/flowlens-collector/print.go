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
	"time"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/api/flow/v1/flowconv"
	"github.com/flowlens/flowlens/pkg/collector"
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

func newFilter(ips, ports, protos []string) (filter, error) {
	var f filter
	for _, s := range ips {
		if p, err := netip.ParsePrefix(s); err == nil {
			f.prefixes = append(f.prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return f, fmt.Errorf("--ip %q: not an address or CIDR", s)
		}
		f.prefixes = append(f.prefixes, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	for _, s := range ports {
		p, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return f, fmt.Errorf("--port %q: want 0 to 65535", s)
		}
		if f.ports == nil {
			f.ports = map[uint32]bool{}
		}
		f.ports[uint32(p)] = true
	}
	for _, s := range protos {
		n, ok := protoNames[strings.ToLower(s)]
		if !ok {
			v, err := strconv.ParseUint(s, 10, 8)
			if err != nil {
				return f, fmt.Errorf("--proto %q: want tcp, udp, icmp, icmpv6, sctp, gre, esp or 0 to 255", s)
			}
			n = uint32(v)
		}
		if f.protos == nil {
			f.protos = map[uint32]bool{}
		}
		f.protos[n] = true
	}
	return f, nil
}

func (f *filter) match(fl *flowv1.Flow) bool {
	if f.protos != nil && !f.protos[fl.Proto] {
		return false
	}
	if f.ports != nil && !f.ports[fl.SrcPort] && !f.ports[fl.DstPort] {
		return false
	}
	if f.prefixes != nil {
		src, dst := flowconv.Addr(fl.SrcAddr).Unmap(), flowconv.Addr(fl.DstAddr).Unmap()
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
	format  string
	filter  filter
	printed atomic.Uint64

	mu     sync.Mutex
	w      *bufio.Writer
	rec    flow.Record
	buf    []byte
	header bool
	err    error
}

func newPrinter(w io.Writer, format string, f filter) *printer {
	return &printer{format: format, filter: f, w: bufio.NewWriterSize(w, 64<<10), buf: make([]byte, 0, 2048)}
}

// handle is the collector.Handler: prints the batch's matching flows and
// flushes, so each batch shows at once.
func (p *printer) handle(_ context.Context, b *collector.Batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err // stdout is gone: refuse, the agents will retry later
	}
	n := 0
	for _, f := range b.Flows {
		if !p.filter.match(f) {
			continue
		}
		if p.format == "table" {
			if !p.header {
				p.header = true
				fmt.Fprintf(p.w, "%-21s   %-21s %-12s %12s %8s  %-28s %-16s %-10s %s\n",
					"SRC", "DST", "PROTO", "BYTES", "PKTS", "IFACES", "DROPS", "RTT", "NODE")
			}
			p.buf = appendTable(p.buf[:0], f)
		} else {
			// Flows from the collector were validated: conversion cannot fail.
			if err := flowconv.ToRecord(&p.rec, f); err != nil {
				continue
			}
			p.buf = appendJSON(p.buf[:0], &p.rec, f)
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

// appendJSON is the agent's JSON object for the flow (flow.Record.AppendJSON,
// same field names) with the agent identity added: node_name, agent_ip.
func appendJSON(b []byte, r *flow.Record, f *flowv1.Flow) []byte {
	b = r.AppendJSON(b)
	b = b[:len(b)-1] // reopen the object
	b = append(b, `,"node_name":`...)
	b = strconv.AppendQuote(b, f.NodeName)
	b = append(b, `,"agent_ip":"`...)
	if ip := flowconv.Addr(f.AgentIp); ip.IsValid() {
		b = ip.AppendTo(b)
	}
	return append(b, `"}`...)
}

// appendTable is one line: src:port → dst:port proto bytes pkts ifaces drops rtt node.
func appendTable(b []byte, f *flowv1.Flow) []byte {
	icmp := f.Proto == 1 || f.Proto == 58
	proto := protoName(f.Proto)
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
	if f.InterfacesOverflow {
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
	if f.RttNs > 0 {
		rtt = time.Duration(f.RttNs).String()
	}
	node := f.NodeName
	if node == "" {
		node = "-"
	}
	return fmt.Appendf(b, "%-21s → %-21s %-12s %12d %8d  %-28s %-16s %-10s %s",
		endpoint(f.SrcAddr, f.SrcPort, icmp), endpoint(f.DstAddr, f.DstPort, icmp), proto,
		f.Bytes, f.Packets, ifs, drops, rtt, node)
}

func endpoint(addr []byte, port uint32, noPort bool) string {
	a := flowconv.Addr(addr)
	if noPort {
		return a.String()
	}
	return netip.AddrPortFrom(a, uint16(port)).String()
}

func dirName(d flowv1.Direction) string {
	switch d {
	case flowv1.Direction_DIRECTION_INGRESS:
		return "in"
	case flowv1.Direction_DIRECTION_EGRESS:
		return "out"
	case flowv1.Direction_DIRECTION_BOTH:
		return "both"
	}
	return "?"
}
