package main

import (
	"bufio"
	"encoding/binary"
	"io"
)

// pcapngWriter writes a pcapng file (draft-ietf-opsawg-pcapng): one
// section header, an interface description block per interface the first
// time a packet of it is written, and an enhanced packet block per packet,
// little-endian, timestamps in nanoseconds. Small on purpose: what
// `flowlens capture` needs, read back by tshark in its tests.
type pcapngWriter struct {
	w   *bufio.Writer
	ifs map[pcapIface]uint32
	buf []byte
}

// pcapIface is what an interface description block describes.
type pcapIface struct {
	name, description string
	linkType          uint16
	snaplen           uint32
}

// Block types and option codes.
const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockEPB = 0x00000006

	optEnd         = 0
	optComment     = 1
	optSHBUserAppl = 4
	optIfName      = 2
	optIfDesc      = 3
	optIfTSResol   = 9
)

func newPcapngWriter(w io.Writer, app string) (*pcapngWriter, error) {
	p := &pcapngWriter{w: bufio.NewWriterSize(w, 64<<10), ifs: map[pcapIface]uint32{}}
	b := p.start(blockSHB)
	b = binary.LittleEndian.AppendUint32(b, 0x1A2B3C4D)
	b = binary.LittleEndian.AppendUint16(b, 1) // major
	b = binary.LittleEndian.AppendUint16(b, 0) // minor
	b = binary.LittleEndian.AppendUint64(b, ^uint64(0))
	b = appendOpt(b, optSHBUserAppl, []byte(app))
	b = appendOpt(b, optEnd, nil)
	return p, p.end(b)
}

// start begins a block in p.buf (its length is filled in by end).
func (p *pcapngWriter) start(typ uint32) []byte {
	b := binary.LittleEndian.AppendUint32(p.buf[:0], typ)
	return binary.LittleEndian.AppendUint32(b, 0)
}

// end fills in the block's length, twice, and writes it.
func (p *pcapngWriter) end(b []byte) error {
	n := uint32(len(b) + 4)
	binary.LittleEndian.PutUint32(b[4:], n)
	b = binary.LittleEndian.AppendUint32(b, n)
	p.buf = b
	_, err := p.w.Write(b)
	return err
}

// appendOpt appends an option, padded to 32 bits.
func appendOpt(b []byte, code uint16, v []byte) []byte {
	b = binary.LittleEndian.AppendUint16(b, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return pad(b, len(v))
}

func pad(b []byte, n int) []byte {
	for ; n%4 != 0; n++ {
		b = append(b, 0)
	}
	return b
}

// iface is the id of ifc's description block, written now if new.
func (p *pcapngWriter) iface(ifc pcapIface) (uint32, error) {
	if id, ok := p.ifs[ifc]; ok {
		return id, nil
	}
	id := uint32(len(p.ifs))
	p.ifs[ifc] = id
	b := p.start(blockIDB)
	b = binary.LittleEndian.AppendUint16(b, ifc.linkType)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, ifc.snaplen)
	b = appendOpt(b, optIfName, []byte(ifc.name))
	if ifc.description != "" {
		b = appendOpt(b, optIfDesc, []byte(ifc.description))
	}
	b = appendOpt(b, optIfTSResol, []byte{9}) // 10^-9 s
	b = appendOpt(b, optEnd, nil)
	return id, p.end(b)
}

// packet writes one packet of interface ifc, seen at unixNano, wireLen
// bytes long on the wire, with a comment.
func (p *pcapngWriter) packet(ifc pcapIface, unixNano int64, wireLen uint32, data []byte, comment string) error {
	id, err := p.iface(ifc)
	if err != nil {
		return err
	}
	ts := uint64(unixNano)
	b := p.start(blockEPB)
	b = binary.LittleEndian.AppendUint32(b, id)
	b = binary.LittleEndian.AppendUint32(b, uint32(ts>>32))
	b = binary.LittleEndian.AppendUint32(b, uint32(ts))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = binary.LittleEndian.AppendUint32(b, max(wireLen, uint32(len(data))))
	b = append(b, data...)
	b = pad(b, len(data))
	if comment != "" {
		b = appendOpt(b, optComment, []byte(comment))
		b = appendOpt(b, optEnd, nil)
	}
	return p.end(b)
}

func (p *pcapngWriter) flush() error { return p.w.Flush() }
