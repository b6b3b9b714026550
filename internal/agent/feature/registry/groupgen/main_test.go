package main

import (
	"bytes"
	"os"
	"path/filepath"
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
	if len(files) != 5 {
		t.Errorf("%d files, want 5", len(files))
	}
	for path, src := range files {
		disk, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(disk, src) {
			t.Errorf("%s is stale (%v): run make generate", path, err)
		}
	}
}

// Adding a feature to the registry's source adds it to every list, and an
// IPFIX block whose has is a function literal (an indirect call per flow)
// is refused.
func TestGenerateFromSource(t *testing.T) {
	names := []string{"drops", "rtt", "icmperr"}
	src, err := flowFile(names)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"icmperrGroup}", "b = r.RTTFields.appendJSON(b)", "b = r.IcmperrFields.appendJSON(b)"} {
		if !bytes.Contains(src, []byte(want)) {
			t.Errorf("pkg/flow lists lack %q:\n%s", want, src)
		}
	}
	src, err = otlpFile(names)
	if err != nil || !bytes.Contains(src, []byte("b = icmperrAttributes(e, b, r)")) {
		t.Errorf("otlp: %v\n%s", err, src)
	}
	if _, err := flowpbFile(names); err == nil {
		t.Error("flowpb: a feature without a Flow field is accepted")
	}

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
