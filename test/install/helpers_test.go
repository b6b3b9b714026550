package install

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/flowlens/flowlens/internal/testkit"
)

// root returns the repository's root directory.
func root(t testing.TB) string {
	t.Helper()
	dir, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// readFile returns a file of the repository, named by its path from the root.
func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode returns every object of a multi-document YAML stream.
func decode(t testing.TB, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s has no objects", what)
	}
	return objs
}

// manifest returns the objects of a file of manifests/.
func manifest(t testing.TB, name string) []*unstructured.Unstructured {
	t.Helper()
	name = filepath.Join("manifests", name)
	return decode(t, name, readFile(t, name))
}

// key names an object: kind, namespace/name.
func key(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// byKey indexes objects by key, failing on a duplicate.
func byKey(t testing.TB, what string, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		if _, dup := m[key(u)]; dup {
			t.Fatalf("%s: %s twice", what, key(u))
		}
		m[key(u)] = u
	}
	return m
}

// helmBin returns the helm binary `make helm` builds: $FLOWLENS_HELM, else
// <flowlens cache>/bin/helm-<the version hack/tools-helm/go.mod requires>.
// Missing, the test skips or fails as internal/testkit decides.
func helmBin(t testing.TB) string {
	t.Helper()
	p, missing := lookHelm(root(t))
	testkit.Need(t, "helm", missing)
	return p
}

func lookHelm(dir string) (string, error) {
	if p := os.Getenv("FLOWLENS_HELM"); p != "" {
		return p, nil
	}
	v, err := testkit.ToolVersion(filepath.Join(dir, "hack", "tools-helm", "go.mod"), "helm.sh/helm/v3")
	if err != nil {
		return "", err
	}
	cache, err := testkit.CacheDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(cache, "bin", "helm-"+v)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no %s: run `make helm`", p)
	}
	return p, nil
}

// helm runs helm with args in the repository's root and returns its standard
// output; a failure fails the test with helm's output.
func helm(t testing.TB, args ...string) []byte {
	t.Helper()
	out, stderr, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// runHelm runs helm with args in the repository's root and returns its
// standard output, its standard error and how it ended.
func runHelm(t testing.TB, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Dir = root(t)
	// Keep helm's own configuration and cache out of the user's home.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	return out, errb.Bytes(), err
}
