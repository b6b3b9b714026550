//go:build soak

package soak

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

// columns of soak.csv. The flow counts are per interval; the others are the
// value at the sample. agent_bpf_alive: how many of the BPF objects the
// agent ever held (programs, maps, links: by kernel ID, from its fds) still
// exist in the kernel, so an object it let go of but left attached (a
// filter on an interface) counts; sys_bpf_*: every program and map on the
// host, other work's included (reported, not gated).
var columns = []string{"elapsed_s",
	"agent_rss_kib", "agent_goroutines", "agent_fds", "agent_bpf_progs", "agent_bpf_maps", "agent_bpf_links", "agent_bpf_alive",
	"collector_rss_kib", "collector_goroutines", "collector_fds",
	"sys_bpf_progs", "sys_bpf_maps",
	"agent_exported_flows", "collector_received_flows", "agent_partial_flows",
	"netns_alive", "netns_created", "tcp_conns"}

func sample(agent, coll *proc, bpf *bpfTracker, tr *traffic) (map[string]float64, error) {
	s := map[string]float64{}
	for _, p := range []struct {
		name string
		p    *proc
	}{{"agent", agent}, {"collector", coll}} {
		if p.p.exited() {
			return nil, fmt.Errorf("%s exited: %v", p.name, p.p.werr)
		}
		pid := p.p.cmd.Process.Pid
		rss, err := vmRSS(pid)
		if err != nil {
			return nil, err
		}
		fds, kinds, err := fdsOf(pid, bpf)
		if err != nil {
			return nil, err
		}
		m, err := scrape(p.p.metrics)
		if err != nil {
			return nil, fmt.Errorf("%s metrics: %w", p.name, err)
		}
		s[p.name+"_rss_kib"] = rss
		s[p.name+"_fds"] = float64(fds)
		s[p.name+"_goroutines"] = m["go_goroutines"]
		if p.name == "agent" {
			s["agent_bpf_progs"], s["agent_bpf_maps"], s["agent_bpf_links"] = float64(kinds["bpf-prog"]), float64(kinds["bpf-map"]), float64(kinds["bpf_link"])
			s["agent_exported_flows"] = m["flowlens_agent_export_flows_total"]
			s["agent_partial_flows"] = m["flowlens_agent_evicted_flows_total{source=\"partial\"}"]
		}
	}
	s["collector_received_flows"] = float64(coll.lines.Load())
	s["agent_bpf_alive"] = float64(bpf.alive())
	s["sys_bpf_progs"], s["sys_bpf_maps"] = float64(countIDs(progNext)), float64(countIDs(mapNext))
	s["netns_alive"], s["netns_created"], s["tcp_conns"] = float64(tr.nsAlive.Load()), float64(tr.nsCreated.Load()), float64(tr.conns.Load())
	return s, nil
}

func vmRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		}
	}
	return 0, errors.New("no VmRSS")
}

// fdsOf counts pid's open files and, among them, its BPF objects by kind
// (the anon inode's name: bpf-prog, bpf-map, bpf_link), recording their
// kernel IDs (from fdinfo) in the tracker.
func fdsOf(pid int, bpf *bpfTracker) (int, map[string]int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, nil, err
	}
	kinds := map[string]int{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		kind, ok := strings.CutPrefix(target, "anon_inode:")
		if !ok || !strings.HasPrefix(kind, "bpf") {
			continue
		}
		kinds[kind]++
		if bpf != nil {
			bpf.record(kind, fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		}
	}
	return len(ents), kinds, nil
}

type objKey struct {
	kind string
	id   uint32
}

// bpfTracker remembers every BPF object the agent was seen holding.
type bpfTracker struct{ ids map[objKey]bool }

func newBPFTracker() *bpfTracker { return &bpfTracker{ids: map[objKey]bool{}} }

func (b *bpfTracker) record(kind, fdinfo string) {
	field := map[string]string{"bpf-prog": "prog_id:", "bpf-map": "map_id:", "bpf_link": "link_id:"}[kind]
	f, err := os.Open(fdinfo)
	if err != nil || field == "" {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
				b.ids[objKey{kind, uint32(id)}] = true
			}
			return
		}
	}
}

func (b *bpfTracker) seen() int { return len(b.ids) }

// alive counts the recorded objects the kernel still has: an object opened
// by ID (root) exists; ENOENT means it was freed.
func (b *bpfTracker) alive() int {
	n := 0
	for k := range b.ids {
		var err error
		switch k.kind {
		case "bpf-prog":
			var p *ebpf.Program
			if p, err = ebpf.NewProgramFromID(ebpf.ProgramID(k.id)); err == nil {
				p.Close()
			}
		case "bpf-map":
			var m *ebpf.Map
			if m, err = ebpf.NewMapFromID(ebpf.MapID(k.id)); err == nil {
				m.Close()
			}
		case "bpf_link":
			var l link.Link
			if l, err = link.NewFromID(link.ID(k.id)); err == nil {
				l.Close()
			} else if !errors.Is(err, os.ErrNotExist) {
				err = nil // a link type the library cannot wrap still exists
			}
		}
		if err == nil {
			n++
		}
	}
	return n
}

func progNext(id uint32) (uint32, error) {
	n, err := ebpf.ProgramGetNextID(ebpf.ProgramID(id))
	return uint32(n), err
}

func mapNext(id uint32) (uint32, error) {
	n, err := ebpf.MapGetNextID(ebpf.MapID(id))
	return uint32(n), err
}

func countIDs(next func(uint32) (uint32, error)) int {
	n := 0
	for id, err := next(0); err == nil; id, err = next(id) {
		n++
	}
	return n
}
