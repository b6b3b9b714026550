package netlab

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// NetCounters reads the counters of the lines starting with prefix ("Tcp:" in
// snmp, "TcpExt:" in netstat) of /proc/net/<file> in ns. /proc/thread-self:
// Do switches only the calling thread into ns (/proc/self/net would show
// the namespace of the process's main thread).
func NetCounters(t T, ns *Netns, file, prefix string) map[string]uint64 {
	t.Helper()
	var text []byte
	if err := ns.Do(func() (err error) { text, err = os.ReadFile("/proc/thread-self/net/" + file); return }); err != nil {
		t.Fatal(err)
	}
	var names []string
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != prefix {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		m := map[string]uint64{}
		for i, v := range f[1:] {
			n, err := strconv.ParseInt(v, 10, 64) // Tcp: MaxConn is -1
			if err == nil && n >= 0 && i < len(names) {
				m[names[i]] = uint64(n)
			}
		}
		return m
	}
	t.Fatalf("no %s lines in %s's /proc/net/%s:\n%s", prefix, ns, file, text)
	return nil
}
