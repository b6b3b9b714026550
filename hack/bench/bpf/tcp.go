package main

// The "tcp" feature's cases (bpf/tcp.h; -tc-features tcp), IPv4, one flow
// 10.0.0.0:40000 → 10.100.0.1:80 (the server's segments the reverse):
//
//	tcp ack-other    exist-hot ACK with 32 bytes and an open window: the
//	                 per-packet test only ("other packets")
//	tcp new-other    each run a new flow's first packet, an ACK (the driver
//	                 rewrites the source): the connection looked up for the
//	                 flow's role (tcp_new_flow, two misses); new path, off too
//	tcp syn-new      each run a new connection's first SYN (the driver
//	                 rewrites the source): its flow, its tcp_conns entry, its
//	                 enrichment entry (connects, role); new path, off too
//	tcp syn-retrans  exist-hot SYN: its connection pending after the first
//	                 run, every run a retransmission
//	tcp rst          exist-hot RST|ACK of the server: no connection left
//	                 after the first run, every run a reset counted
//	tcp fin          exist-hot FIN|ACK of the client: every run a FIN on a
//	                 connection already marked
//	tcp zero-window  exist-hot ACK of the server with a zero window: counted
//	                 at the first run, every other run the same
//	                 acknowledgement (a window probe's answer): one lookup

import (
	frames "github.com/flowlens/flowlens/internal/testkit/packet"
)

func tcpCases() []featCase {
	seg := func(sport, dport uint16, flags uint8, win uint16, n int, fwd bool) []byte {
		t := frames.TCP(sport, dport, flags, frames.Window(win), frames.Seq(1000), frames.AckNum(2000))
		src, dst := "10.0.0.0", "10.100.0.1"
		if !fwd {
			src, dst = dst, src
		}
		return frames.Cat(frames.Eth(frames.EtherTypeIPv4), frames.IPv4(frames.ProtoTCP, src, dst, len(t)+n), t, frames.Payload(n))
	}
	const on = "tcp_on"
	return []featCase{
		{feature: "tcp", name: "ack-other", kind: "other", constant: on, pkt: seg(40000, 80, frames.ACK, 502, 32, true), warm: 1,
			note: "exist-hot TCP ACK, 32 bytes, window open: the segment test only"},
		{feature: "tcp", name: "new-other", kind: "other", constant: on, pkt: seg(40000, 80, frames.ACK, 502, 32, true), newPath: true,
			note: "each run a new flow's first packet (an ACK): its connection looked up for its role; new path, off too"},
		{feature: "tcp", name: "syn-new", kind: "own", constant: on, pkt: seg(40000, 80, frames.SYN, 64240, 0, true), newPath: true,
			note: "each run a new connection's first SYN (new flow, tcp_conns and enrichment entries); new path, off too"},
		{feature: "tcp", name: "syn-retrans", kind: "own", constant: on, pkt: seg(40000, 80, frames.SYN, 64240, 0, true), warm: 1,
			note: "exist-hot SYN: a pending connection's retransmission"},
		{feature: "tcp", name: "rst", kind: "own", constant: on, pkt: seg(80, 40000, frames.RST|frames.ACK, 0, 0, false), warm: 1,
			note: "exist-hot RST|ACK: a reset counted, no connection to end"},
		{feature: "tcp", name: "fin", kind: "own", constant: on, pkt: seg(40000, 80, frames.FIN|frames.ACK, 502, 0, true), warm: 1,
			note: "exist-hot FIN|ACK"},
		{feature: "tcp", name: "zero-window", kind: "own", constant: on, pkt: seg(80, 40000, frames.ACK, 0, 0, false), warm: 1,
			note: "exist-hot zero-window ACK, the same acknowledgement each run (a window probe's answer)"},
	}
}
