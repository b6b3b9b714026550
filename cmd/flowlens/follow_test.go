package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	flowv1 "github.com/flowlens/flowlens/api/flow/v1"
	"github.com/flowlens/flowlens/internal/collector/collectortest"
	"github.com/flowlens/flowlens/pkg/flow"
)

// followRun is flowlens observe in follow mode, read line by line.
type followRun struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan int
	lines  *bufio.Scanner
	stderr *collectortest.SyncBuffer
}

// startFollow runs flowlens observe with args until stop.
func startFollow(t *testing.T, args ...string) *followRun {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	f := &followRun{t: t, cancel: cancel, done: make(chan int, 1), lines: bufio.NewScanner(pr), stderr: &collectortest.SyncBuffer{}}
	go func() {
		f.done <- run(ctx, append([]string{"observe"}, args...), nil, pw, f.stderr)
		pw.Close()
	}()
	t.Cleanup(cancel)
	return f
}

// next is the next line, failing after 20s without one.
func (f *followRun) next() string {
	f.t.Helper()
	got := make(chan string, 1)
	go func() {
		if f.lines.Scan() {
			got <- f.lines.Text()
		} else {
			got <- ""
		}
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(20 * time.Second):
		f.t.Fatalf("no line in 20s; stderr: %s", f.stderr.String())
		return ""
	}
}

// stop interrupts observe (Ctrl-C), checks that it exits 0, and returns
// the lines it printed after the last next.
func (f *followRun) stop() []string {
	f.t.Helper()
	f.cancel()
	var rest []string
	for f.lines.Scan() {
		rest = append(rest, f.lines.Text())
	}
	if code := <-f.done; code != 0 {
		f.t.Fatalf("exit %d: %s", code, f.stderr.String())
	}
	return rest
}

// at is a flow named by when it ended: t0 + end seconds, src port 50000 +
// end.
func at(end int) flow.Record {
	return rec("10.0.0.1", "10.0.1.1", uint16(50000+end), 80, 6, end)
}

// endOf is the name (end second) of at's flow in a JSON line.
func endOf(t *testing.T, line string) int {
	t.Helper()
	var f struct {
		SrcPort int `json:"src_port"`
	}
	if err := json.Unmarshal([]byte(line), &f); err != nil {
		t.Fatalf("not JSON: %q: %v", line, err)
	}
	return f.SrcPort - 50000
}

// Follow mode over two real collectors whose flows' end times interleave:
// the history's last 3 of both, then the new flows in end-time order, each
// printed once both collectors delivered a flow that ended at or after it
// (the window is a minute, so none is printed for the time it waited),
// sorted within a collector's batch too; Ctrl-C prints the one still
// waiting.
func TestObserveFollowMerge(t *testing.T) {
	a, b := startCollector(t), startCollector(t)
	send(t, a, "node-a", []flow.Record{at(1), at(3)})
	send(t, b, "node-b", []flow.Record{at(2), at(4)})
	f := startFollow(t, "--server", a+","+b, "-f", "--last", "3", "-o", "json", "--reorder-window", "1m")
	var got []string
	read := func(n int) {
		for range n {
			got = append(got, strconv.Itoa(endOf(t, f.next())))
		}
	}
	read(3) // the history: once printed, both follow streams are open
	send(t, a, "node-a", []flow.Record{at(13), at(11)})
	send(t, b, "node-b", []flow.Record{at(12), at(14)})
	read(3) // 11 12 13; 14 waits for a
	send(t, a, "node-a", []flow.Record{at(15)})
	send(t, b, "node-b", []flow.Record{at(16)})
	read(2) // 14 15; 16 waits for a
	for _, l := range f.stop() {
		got = append(got, strconv.Itoa(endOf(t, l)))
	}
	if g, want := strings.Join(got, " "), "2 3 4 11 12 13 14 15 16"; g != want {
		t.Errorf("printed %s, want %s; stderr: %s", g, want, f.stderr.String())
	}
}

// hf is a HistoryFlow named by its src port, ending at t0 + end seconds.
func hf(end int) *flowv1.HistoryFlow { return fl(uint32(end), float64(end)) }

// answerOut runs answer on items (the streams' answers as they would
// arrive) in follow mode with --last 2, and returns the flows it printed,
// by name, and its error.
func answerOut(t *testing.T, items []item) (string, error) {
	t.Helper()
	ch := make(chan item, len(items))
	for _, it := range items {
		it.server = "collector-" + strconv.Itoa(it.stream)
		ch <- it
	}
	close(ch)
	o := &options{output: "jsonpb", follow: true, last: 2, lastSet: true, reorderWindow: time.Minute}
	var out bytes.Buffer
	p := &printer{o: o, w: bufio.NewWriter(&out)}
	var stderr bytes.Buffer
	err := answer(context.Background(), o, 2, ch, p, &connection{}, &stderr)
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l == "" {
			continue
		}
		var h flowv1.HistoryFlow
		if err := protojson.Unmarshal([]byte(l), &h); err != nil {
			t.Fatalf("not a HistoryFlow: %q: %v", l, err)
		}
		names = append(names, strconv.Itoa(int(h.Flow.SrcPort)))
	}
	return strings.Join(names, " "), err
}

// The hand-over from the histories to the new flows across collectors: a
// collector's new flows that arrive while another still sends its history
// are new flows, printed once, after the history and in order; --last counts
// history flows only.
func TestFollowHandOver(t *testing.T) {
	out, err := answerOut(t, []item{
		{stream: 0, flow: hf(1)}, {stream: 0, histEnd: true},
		{stream: 0, flow: hf(9)}, // new, while collector 1 sends its history
		{stream: 1, flow: hf(2)}, {stream: 1, flow: hf(3)}, {stream: 1, histEnd: true},
		{stream: 1, flow: hf(8)},
		{stream: 0, done: true}, {stream: 1, done: true},
	})
	if err != nil || out != "2 3 8 9" {
		t.Errorf("printed %q, %v; want \"2 3 8 9\", no error", out, err)
	}
}

// A collector whose stream fails ends the follow, as with one collector:
// the flows that waited are printed, then its error, with its address.
func TestFollowStreamFails(t *testing.T) {
	out, err := answerOut(t, []item{
		{stream: 0, flow: hf(1)}, {stream: 0, histEnd: true}, {stream: 1, histEnd: true},
		{stream: 0, flow: hf(6)}, {stream: 0, flow: hf(5)},
		{stream: 1, done: true, err: errors.New("connection reset")},
		{stream: 0, flow: hf(7)}, // after the failure: not printed
	})
	if out != "1 5 6" || err == nil || err.Error() != "collector-1: connection reset" {
		t.Errorf("printed %q, %v; want \"1 5 6\" and collector-1: connection reset", out, err)
	}
}
