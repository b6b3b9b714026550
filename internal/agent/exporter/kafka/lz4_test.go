package kafka

import (
	"bytes"
	"io"
	"testing"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLz4Compressor: a frame without the content checksum (the frame
// descriptor's FLG byte, bit 2) that decompresses to the input, twice from
// the pool.
func TestLz4Compressor(t *testing.T) {
	c := newLz4Compressor()
	src := bytes.Repeat([]byte("flowlens flow record 10.244.0.1:30000 -> 10.96.0.10:8080 "), 2000)
	for range 2 {
		var dst bytes.Buffer
		out, codec := c.Compress(&dst, src)
		if codec != kgo.CodecLz4 || len(out) == 0 || len(out) >= len(src) {
			t.Fatalf("codec %d, %d bytes from %d", codec, len(out), len(src))
		}
		if len(out) < 5 || out[4]&0x04 != 0 {
			t.Fatalf("frame FLG %#x: content checksum set", out[4])
		}
		got, err := io.ReadAll(lz4.NewReader(bytes.NewReader(out)))
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("decompressed %d bytes (%v), want the %d compressed", len(got), err, len(src))
		}
	}
}
