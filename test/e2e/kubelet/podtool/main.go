// Command podtool is the one binary of the kubelet e2e's own images (no
// image can be pulled there): the pod sandbox's pause process, and the
// server and client of the known traffic the test sends between two pods,
// and the HTTP server of hack/kube-burner's job (in place of agnhost).
//
//	podtool pause
//	podtool server UDPPORT TCPPORT
//	podtool client HOST UDPPORT TCPPORT DATAGRAMS SIZE TCPBYTES
//	podtool netexec --http-port=PORT
//	podtool grpcprobe ADDR [TOKENFILE...]
//
// The server prints "listening" once both sockets are bound, then counts
// what it receives and prints one line per datagram and TCP connection.
// The client sends DATAGRAMS UDP datagrams of SIZE bytes of payload and
// prints "udp done"; then, if TCPBYTES is not 0, it waits for SIGUSR1 (the
// test's go-ahead, once it has read the pods' interface counters), opens
// one TCP connection, prints "tcp from ADDR:PORT" (its local end), sends
// TCPBYTES bytes, closes it and prints "tcp done". Then it waits like
// pause, so its pod stays Running. grpcprobe calls the collector at ADDR
// as an intruder would (probe.go) and exits.
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: podtool pause | server UDPPORT TCPPORT | client HOST UDPPORT TCPPORT DATAGRAMS SIZE TCPBYTES")
	}
	switch args := os.Args[2:]; os.Args[1] {
	case "pause":
		pause()
	case "netexec":
		port, ok := strings.CutPrefix(strings.Join(args, " "), "--http-port=")
		if !ok {
			fail("usage: podtool netexec --http-port=PORT")
		}
		// Like agnhost netexec: 200 on every path, /healthz included.
		check(http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "ok")
		})))
	case "grpcprobe":
		if len(args) < 1 {
			fail("usage: podtool grpcprobe ADDR [TOKENFILE...]")
		}
		probe(args[0], args[1:])
	case "server":
		if len(args) != 2 {
			fail("usage: podtool server UDPPORT TCPPORT")
		}
		server(args[0], args[1])
	case "client":
		if len(args) != 6 {
			fail("usage: podtool client HOST UDPPORT TCPPORT DATAGRAMS SIZE TCPBYTES")
		}
		client(args[0], args[1], args[2], atoi(args[3]), atoi(args[4]), atoi(args[5]))
		pause()
	default:
		fail("unknown mode " + os.Args[1])
	}
}

// pause waits for SIGTERM or SIGINT, as the pause container does.
func pause() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

func server(udpPort, tcpPort string) {
	pc, err := net.ListenPacket("udp4", ":"+udpPort)
	check(err)
	ln, err := net.Listen("tcp4", ":"+tcpPort)
	check(err)
	fmt.Println("listening")
	go func() {
		buf := make([]byte, 65536)
		for n := 1; ; n++ {
			size, from, err := pc.ReadFrom(buf)
			check(err)
			fmt.Printf("udp %d: %d bytes from %s\n", n, size, from)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			check(err)
			n, err := io.Copy(io.Discard, c)
			c.Close()
			fmt.Printf("tcp: %d bytes from %s (%v)\n", n, c.RemoteAddr(), err)
		}
	}()
	pause()
}

func client(host, udpPort, tcpPort string, datagrams, size, tcpBytes int) {
	// Registered first: SIGUSR1's default action would kill the process.
	goAhead := make(chan os.Signal, 1)
	signal.Notify(goAhead, syscall.SIGUSR1)

	// The test starts the client once the server prints "listening": the
	// first datagram finds the port open (no ICMP unreachable, no
	// ECONNREFUSED on the next write).
	u, err := net.Dial("udp4", net.JoinHostPort(host, udpPort))
	check(err)
	payload := make([]byte, size)
	for range datagrams {
		_, err := u.Write(payload)
		check(err)
		// Paced, so that no datagram is lost on the way (the test wants
		// exact counts on both ends).
		time.Sleep(5 * time.Millisecond)
	}
	check(u.Close())
	fmt.Println("udp done")
	if tcpBytes == 0 {
		return
	}

	// One connection, no retries: every segment this pod sends between the
	// test's two readings of its eth0 counters belongs to it.
	<-goAhead
	c, err := net.DialTimeout("tcp4", net.JoinHostPort(host, tcpPort), 5*time.Second)
	check(err)
	fmt.Println("tcp from", c.LocalAddr())
	_, err = c.Write(make([]byte, tcpBytes))
	check(err)
	check(c.Close())
	fmt.Println("tcp done")
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	check(err)
	return n
}

func check(err error) {
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "podtool:", msg)
	os.Exit(2)
}
