package docs_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flowlens/flowlens/internal/testkit"
)

// dualSPDX is the header every C file of the BPF programs starts with.
var dualSPDX = regexp.MustCompile(`^(//|/\*) SPDX-License-Identifier: \(GPL-2\.0-only OR BSD-2-Clause\)( \*/)?$`)

// TestLicenses: the license files NOTICE names exist with their texts, and
// every BPF C file (bpf/, hack/bench/bpf/csrc/) opens with the dual
// GPL-2.0-only / BSD-2-Clause SPDX header; a program's license section says
// "Dual BSD/GPL".
func TestLicenses(t *testing.T) {
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"LICENSE":                   "Apache License\n                           Version 2.0, January 2004",
		"LICENSES/Apache-2.0.txt":   "Apache License\n                           Version 2.0, January 2004",
		"LICENSES/GPL-2.0-only.txt": "GNU GENERAL PUBLIC LICENSE\n                       Version 2, June 1991",
		"LICENSES/BSD-2-Clause.txt": "Redistribution and use in source and binary forms",
		"NOTICE":                    "SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)",
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Error(err)
			continue
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not contain %q", file, want)
		}
	}
	var files []string
	for _, pattern := range []string{"bpf/*.c", "bpf/*.h", "hack/bench/bpf/csrc/*.c", "hack/bench/bpf/csrc/*.h"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %d BPF C files: %v", len(files), files)
	}
	licenseSection := regexp.MustCompile(`SEC\("license"\) = "([^"]*)"`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		first, _, _ := strings.Cut(string(b), "\n")
		if !dualSPDX.MatchString(first) {
			t.Errorf("%s: first line %q, want the SPDX header (GPL-2.0-only OR BSD-2-Clause)", rel, first)
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if m := licenseSection.FindStringSubmatch(sc.Text()); m != nil && m[1] != "Dual BSD/GPL" {
				t.Errorf("%s: license section %q, want \"Dual BSD/GPL\"", rel, m[1])
			}
		}
	}
}
