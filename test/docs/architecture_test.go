// Package docs_test keeps docs/architecture.md true and a map: its package
// table must name exactly the module's packages (TestPackageTable), and it
// stays short, its design pages linked and present (TestArchitectureIsAMap).
package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/testkit"
)

const module = "github.com/flowlens/flowlens"

// TestPackageTable fails when `go list ./...` has a package the table in
// docs/architecture.md does not name, or the table names one that is gone.
func TestPackageTable(t *testing.T) {
	root, doc := readMap(t)
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, l := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(strings.TrimPrefix(l, module), "/"))
	}
	// Rows of the table: | `path` | ... (bpf/ is C, marked "(not Go)").
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9/._-]+)` \\|")
	var table []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		table = append(table, m[1])
	}
	if len(table) == 0 {
		t.Fatal("docs/architecture.md has no package table")
	}
	for _, p := range pkgs {
		if !slices.Contains(table, p) {
			t.Errorf("package %s is missing from the package table of docs/architecture.md", p)
		}
	}
	for _, p := range table {
		if !slices.Contains(pkgs, p) {
			t.Errorf("docs/architecture.md's package table names %s, which is not a package of the module", p)
		}
	}
}

// readMap returns the module's root and docs/architecture.md.
func readMap(t *testing.T) (root string, doc []byte) {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc, err = os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	return root, doc
}
