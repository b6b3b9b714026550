package agent

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Only the binary's own private mappings that are never written are
// advised: text (r-x) and rodata (r--), not .data (rw-), not another
// file's, not a shared mapping; a path with spaces or "(deleted)" is the
// binary's as /proc/self/exe names it.
func TestReadOnlyRanges(t *testing.T) {
	const exe = "/usr/bin/flowlens agent (deleted)"
	maps := `00400000-00e2e000 r-xp 00000000 fd:01 1234 /usr/bin/flowlens agent (deleted)
00e2e000-01c5c000 r--p 00a2e000 fd:01 1234 /usr/bin/flowlens agent (deleted)
01c5c000-01cd0000 rw-p 0185c000 fd:01 1234 /usr/bin/flowlens agent (deleted)
01cd0000-01d00000 rw-p 00000000 00:00 0 
02000000-02001000 r--s 00000000 fd:01 1234 /usr/bin/flowlens agent (deleted)
7f0000000000-7f0000001000 r--p 00000000 fd:01 99 /usr/bin/flowlens
7f0000002000-7f0000003000 r-xp 00000000 fd:01 98 /usr/bin/flowlens agent
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
`
	got, err := readOnlyRanges([]byte(maps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uintptr{{0x400000, 0xe2e000}, {0xe2e000, 0x1c5c000}}
	if !slices.Equal(got, want) {
		t.Fatalf("ranges %x, want %x", got, want)
	}
	if _, err := readOnlyRanges([]byte("zz-00e2e000 r-xp 0 fd:01 1 "+exe+"\n"), exe); err == nil || !strings.Contains(err.Error(), "zz-00e2e000") {
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
