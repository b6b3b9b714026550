package envtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flowlens/flowlens/internal/testkit"
)

// StopAPIServer kills the kube-apiserver (SIGKILL: gone at once, as when
// it crashes or its node goes down; its graceful termination would keep
// it half-serving for up to a minute while watches drain; etcd keeps
// running, with the cluster's objects) and returns start,
// which starts it again with the same arguments (same port, certificates
// and users, so Config still reaches it) and returns once it is ready.
// The restarted process is killed at t's cleanup.
//
// controller-runtime's own APIServer.Stop and Start would not do: Stop
// removes the certificates, and Start makes new ones, which the clients
// already configured would not trust.
func (e *Env) StopAPIServer(t testing.TB) (start func()) {
	t.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	pid, argv, err := findAPIServer(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// envtest's goroutine waits for its child: once reaped, it is gone.
	deadline := time.Now().Add(30 * time.Second)
	for processExists(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver %d still there 30 s after SIGKILL", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return func() {
		t.Helper()
		e.run(t, argv, e.Config)
	}
}

// AnotherAPIServer starts a second kube-apiserver on the same etcd (as in
// a cluster of several), on a port of its own, and returns the
// configuration reaching it: it stays up when StopAPIServer stops the
// first, so that objects can change meanwhile. Call it while the first
// runs. It is killed at t's cleanup.
func (e *Env) AnotherAPIServer(t testing.TB) *rest.Config {
	t.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	_, argv, err := findAPIServer(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(testkit.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	argv = slices.Clone(argv)
	for i, a := range argv {
		if strings.HasPrefix(a, "--secure-port=") {
			argv[i] = "--secure-port=" + port
		}
	}
	cfg := rest.CopyConfig(e.Config)
	u.Host = net.JoinHostPort(u.Hostname(), port)
	cfg.Host = u.String()
	e.run(t, argv, cfg)
	return cfg
}

// run starts kube-apiserver with argv, killed at t's cleanup (registered
// after StartT's, so before Stop removes its directory), and waits until
// it serves cfg.
func (e *Env) run(t testing.TB, argv []string, cfg *rest.Config) {
	t.Helper()
	logFile, err := os.Create(filepath.Join(t.TempDir(), "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := testkit.StartOwned(cmd); err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		// No graceful termination: it would wait for the watches.
		_ = cmd.Process.Kill()
		<-exited
	})
	if err := waitReady(cfg, exited, 60*time.Second); err != nil {
		out, _ := os.ReadFile(logFile.Name())
		t.Fatalf("kube-apiserver %s: %v\n%s", cfg.Host, err, tailOf(out, 4000))
	}
}

// waitReady polls the apiserver's /readyz until it answers ok.
func waitReady(cfg *rest.Config, exited <-chan struct{}, limit time.Duration) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("it exited (last: %v)", last)
		default:
		}
		var body []byte
		body, last = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if last == nil && string(body) == "ok" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v (last: %v)", limit, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// findAPIServer returns the pid and command line of the kube-apiserver
// serving port.
func findAPIServer(port string) (int, []string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, err
	}
	want := []byte("--secure-port=" + port)
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		argv := bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0})
		if filepath.Base(string(argv[0])) != "kube-apiserver" {
			continue
		}
		for _, a := range argv[1:] {
			if bytes.Equal(a, want) {
				out := make([]string, len(argv))
				for i, a := range argv {
					out[i] = string(a)
				}
				return pid, out, nil
			}
		}
	}
	return 0, nil, fmt.Errorf("no kube-apiserver with --secure-port=%s running", port)
}

// processExists reports whether pid runs (a zombie does not).
func processExists(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func tailOf(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
