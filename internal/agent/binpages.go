package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// UnmapBinaryPages unmaps the pages of the process's own binary that are
// never written (its read-only mappings: text, rodata, pclntab) with
// MADV_DONTNEED, and returns the bytes of the ranges it advised. The pages
// stay in the page cache, identical to the file; the next touch maps them
// again, a 64 KiB window at a time (fault-around). So what a phase of the
// start touched once (213 package inits, the BPF object's ELF and BTF
// decoding, the exporters' set-up) no longer adds to the next phase's RSS,
// and after the start the agent's RSS holds what its steady state runs
// (docs/benchmarks.md §41). Writable mappings (.data, .noptrdata, .bss)
// are left alone: their pages may differ from the file's. So is a
// read-only mapping holding a private copy of a page (a debugger's
// breakpoint, another tool's uprobe): unmapping it would drop the copy.
func UnmapBinaryPages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	ranges, err := unmodifiedRanges(smaps, exe)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, r := range ranges {
		// A raw syscall: the range is the binary's own mapping, not a Go
		// slice (unix.Madvise takes a []byte).
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_DONTNEED); errno != 0 {
			return n, fmt.Errorf("madvise %#x-%#x: %w", r[0], r[1], errno)
		}
		n += int64(r[1] - r[0])
	}
	return n, nil
}

// unmodifiedRanges returns the [start, end) address ranges of the private
// mappings of the file path without write permission and without
// anonymous (copied-on-write) pages, resident or swapped, from the content
// of /proc/PID/smaps.
func unmodifiedRanges(smaps []byte, path string) ([][2]uintptr, error) {
	var out [][2]uintptr
	var cur *[2]uintptr // the current mapping's range, if it is a candidate
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if strings.HasSuffix(f[0], ":") { // a field of the current mapping
			if cur != nil && (f[0] == "Anonymous:" || f[0] == "Swap:") && len(f) > 1 && f[1] != "0" {
				cur = nil
			}
			continue
		}
		// A mapping: address perms offset dev inode pathname (which may
		// hold spaces).
		flush()
		if len(f) < 6 || strings.Join(f[5:], " ") != path {
			continue
		}
		if perms := f[1]; len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("smaps line %q: no address range", sc.Text())
		}
		a, err := strconv.ParseUint(lo, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("smaps line %q: %w", sc.Text(), err)
		}
		b, err := strconv.ParseUint(hi, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("smaps line %q: %w", sc.Text(), err)
		}
		cur = &[2]uintptr{uintptr(a), uintptr(b)}
	}
	flush()
	return out, sc.Err()
}
