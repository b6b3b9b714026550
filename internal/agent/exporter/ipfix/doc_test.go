package ipfix

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The templates docs/export.md documents are the templates sent: for
// every variant, each field's element id, enterprise bit and length, in
// order, and the interfaces list's sub-template.
func TestDocumentedTemplates(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/export.md")
	if err != nil {
		t.Fatal(err)
	}
	// | 1 | `sourceIPv4Address` (8) / `sourceIPv6Address` (27) | 4 / 16 | ...
	// | E1 | `flowlensDropPackets` (1001) | unsigned64, 8 | ...
	// | `interfaceName` (82) | variable (...) | ...
	row := regexp.MustCompile("(?m)^\\| (?:([0-9]+|[NEDTCO][0-9]+) \\| )?`\\w+` \\(([0-9]+)(?:, under the PEN)?\\)(?: / `\\w+` \\(([0-9]+)\\))? \\| ([^|]+) \\|")
	length := func(col string, v6 bool) uint16 {
		if strings.HasPrefix(col, "variable") || strings.Contains(col, "variable") {
			return variableLength
		}
		if a, b, ok := strings.Cut(col, " / "); ok {
			col = a
			if v6 {
				col = b
			}
		}
		n := regexp.MustCompile(`[0-9]+`).FindAllString(col, -1)
		x, _ := strconv.Atoi(n[len(n)-1])
		return uint16(x)
	}
	type docField struct {
		label string
		f     field
	}
	var rows [2][]docField // IPv4, IPv6
	var sub []field
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		label, id4, id6, col := m[1], m[2], m[3], strings.TrimSpace(m[4])
		for fam := range 2 {
			id := id4
			if fam == 1 && id6 != "" {
				id = id6
			}
			n, _ := strconv.Atoi(id)
			f := field{id: uint16(n), length: length(col, fam == 1), pen: label != "" && strings.ContainsAny(label[:1], "NEDTCO")}
			if label == "" {
				if fam == 0 {
					sub = append(sub, f)
				}
				continue
			}
			rows[fam] = append(rows[fam], docField{label, f})
		}
	}
	group := func(fam int, keep func(label string) bool) (out []field) {
		for _, r := range rows[fam] {
			if keep(r.label) {
				out = append(out, r.f)
			}
		}
		return out
	}
	std := func(lo, hi int) func(string) bool {
		return func(l string) bool { n, err := strconv.Atoi(l); return err == nil && n >= lo && n <= hi }
	}
	prefix := func(p string) func(string) bool { return func(l string) bool { return strings.HasPrefix(l, p) } }
	for v := range variants {
		fam := v & variantV6
		want := group(fam, std(1, 18))
		if v&variantNAT != 0 {
			want = append(append(want, group(fam, std(19, 22))...), group(fam, prefix("N"))...)
		}
		if v&variantEnriched != 0 {
			want = append(want, group(fam, prefix("E"))...)
		}
		if v&variantDNS != 0 {
			want = append(want, group(fam, prefix("D"))...)
		}
		if v&variantTLS != 0 {
			want = append(want, group(fam, prefix("T"))...)
		}
		if v&variantTCP != 0 {
			want = append(want, group(fam, prefix("C"))...)
		}
		if v&variantTunnel != 0 {
			want = append(want, group(fam, prefix("O"))...)
		}
		if got := templateFields(v); !equalFields(got, want) {
			t.Errorf("template %d: code %v\ndocs %v", templateID(v), got, want)
		}
	}
	if !equalFields(interfaceFields, sub) {
		t.Errorf("template %d: code %v\ndocs %v", TemplateInterface, interfaceFields, sub)
	}
}

func equalFields(a, b []field) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
