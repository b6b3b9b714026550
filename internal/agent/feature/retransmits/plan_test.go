package retransmits

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

// The running kernel's tracepoint arity decides whether failed attempts
// are skipped: (sk, skb) before Linux 6.11, (sk, skb, err) since.
func TestTracepointArgs(t *testing.T) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	n := tracepointArgs(kernel, "tcp_retransmit_skb")
	if n != 2 && n != 3 {
		t.Fatalf("tcp_retransmit_skb has %d arguments, want 2 or 3", n)
	}
	want := uint32(0)
	if n == 3 {
		want = 1
	}
	if got := New().Plan(kernel).Constants["retransmit_err_arg"]; got != want {
		t.Fatalf("retransmit_err_arg = %v for a %d-argument tracepoint, want %d", got, n, want)
	}
	if n := tracepointArgs(kernel, "no_such_tracepoint"); n != 0 {
		t.Fatalf("a missing tracepoint has %d arguments, want 0", n)
	}
	if n := tracepointArgs(nil, "tcp_retransmit_skb"); n != 0 {
		t.Fatalf("no kernel BTF: %d arguments, want 0", n)
	}
}
