package netlab

import (
	"encoding/binary"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Flooder sends UDP/IPv4 frames with a new 5-tuple each from an AF_PACKET
// socket, FloodBatch frames per sendmmsg: the cheapest way to make new
// flows from user space (one sender reaches ~1 M frames/s on a 2-core VM).
// The chaos suite's flood and `make bench-mem`'s udp workload use it.
type Flooder struct {
	// Next is the next frame's flow number: its UDP source port is the low
	// 16 bits, its destination port 1 + the next 16 (65535 x 65536 flows).
	Next uint64
	// Cycle, when not 0, makes flow numbers wrap: frame k carries flow
	// k mod Cycle, so that Cycle flows repeat (a flow table's steady state)
	// rather than each frame opening a new one.
	Cycle uint64

	fd     int
	frames [][]byte
	hdrs   []unix.Mmsghdr
	iovs   []unix.Iovec
}

// Frame layout: Ethernet (14), IPv4 (20), UDP (8), padding to the 60-byte
// minimum; only the UDP ports vary, so the IPv4 checksum is fixed.
const (
	floodFrameLen = 60
	floodSrcPort  = 14 + 20
	floodDstPort  = floodSrcPort + 2
	floodIPHdr    = 20
	floodUDPLen   = floodFrameLen - 14 - floodIPHdr
	// FloodBatch is the most frames one Send takes.
	FloodBatch = 512
)

// NewFlooder opens the socket in ns on ifname, sending frames from src to
// dst (IPv4) with dstMAC as the destination: a MAC that is not the peer's
// makes the peer's stack drop the frames at once (PACKET_OTHERHOST), after
// its TC hooks saw them, and answer nothing. With bypass the frames skip
// the sending device's qdisc and TC egress hook (PACKET_QDISC_BYPASS):
// faster, but a program attached to the sender's egress sees none of them.
// Close releases the socket.
func NewFlooder(ns *Netns, ifname string, srcMAC, dstMAC net.HardwareAddr, src, dst net.IP, bypass bool) (*Flooder, error) {
	f := &Flooder{fd: -1}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // protocol 0: receives nothing
		if err != nil {
			return err
		}
		f.fd = fd
		if bypass {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
				return err
			}
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index})
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	tmpl := make([]byte, floodFrameLen)
	copy(tmpl[0:6], dstMAC)
	copy(tmpl[6:12], srcMAC)
	binary.BigEndian.PutUint16(tmpl[12:], unix.ETH_P_IP)
	ip := tmpl[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], floodIPHdr+floodUDPLen)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	copy(ip[12:16], src.To4())
	copy(ip[16:20], dst.To4())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:floodIPHdr]))
	binary.BigEndian.PutUint16(tmpl[floodDstPort+2:], floodUDPLen) // UDP length; checksum 0: none
	f.frames = make([][]byte, FloodBatch)
	f.iovs = make([]unix.Iovec, FloodBatch)
	f.hdrs = make([]unix.Mmsghdr, FloodBatch)
	for i := range f.frames {
		f.frames[i] = append([]byte(nil), tmpl...)
		f.iovs[i].Base = &f.frames[i][0]
		f.iovs[i].SetLen(floodFrameLen)
		f.hdrs[i].Hdr.Iov = &f.iovs[i]
		f.hdrs[i].Hdr.SetIovlen(1)
	}
	return f, nil
}

// Close closes the socket.
func (f *Flooder) Close() error {
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// Send sends n frames (at most FloodBatch) of consecutive flows, and
// returns how many the kernel took (0 when its queue is full).
func (f *Flooder) Send(n int) (int, error) {
	n = min(n, FloodBatch)
	for i := range n {
		k := f.Next + uint64(i)
		if f.Cycle != 0 {
			k %= f.Cycle
		}
		binary.BigEndian.PutUint16(f.frames[i][floodSrcPort:], uint16(k))
		binary.BigEndian.PutUint16(f.frames[i][floodDstPort:], uint16(1+k>>16))
	}
	r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(f.fd), uintptr(unsafe.Pointer(&f.hdrs[0])), uintptr(n), 0, 0, 0)
	if errno != 0 {
		if errno == unix.ENOBUFS || errno == unix.EAGAIN {
			return 0, nil
		}
		return 0, errno
	}
	f.Next += uint64(r)
	return int(r), nil
}

// Flood sends frames as fast as it can (rate <= 0) or at about rate frames
// a second, for d; it returns the frames the kernel took.
func (f *Flooder) Flood(d time.Duration, rate float64) (uint64, error) {
	start := time.Now()
	var sent uint64
	for {
		el := time.Since(start)
		if el >= d {
			return sent, nil
		}
		if rate > 0 && float64(sent) > rate*el.Seconds() {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		n, err := f.Send(FloodBatch)
		if err != nil {
			return sent, err
		}
		sent += uint64(n)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
