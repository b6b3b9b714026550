// Command dashboards writes flowlens' Grafana dashboards (internal/operator/dashboards) to
// a directory: one JSON file per dashboard and their ConfigMap form. Files
// named flowlens-*.json there that are no longer generated are removed.
//
//	go run ./hack/dashboards -out manifests/dashboards   (make generate-dashboards)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/flowlens/flowlens/internal/operator/dashboards"
)

func main() {
	out := flag.String("out", "manifests/dashboards", "directory to write the dashboards to")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintf(os.Stderr, "dashboards: %v\n", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	files, err := dashboards.Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stale, err := filepath.Glob(filepath.Join(dir, "flowlens-*.json"))
	if err != nil {
		return err
	}
	for _, f := range stale {
		if _, ok := files[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s (%d bytes)\n", filepath.Join(dir, name), len(files[name]))
	}
	return nil
}
