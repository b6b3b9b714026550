package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// maxMapLines bounds docs/architecture.md: it is the map (layers, the
// packet's route, the shapes, the package table); proofs and invariants go
// to docs/design/.
const maxMapLines = 220

// mdLink is a relative Markdown link: its file and its #anchor.
var mdLink = regexp.MustCompile(`\]\(([^)#:\s]*)(#[^)\s]*)?\)`)

// TestArchitectureIsAMap fails when docs/architecture.md grows past
// maxMapLines, when a page of docs/design/ it links is missing or one is
// not linked from it, or when a relative link of the map or of a design
// page points to a missing file or to a heading its page lacks.
func TestArchitectureIsAMap(t *testing.T) {
	root, b := readMap(t)
	docs := filepath.Join(root, "docs")
	mapDoc := filepath.Join(docs, "architecture.md")
	if n := strings.Count(string(b), "\n"); n > maxMapLines {
		t.Errorf("docs/architecture.md has %d lines, more than %d: move what is not the map to docs/design/", n, maxMapLines)
	}

	design, err := filepath.Glob(filepath.Join(docs, "design", "*.md"))
	if err != nil || len(design) == 0 {
		t.Fatalf("no docs/design/*.md (%v)", err)
	}
	var linked []string
	for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[1], "design/") && strings.HasSuffix(m[1], ".md") {
			linked = append(linked, filepath.Join(docs, m[1]))
		}
	}
	for _, p := range design {
		if !slices.Contains(linked, p) {
			t.Errorf("docs/design/%s is not linked from docs/architecture.md", filepath.Base(p))
		}
	}

	for _, page := range append([]string{mapDoc}, design...) {
		checkLinks(t, root, page)
	}
}

// checkLinks checks page's relative links: the file exists, and a #anchor
// into a Markdown page names one of its headings.
func checkLinks(t *testing.T, root, page string) {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, page)
	for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
		target := page
		if m[1] != "" {
			target = filepath.Join(filepath.Dir(page), m[1])
		}
		if _, err := os.Stat(target); err != nil {
			t.Errorf("%s links %s, which does not exist", rel, m[1])
			continue
		}
		if m[2] != "" && strings.HasSuffix(target, ".md") {
			tb, _ := os.ReadFile(target)
			if !slices.Contains(anchors(string(tb)), m[2][1:]) {
				t.Errorf("%s links %s%s: no such heading", rel, m[1], m[2])
			}
		}
	}
}

// anchors are the GitHub anchors of a page's headings: lower case, spaces
// to hyphens, punctuation dropped.
func anchors(md string) []string {
	var out []string
	for _, l := range strings.Split(md, "\n") {
		h, ok := strings.CutPrefix(l, "#")
		if !ok {
			continue
		}
		h = strings.TrimLeft(h, "#")
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				a.WriteRune(r)
			}
		}
		out = append(out, a.String())
	}
	return out
}
