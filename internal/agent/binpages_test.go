package agent

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// Only the binary's own private mappings that are never written are
// advised: text (r-x) and rodata (r--), not .data (rw-), not another
// file's, not a shared mapping, and not one holding a private copy of a
// page, resident or swapped (a breakpoint, an uprobe); a path with spaces
// or "(deleted)" is the binary's as /proc/self/exe names it.
func TestUnmodifiedRanges(t *testing.T) {
	const exe = "/usr/bin/flowlens agent (deleted)"
	smaps := `00400000-00e2e000 r-xp 00000000 fd:01 1234 /usr/bin/flowlens agent (deleted)
Size:               10424 kB
Rss:                 6900 kB
Anonymous:              0 kB
Swap:                   0 kB
VmFlags: rd ex mr mw me
00e2e000-01c5c000 r--p 00a2e000 fd:01 1234 /usr/bin/flowlens agent (deleted)
Anonymous:              0 kB
Swap:                   0 kB
01c5c000-01cd0000 rw-p 0185c000 fd:01 1234 /usr/bin/flowlens agent (deleted)
Anonymous:             80 kB
01cd0000-01d00000 rw-p 00000000 00:00 0 
Anonymous:            192 kB
02000000-02001000 r--s 00000000 fd:01 1234 /usr/bin/flowlens agent (deleted)
Anonymous:              0 kB
03000000-03100000 r-xp 00000000 fd:01 1234 /usr/bin/flowlens agent (deleted)
Anonymous:              4 kB
Swap:                   0 kB
04000000-04100000 r--p 00000000 fd:01 1234 /usr/bin/flowlens agent (deleted)
Anonymous:              0 kB
Swap:                   8 kB
7f0000000000-7f0000001000 r--p 00000000 fd:01 99 /usr/bin/flowlens
Anonymous:              0 kB
7f0000002000-7f0000003000 r-xp 00000000 fd:01 98 /usr/bin/flowlens agent
Anonymous:              0 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
Anonymous:              0 kB
`
	got, err := unmodifiedRanges([]byte(smaps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uintptr{{0x400000, 0xe2e000}, {0xe2e000, 0x1c5c000}}
	if !slices.Equal(got, want) {
		t.Fatalf("ranges %x, want %x", got, want)
	}
	if _, err := unmodifiedRanges([]byte("zz-00e2e000 r-xp 0 fd:01 1 "+exe+"\n"), exe); err == nil || !strings.Contains(err.Error(), "zz-00e2e000") {
		t.Fatalf("a malformed address: error %v, want one naming the line", err)
	}
}

// UnmapBinaryPages takes this test binary's read-only pages out of its RSS
// (what its package inits and the tests so far touched: megabytes) and the
// process runs on, mapping again what it calls.
func TestUnmapBinaryPages(t *testing.T) {
	before := rssFileKiB(t)
	n, err := UnmapBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	t.Logf("advised %d KiB of the binary; file-backed RSS %d KiB before, %d after", n>>10, before, after)
	if n < 1<<20 {
		t.Fatalf("advised %d bytes of the binary's read-only mappings, want more than 1 MiB", n)
	}
	if before-after < 1<<10 {
		t.Fatalf("file-backed RSS %d KiB before, %d after: want at least 1 MiB less", before, after)
	}
	// Code and read-only data run again from the page cache.
	if s := strconv.Itoa(12345) + strings.Repeat("x", 3); s != "12345xxx" {
		t.Fatalf("after the unmapping: %q", s)
	}
}

// rssFileKiB is RssFile of /proc/self/status, in KiB.
func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// A page of the binary's rodata copied on write, as a debugger's
// breakpoint or an uprobe copies a page of text (a write through
// /proc/self/mem, of the bytes already there), survives UnmapBinaryPages:
// its mapping is left alone.
func TestUnmapBinaryPagesKeepsCopiedPages(t *testing.T) {
	const probe = "flowlens binpages probe: a constant in rodata"
	addr := uintptr(unsafe.Pointer(unsafe.StringData(probe)))
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no /proc/self/mem to write: %v", err)
	}
	defer mem.Close()
	if _, err := mem.WriteAt([]byte(probe[:8]), int64(addr)); err != nil {
		t.Skipf("writing the binary's rodata through /proc/self/mem: %v", err)
	}
	if anon := anonymousKiBAt(t, addr); anon == 0 {
		t.Fatalf("no anonymous page in the mapping of %#x after the write", addr)
	}
	if _, err := UnmapBinaryPages(); err != nil {
		t.Fatal(err)
	}
	if anon := anonymousKiBAt(t, addr); anon == 0 {
		t.Fatalf("the mapping of %#x lost its copied page to UnmapBinaryPages", addr)
	}
	if got := probe[:8]; got != "flowlens" {
		t.Fatalf("the constant reads %q after UnmapBinaryPages", got)
	}
}

// anonymousKiBAt is the Anonymous field of /proc/self/smaps for the
// mapping holding addr.
func anonymousKiBAt(t *testing.T, addr uintptr) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	for l := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			a, _ := strconv.ParseUint(lo, 16, 64)
			z, _ := strconv.ParseUint(hi, 16, 64)
			in = uint64(addr) >= a && uint64(addr) < z
			continue
		}
		if in && f[0] == "Anonymous:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return 0
}
