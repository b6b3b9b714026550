package datapath

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/flowlens/flowlens/internal/testkit"
)

// ownSpec hands the kept spec's programs to the load without copying them
// (docs/benchmarks.md §41): that holds only while cilium/ebpf copies a
// program before it changes it (map references, CO-RE, subprograms). Load
// and LoadProgram load the Ethernet pair from the kept spec; its programs
// must come out byte for byte as they were parsed, and load again.
func TestOwnSpecSharesPrograms(t *testing.T) {
	testkit.NeedRoot(t, "loading BPF programs")
	d, err := Load(Config{MaxFlows: 64, Sampling: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	kept := d.spec.Load()
	if kept == nil {
		t.Fatal("no spec kept after Load")
	}
	fresh, _, err := newSpec(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ethPrograms {
		own, err := d.ownSpec([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if own.Programs[name] != kept.Programs[name] {
			t.Fatalf("ownSpec(%s) copied the program: want the kept one, shared", name)
		}
		p, err := d.LoadProgram(name) // loaded from the shared spec a second time
		if err != nil {
			t.Fatalf("load %s again from the kept spec: %v", name, err)
		}
		p.Close()
		if err := sameInstructions(kept.Programs[name].Instructions, fresh.Programs[name].Instructions); err != nil {
			t.Fatalf("%s: the kept spec changed by its loads: %v", name, err)
		}
	}
}

// sameInstructions compares two programs instruction by instruction:
// opcode, registers, offset, constant and the symbols referenced.
func sameInstructions(got, want asm.Instructions) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d instructions, parsed: %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.OpCode != w.OpCode || g.Dst != w.Dst || g.Src != w.Src || g.Offset != w.Offset || g.Constant != w.Constant ||
			g.Reference() != w.Reference() || g.Symbol() != w.Symbol() {
			return fmt.Errorf("instruction %d is %v, parsed: %v", i, g, w)
		}
	}
	return nil
}
