package drops

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"

	"github.com/cilium/ebpf/btf"
)

// vmlinuxBTF is the running kernel's BTF, as btf.LoadKernelSpec reads it.
const vmlinuxBTF = "/sys/kernel/btf/vmlinux"

// anonEnumWith finds the ID of the first anonymous enum holding a value
// named value in the raw BTF of f, without decoding the types: finding the
// TCP states' enum with btf.Spec.All decoded ~10,000 of the kernel's types,
// 15 ms of the agent's start (docs/benchmarks.md §38). It reads the type
// records in order, and only the names of anonymous enums' values.
func anonEnumWith(f io.ReaderAt, value string) (btf.TypeID, error) {
	var h struct {
		Magic                                    uint16
		Version, Flags                           uint8
		HdrLen, TypeOff, TypeLen, StrOff, StrLen uint32
	}
	if err := binary.Read(io.NewSectionReader(f, 0, 24), binary.NativeEndian, &h); err != nil {
		return 0, err
	}
	if h.Magic != 0xeb9f || h.Version != 1 {
		return 0, errors.New("not BTF in this byte order")
	}
	types := bufio.NewReaderSize(io.NewSectionReader(f, int64(h.HdrLen)+int64(h.TypeOff), int64(h.TypeLen)), 64<<10)
	strs := int64(h.HdrLen) + int64(h.StrOff)
	want := append([]byte(value), 0)
	got := make([]byte, len(want))
	var rec [12]byte
	var val [8]byte
	for id := btf.TypeID(1); ; id++ {
		if _, err := io.ReadFull(types, rec[:]); err != nil {
			return 0, err // io.EOF: none
		}
		name := binary.NativeEndian.Uint32(rec[0:])
		info := binary.NativeEndian.Uint32(rec[4:])
		vlen, kind := int(info&0xffff), (info>>24)&0x1f
		var extra int
		switch kind {
		case 1, 14, 17: // int, var, decl tag
			extra = 4
		case 3: // array
			extra = 12
		case 4, 5, 15, 19: // struct, union, datasec, enum64
			extra = 12 * vlen
		case 13: // func proto
			extra = 8 * vlen
		case 6: // enum
			if name != 0 {
				extra = 8 * vlen
				break
			}
			found := false
			for range vlen {
				if _, err := io.ReadFull(types, val[:]); err != nil {
					return 0, err
				}
				off := binary.NativeEndian.Uint32(val[0:])
				if !found && off+uint32(len(want)) <= h.StrLen {
					if _, err := f.ReadAt(got, strs+int64(off)); err == nil && bytes.Equal(got, want) {
						found = true
					}
				}
			}
			if found {
				return id, nil
			}
		case 2, 7, 8, 9, 10, 11, 12, 16, 18: // no data after the record
		default:
			return 0, errors.New("unknown BTF kind")
		}
		if _, err := types.Discard(extra); err != nil {
			return 0, err
		}
	}
}

// tcpStatesEnum is the kernel's anonymous enum of TCP states (the one
// holding TCP_ESTABLISHED) in kernel, found by its ID in vmlinuxBTF and
// checked there; nil when that fails (kernel is not that BTF, say).
func tcpStatesEnum(kernel *btf.Spec) *btf.Enum {
	f, err := os.Open(vmlinuxBTF)
	if err != nil {
		return nil
	}
	defer f.Close()
	id, err := anonEnumWith(f, "TCP_ESTABLISHED")
	if err != nil {
		return nil
	}
	typ, err := kernel.TypeByID(id)
	if en, ok := typ.(*btf.Enum); err == nil && ok && en.Name == "" && hasValue(en, "TCP_ESTABLISHED") {
		return en
	}
	return nil
}
