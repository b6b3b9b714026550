package testkit

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// CacheDir is where `make` caches the tools the tests use (envtest's
// binaries, helm, Kafka's jars): $FLOWLENS_CACHE, else the user's cache
// directory's flowlens/ (hack/make/operator.mk's FLOWLENS_CACHE).
func CacheDir() (string, error) {
	if base := os.Getenv("FLOWLENS_CACHE"); base != "" {
		return base, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "flowlens"), nil
}

// ToolVersion returns the version the go.mod file of a tools module
// requires of module path: the one place a tool's version is written (the
// Makefile reads it the same way), so a test finds the build `make` made.
func ToolVersion(gomod, path string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == path && strings.HasPrefix(fields[1], "v") {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New(gomod + " does not require " + path)
}
