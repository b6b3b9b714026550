package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The committed files are what groupgen writes (make check-generated says
// the same after regenerating; this says it in go test).
func TestGeneratedFilesCurrent(t *testing.T) {
	root := "../../../../.."
	files, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 10 {
		t.Errorf("%d files, want 10", len(files))
	}
	for path, src := range files {
		disk, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(disk, src) {
			t.Errorf("%s is stale (%v): run make generate", path, err)
		}
	}
}

// A region's lines are replaced whatever they held, indented as its first
// line; a feature without a Flow field, and a missing region, are refused.
func TestRegions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.go")
	src := "package p\n\nfunc f(b []byte) []byte {\n\t// groupgen json: generated to its end line by make generate. DO NOT EDIT.\n\tb = stale(b)\n\t// groupgen json: end.\n\treturn b\n}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := rewrite(path, map[string][]string{"json": each([]string{"rtt", "icmperr"}, "b = r.%[1]sFields.appendJSON(b)")})
	want := "package p\n\nfunc f(b []byte) []byte {\n\t// groupgen json: generated to its end line by make generate. DO NOT EDIT.\n" +
		"\tb = r.RTTFields.appendJSON(b)\n\tb = r.IcmperrFields.appendJSON(b)\n\t// groupgen json: end.\n\treturn b\n}\n"
	if err != nil || string(got) != want {
		t.Errorf("rewrite: %v\n%s", err, got)
	}
	if _, err := rewrite(path, map[string][]string{"wire": nil}); err == nil {
		t.Error("a missing region is accepted")
	}
	if _, err := byFieldNumber([]string{"dns", "icmperr"}); err == nil {
		t.Error("a feature without a field of Flow is accepted")
	}
	if got, err := byFieldNumber([]string{"dns", "drops"}); err != nil || !slices.Equal(got, []string{"drops", "dns"}) {
		t.Errorf("byFieldNumber: %v %v", got, err)
	}
}

// The IPFIX blocks come from the package's block values, in the order of
// their bits, with the functions their names give them; a has that is a
// function literal (an indirect call per flow) or a gap in the bits is
// refused.
func TestIPFIXBlocks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("package ipfix\n\n"+src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", "const variantA = 2\n\nvar aBlock = block{bit: variantA, has: hasA}\n\nfunc appendA(b []byte, r *flow.Record, v6 bool) []byte { return b }\n\nfunc aVarLen(r *flow.Record) int { return 0 }\n")
	write("b.go", "const variantB = 4\n\nvar bBlock = block{bit: variantB, has: (*flow.Record).HasB}\n\nfunc appendB(b []byte, r *flow.Record) []byte { return b }\n")
	blocks, err := ipfixBlocks(dir)
	if err != nil || len(blocks) != 2 || blocks[0].name != "aBlock" || !blocks[0].appendV6 || blocks[0].varLenFn != "aVarLen" ||
		blocks[1].has != "(*flow.Record).HasB" || blocks[1].appendV6 || blocks[1].varLenFn != "" {
		t.Errorf("blocks %+v, %v", blocks, err)
	}
	write("b.go", "const variantB = 4\n\nvar bBlock = block{bit: variantB, has: func(r *flow.Record) bool { return true }}\n\nfunc appendB(b []byte, r *flow.Record) []byte { return b }\n")
	if _, err := ipfixBlocks(dir); err == nil {
		t.Error("a function literal's has is accepted")
	}
	write("b.go", "const variantB = 8\n\nvar bBlock = block{bit: variantB, has: hasB}\n\nfunc appendB(b []byte, r *flow.Record) []byte { return b }\n")
	if _, err := ipfixBlocks(dir); err == nil {
		t.Error("a gap in the blocks' bits is accepted")
	}
}
