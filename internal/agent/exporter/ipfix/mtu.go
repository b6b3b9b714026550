package ipfix

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/flowlens/flowlens/internal/agent/ipfixsize"
)

// mtuMargin is what the message size derived from the path MTU leaves
// for the IP (20 or 40 bytes) and UDP (8) headers and an encapsulation on
// the way the route does not show (VXLAN, Geneve, IPsec: 50 to 80 bytes).
const mtuMargin = 100

// pathMessageBytes is the message size over UDP derived from the path MTU
// the kernel knows for the connected socket c (IP_MTU / IPV6_MTU: the
// route's MTU, or a smaller one path MTU discovery found): the MTU less
// mtuMargin (a 1500-byte MTU gives DefaultMaxMessageBytes, 1400), within
// ipfixsize.Min to ipfixsize.MaxUDP. DefaultMaxMessageBytes when the
// kernel does not say.
func pathMessageBytes(c net.Conn) int {
	mtu := pathMTU(c)
	if mtu <= 0 {
		return DefaultMaxMessageBytes
	}
	return min(max(mtu-mtuMargin, ipfixsize.Min), ipfixsize.MaxUDP)
}

// pathMTU is the path MTU the kernel has for the connected UDP socket c,
// or 0.
func pathMTU(c net.Conn) int {
	u, ok := c.(*net.UDPConn)
	if !ok {
		return 0
	}
	raw, err := u.SyscallConn()
	if err != nil {
		return 0
	}
	mtu := 0
	v6 := false
	if a, ok := u.RemoteAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		v6 = true
	}
	raw.Control(func(fd uintptr) {
		var err error
		if v6 {
			mtu, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU)
		} else {
			mtu, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU)
		}
		if err != nil {
			mtu = 0
		}
	})
	return mtu
}
