// Command bench-startup measures the agent's start-up: the wall time from
// exec to its last "attached" log line, and the CPU (user + system, from
// /proc/<pid>/stat, all threads) it spent by then, on a lab of -ifaces veth
// pairs (host side watched, peers in a namespace of their own, created here
// and removed on exit).
//
// Several binaries given with -agent are run in alternation, in an order
// that reverses every round (A B, B A, ...), so drift of the machine hits
// them alike; it prints each run and per binary the median with min..max.
// Root only; needs ip. The agents run with the default features and
// --metrics-address "" (no port taken) unless -args says otherwise.
//
//	go run ./hack/bench/startup -agent old/flowlens-agent,bin/flowlens-agent -rounds 9
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clkTck is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clkTck = 100

type run struct {
	Agent string  `json:"agent"`
	Round int     `json:"round"`
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
}

func main() {
	agents := flag.String("agent", "", "comma-separated agent binaries, run in alternation")
	rounds := flag.Int("rounds", 9, "runs per binary")
	ifaces := flag.Int("ifaces", 1, "veth pairs the agents attach to")
	extra := flag.String("args", "", "extra agent arguments, space-separated")
	out := flag.String("out", "", "write the runs as JSON here")
	timeout := flag.Duration("timeout", 30*time.Second, "give up on a run after this long")
	flag.Parse()
	bins := strings.Split(*agents, ",")
	if *agents == "" || *rounds < 1 || *ifaces < 1 {
		log.Fatal("usage: bench-startup -agent A[,B...] [-rounds N] [-ifaces N]")
	}
	names, cleanup, err := lab(*ifaces)
	defer cleanup()
	if err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { <-sig; cleanup(); os.Exit(1) }()

	args := []string{"--interfaces=" + strings.Join(names, ","), "--metrics-address="}
	args = append(args, strings.Fields(*extra)...)
	var runs []run
	for r := range *rounds {
		order := slices.Clone(bins)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, b := range order {
			wall, cpu, err := once(b, args, len(names), *timeout)
			if err != nil {
				cleanup()
				log.Fatalf("%s, round %d: %v", b, r, err)
			}
			runs = append(runs, run{b, r, wall.Seconds(), cpu})
			fmt.Printf("round %d  %-40s wall %6.3f s  cpu %5.2f s\n", r, b, wall.Seconds(), cpu)
		}
	}
	fmt.Printf("\n%d interfaces, %d rounds: median [min..max]\n", len(names), *rounds)
	for _, b := range bins {
		var w, c []float64
		for _, x := range runs {
			if x.Agent == b {
				w, c = append(w, x.WallS), append(c, x.CPUS)
			}
		}
		fmt.Printf("%-40s wall %s s  cpu %s s\n", b, stat(w), stat(c))
	}
	if *out != "" {
		j, _ := json.MarshalIndent(runs, "", "  ")
		if err := os.WriteFile(*out, j, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

func stat(v []float64) string {
	slices.Sort(v)
	return fmt.Sprintf("%.3f [%.3f..%.3f]", v[len(v)/2], v[0], v[len(v)-1])
}

// once starts the agent, waits for n "attached" lines on its log (stderr),
// reads its CPU time then, and stops it.
func once(bin string, args []string, n int, timeout time.Duration) (time.Duration, float64, error) {
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	found := make(chan error, 1)
	var tail []string
	go func() {
		sc := bufio.NewScanner(stderr)
		seen := 0
		for sc.Scan() {
			line := sc.Text()
			if len(tail) < 20 {
				tail = append(tail, line)
			}
			if strings.Contains(line, "msg=attached") {
				if seen++; seen == n {
					found <- nil
					for sc.Scan() { // drain, so the agent never blocks on its log
					}
					return
				}
			}
		}
		found <- fmt.Errorf("agent exited before %d attached lines:\n%s", n, strings.Join(tail, "\n"))
	}()
	select {
	case err := <-found:
		wall := time.Since(start)
		if err != nil {
			return 0, 0, err
		}
		cpu, err := cpuOf(cmd.Process.Pid)
		return wall, cpu, err
	case <-time.After(timeout):
		return 0, 0, fmt.Errorf("no %d attached lines in %v", n, timeout)
	}
}

// cpuOf reads a process's user + system time, all threads, in seconds.
func cpuOf(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	u, err1 := strconv.ParseUint(f[11], 10, 64)              // 14: utime
	st, err2 := strconv.ParseUint(f[12], 10, 64)             // 15: stime
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, s)
	}
	return float64(u+st) / clkTck, nil
}

// lab makes n veth pairs, host ends fls<i> up, peers in namespace flstart.
func lab(n int) ([]string, func(), error) {
	const ns = "flstart"
	cleanup := func() {
		for i := range n {
			exec.Command("ip", "link", "del", fmt.Sprintf("fls%d", i)).Run()
		}
		exec.Command("ip", "netns", "del", ns).Run()
	}
	cleanup()
	if err := ip("netns", "add", ns); err != nil {
		return nil, cleanup, err
	}
	var names []string
	for i := range n {
		host, peer := fmt.Sprintf("fls%d", i), fmt.Sprintf("flp%d", i)
		if err := ip("link", "add", host, "type", "veth", "peer", "name", peer, "netns", ns); err != nil {
			return nil, cleanup, err
		}
		if err := ip("link", "set", host, "up"); err != nil {
			return nil, cleanup, err
		}
		if err := ip("-n", ns, "link", "set", peer, "up"); err != nil {
			return nil, cleanup, err
		}
		names = append(names, host)
	}
	return names, cleanup, nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
