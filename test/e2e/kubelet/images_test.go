//go:build e2e_kubelet

package kubelet

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/flowlens/flowlens/internal/testkit"
)

// image is one image the test builds: a static Go binary at /usr/bin (as
// in the Containerfile's targets), nothing else, like distroless/static
// without its files.
type image struct {
	ref  string   // the name the manifests use, so they apply unchanged
	pkg  string   // the Go package of the binary
	args []string // the entrypoint's arguments
	user string   // the image's USER, as in the Containerfile
	// busybox, instead of pkg: /bin/busybox from this machine's
	// busybox-static, and these applets as links to it in /bin.
	busybox []string
}

// Images the manifests name (v0.1.0, the tag of manifests/), and the
// test's own.
const (
	agentImage    = "ghcr.io/flowlens/flowlens-agent:v0.1.0"
	operatorImage = "ghcr.io/flowlens/flowlens-operator:v0.1.0"
	collectorRef  = "ghcr.io/flowlens/flowlens-collector:v0.1.0"
	pauseImage    = "localhost/flowlens-e2e/pause:1"
	podtoolImage  = "localhost/flowlens-e2e/podtool:1"
	busyboxImage  = "localhost/flowlens-e2e/busybox:1"
)

// busybox is the kube-burner job's client image (sh, sleep, timeout, wget).
var busybox = image{ref: busyboxImage, busybox: []string{"sh", "sleep", "timeout", "wget"}}

// images are those every run needs.
var images = []image{
	{ref: agentImage, pkg: "./cmd/flowlens-agent"},
	{ref: operatorImage, pkg: "./cmd/flowlens-operator", user: "65532:65532"},
	{ref: collectorRef, pkg: "./cmd/flowlens-collector", user: "65532:65532"},
	{ref: pauseImage, pkg: "./test/e2e/kubelet/podtool", args: []string{"pause"}},
	{ref: podtoolImage, pkg: "./test/e2e/kubelet/podtool"},
}

// buildImages builds every image's binary as the Containerfile does
// (CGO_ENABLED=0, -trimpath, -s -w, the version), writes each image as a
// docker-archive tarball into dir and imports it into containerd's
// namespace of the CRI.
func buildImages(ctx context.Context, t *testing.T, n *node, dir string, images ...image) {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	start := time.Now()
	for _, im := range images {
		if im.busybox != nil {
			archive := filepath.Join(dir, "busybox.tar")
			if err := writeDockerArchive(archive, im, "/usr/bin/busybox"); err != nil {
				t.Fatalf("image %s: %v", im.ref, err)
			}
			n.ctr(ctx, t, "images", "import", archive)
			continue
		}
		bin := filepath.Join(dir, filepath.Base(im.pkg))
		if _, err := os.Stat(bin); err != nil { // podtool serves two images
			build := exec.CommandContext(ctx, goCmd, "build", "-trimpath",
				"-ldflags", "-s -w -X github.com/flowlens/flowlens/internal/shared/version.Version=v0.1.0",
				"-o", bin, im.pkg)
			build.Dir = root
			build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", im.pkg, err, out)
			}
		}
		archive := filepath.Join(dir, filepath.Base(im.pkg)+"-"+fmt.Sprint(len(im.args))+".tar")
		if err := writeDockerArchive(archive, im, bin); err != nil {
			t.Fatalf("image %s: %v", im.ref, err)
		}
		n.ctr(ctx, t, "images", "import", archive)
	}
	t.Logf("images built and imported in %v", time.Since(start).Round(time.Millisecond))
}

// writeDockerArchive writes the image as `docker save` would: a tar of
// manifest.json, the config and one layer holding the binary at
// /usr/bin/<name>.
func writeDockerArchive(path string, im image, bin string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	name, dirs, binDir := filepath.Base(bin), []string{"usr/", "usr/bin/", "tmp/"}, "/usr/bin"
	if im.busybox != nil {
		dirs, binDir = []string{"bin/", "tmp/"}, "/bin"
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	epoch := time.Unix(0, 0)
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: binDir[1:] + "/" + name, Mode: 0o755, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	if _, err := lw.Write(data); err != nil {
		return err
	}
	for _, applet := range im.busybox {
		if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	diffID := sha256.Sum256(layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint(im, binDir+"/"+name),
			"Cmd":        im.args,
			"User":       im.user,
			"Env":        []string{"PATH=" + binDir},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{im.ref},
		"Layers":   []string{"layer.tar"},
	}})
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{configName, config}, {"layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := w.Write(e.data); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func entrypoint(im image, bin string) []string {
	if im.busybox != nil {
		return nil // the pod's command runs
	}
	return []string{bin}
}
