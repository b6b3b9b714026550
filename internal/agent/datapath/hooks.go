package datapath

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// A Plan is how one optional feature (internal/agent/feature) runs in the
// kernel (its hook: what StartHooks loads and attaches; not to be confused with
// an interface's attach mode, Datapath.AttachMode):
// programs of bpf/datapath.c tried in order of preference, the first that
// loads and attaches being kept. So every feature has the same shape:
// preferred program, then fallbacks.
type Plan struct {
	Name       string      // the feature's name: the --features value and the metric label
	Candidates []Candidate // in order of preference
	// Constants are load-time constants (volatile const in the feature's
	// header) set before any candidate loads, by variable name.
	Constants map[string]any
	// TC are load-time constants of the TC programs (feature "flows") that
	// switch on a feature which runs inside them (e.g. xlat_on): the agent
	// hands them to Load (Config.TCConstants). A hook with TC and no
	// Candidates runs as part of the TC programs.
	TC map[string]any
	// MapSizes are the entries of maps of bpf/maps.h only this feature
	// uses, by map name (the agent hands them to Load, Config.MapSizes);
	// without the feature they keep one entry.
	MapSizes map[string]uint32
	// FlowSizedMaps are maps of bpf/maps.h only this feature uses whose
	// entries follow the flow maps': the agent sizes them to
	// --cache-max-flows (Config.MaxFlows), so the memory estimate
	// (internal/agent/memory.go, measured after loading) counts them.
	FlowSizedMaps []string
	// Err, when set, is why the feature cannot run on this kernel, found
	// before anything loads (e.g. a kfunc its BTF lacks); StartHooks
	// reports it and loads nothing.
	Err error
}

// A Candidate is one program of bpf/datapath.c and how to attach it.
type Candidate struct {
	Program string // its name in the object, e.g. "drop_kfree_skb"
	Attach  func(*ebpf.Program) (link.Link, error)
}

// Tracing attaches tp_btf, fentry and fexit programs (their target is in the
// section name).
func Tracing(p *ebpf.Program) (link.Link, error) {
	return link.AttachTracing(link.TracingOptions{Program: p})
}

// Tracepoint attaches a classic tracepoint program (needs tracefs).
func Tracepoint(group, name string) func(*ebpf.Program) (link.Link, error) {
	return func(p *ebpf.Program) (link.Link, error) { return link.Tracepoint(group, name, p, nil) }
}

// Why a hook does not run.
var (
	// ErrUnsupported: the kernel lacks what the hook needs (the attach
	// point, the program type, a helper, BTF).
	ErrUnsupported = errors.New("not supported by this kernel")
	// ErrRefused: the kernel has it but refused the program (EPERM,
	// EACCES, the verifier).
	ErrRefused = errors.New("refused by the kernel")
	// ErrSkipped: skipped by configuration (Config.SkipHookPrograms).
	ErrSkipped = errors.New("skipped by configuration")
)

// classify wraps a candidate's load or attach error in ErrUnsupported or
// ErrRefused (errors.Is tells them apart; the original stays wrapped).
func classify(err error) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, btf.ErrNotFound),
		errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	case errors.As(err, &ve), errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, unix.EINVAL):
		return fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return err
}

// HookStatus says how a hook runs, or why it does not.
type HookStatus struct {
	Name    string
	Running bool
	Program string // the candidate that runs, e.g. "rtt_tcp_probe"
	// Err is why the hook is not running: every candidate's failure, each
	// wrapping ErrUnsupported, ErrRefused or ErrSkipped when known.
	Err error
}

type hook struct {
	status HookStatus
	attach string // the program's section, e.g. "tp_btf/tcp_probe" ("tracing" if none)
	prog   *ebpf.Program
	link   link.Link
}

// StartHooks loads and attaches the given hooks. A hook the kernel refuses
// is reported in its status; the others run. It returns the status of each.
func (d *Datapath) StartHooks(hooks []Plan) []HookStatus {
	defer d.btf.Store(nil) // the start's loads are done (Config.BTF)
	out := make([]HookStatus, 0, len(hooks))
	for _, hk := range hooks {
		h := &hook{status: HookStatus{Name: hk.Name}}
		var errs []error
		switch {
		case hk.Err != nil:
			errs = append(errs, hk.Err)
		case len(hk.Candidates) == 0 && len(hk.TC) > 0:
			// It runs inside the TC programs if Load set its constants.
			if err := d.tcLoadedWith(hk.TC); err != nil {
				errs = append(errs, err)
			} else {
				h.status.Running, h.status.Program = true, "tc"
			}
		}
		for _, c := range hk.Candidates {
			if hk.Err != nil {
				break
			}
			if slices.Contains(d.cfg.SkipHookPrograms, c.Program) {
				errs = append(errs, fmt.Errorf("%s: %w", c.Program, ErrSkipped))
				continue
			}
			prog, l, err := d.loadHook(c, hk.Constants)
			if err == nil {
				h.prog, h.link, h.attach = prog, l, d.sectionName(c.Program)
				h.status.Running, h.status.Program = true, c.Program
				errs = nil
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", c.Program, classify(err)))
		}
		if !h.status.Running {
			if len(errs) == 0 {
				errs = append(errs, errors.New("no program"))
			}
			h.status.Err = errors.Join(errs...)
		}
		d.mu.Lock()
		d.hooks = append(d.hooks, h)
		d.mu.Unlock()
		out = append(out, h.status)
	}
	return out
}

// tcLoadedWith tells whether Load set these TC program constants.
func (d *Datapath) tcLoadedWith(tc map[string]any) error {
	for name := range tc {
		if _, ok := d.cfg.TCConstants[name]; !ok {
			return fmt.Errorf("tc: %w: the TC programs were loaded without %s (Config.TCConstants)", ErrSkipped, name)
		}
	}
	return nil
}

// loadHook loads one program alone (so one refused program does not take
// the others down) and attaches it.
func (d *Datapath) loadHook(c Candidate, constants map[string]any) (*ebpf.Program, link.Link, error) {
	progs, err := d.loadPrograms([]string{c.Program}, constants)
	if err != nil {
		return nil, nil, fmt.Errorf("load: %w", err)
	}
	prog := progs[c.Program]
	l, err := c.Attach(prog)
	if err != nil {
		prog.Close()
		return nil, nil, fmt.Errorf("attach: %w", err)
	}
	return prog, l, nil
}

// sectionName is the object's section of the named program ("tracing" if
// it has none): what Programs reports, kept with the hook so that the
// object's spec need not be.
func (d *Datapath) sectionName(program string) string {
	spec := d.spec.Load()
	if spec == nil || spec.Programs[program] == nil { // after ReleaseSpec
		spec = d.Spec()
	}
	if spec != nil {
		if ps, ok := spec.Programs[program]; ok && ps.SectionName != "" {
			return ps.SectionName
		}
	}
	return "tracing"
}

// Hooks returns the status of every hook StartHooks was asked for.
func (d *Datapath) Hooks() []HookStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]HookStatus, len(d.hooks))
	for i, h := range d.hooks {
		out[i] = h.status
	}
	return out
}

// StopHooks detaches the hooks (shutdown: before the final eviction).
func (d *Datapath) StopHooks() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		if h.link != nil {
			h.link.Close()
			h.link = nil
		}
	}
}

func (d *Datapath) closeHooks() {
	d.StopHooks()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.hooks {
		if h.prog != nil {
			h.prog.Close()
		}
	}
	d.hooks = nil
}
