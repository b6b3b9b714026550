package drops

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"os"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// The raw scan finds the enum that decoding every type in order finds,
// and loadNames gives the same TCP states either way.
func TestTCPStatesEnumRaw(t *testing.T) {
	if _, err := os.Stat(vmlinuxBTF); err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	var want *btf.Enum
	for typ, err := range kernel.All() {
		if err != nil {
			t.Fatal(err)
		}
		if en, ok := typ.(*btf.Enum); ok && en.Name == "" && hasValue(en, "TCP_ESTABLISHED") {
			want = en
			break
		}
	}
	if want == nil {
		t.Fatal("no anonymous enum with TCP_ESTABLISHED in the kernel's BTF")
	}
	wantID, _ := kernel.TypeID(want)
	f, err := os.Open(vmlinuxBTF)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if id, err := anonEnumWith(f, "TCP_ESTABLISHED"); err != nil || id != wantID {
		t.Fatalf("raw scan: id %d, %v; decoded: id %d", id, err, wantID)
	}
	if got := tcpStatesEnum(kernel); got != want {
		t.Fatalf("tcpStatesEnum %v, want %v", got, want)
	}
	names := loadNames(kernel)
	states := map[uint8]string{}
	for _, v := range want.Values {
		states[uint8(v.Value)] = v.Name[len("TCP_"):]
	}
	if !maps.Equal(names.tcpStates, states) || names.tcpStates[1] != "ESTABLISHED" {
		t.Fatalf("tcp states %v, want %v", names.tcpStates, states)
	}
	// A value no enum holds: io.EOF at the end of the types.
	if _, err := anonEnumWith(f, "NO_SUCH_VALUE_ANYWHERE"); !errors.Is(err, io.EOF) {
		t.Fatalf("absent value: %v, want io.EOF", err)
	}
}

// Bytes that are not BTF, or BTF cut short, are an error, never a wrong ID.
func TestAnonEnumWithMalformed(t *testing.T) {
	if _, err := anonEnumWith(bytes.NewReader([]byte("not btf at all, not at all")), "X"); err == nil {
		t.Fatal("no error for bytes that are not BTF")
	}
	// A header, one anonymous enum record claiming 2 values, and no more.
	var b bytes.Buffer
	binary.Write(&b, binary.NativeEndian, struct {
		Magic                                    uint16
		Version, Flags                           uint8
		HdrLen, TypeOff, TypeLen, StrOff, StrLen uint32
	}{0xeb9f, 1, 0, 24, 0, 20, 20, 2})
	binary.Write(&b, binary.NativeEndian, [5]uint32{0, 6<<24 | 2, 4, 1, 0})
	b.WriteString("X\x00")
	if id, err := anonEnumWith(bytes.NewReader(b.Bytes()), "X"); err == nil {
		t.Fatalf("truncated enum: id %d, no error", id)
	}
}
