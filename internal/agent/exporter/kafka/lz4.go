package kafka

import (
	"bytes"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lz4Compressor is franz-go's lz4 compression (the lz4 frame format, its
// fastest level) without the frame's content checksum: an xxh32 pass over
// every produce batch, about a fifth of lz4's CPU here, that Kafka does
// not need (each record batch has its own CRC-32C, checked by the broker)
// and that Kafka's own Java producer does not write either. Consumers
// (franz-go, the Java client, librdkafka) read frames with or without it.
type lz4Compressor struct{ pool sync.Pool }

func newLz4Compressor() *lz4Compressor {
	return &lz4Compressor{pool: sync.Pool{New: func() any {
		w := lz4.NewWriter(nil)
		_ = w.Apply(lz4.ChecksumOption(false)) // a valid option: no error
		return w
	}}}
}

// Compress implements kgo.Compressor: src compressed into dst.
func (c *lz4Compressor) Compress(dst *bytes.Buffer, src []byte, _ ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	w := c.pool.Get().(*lz4.Writer)
	defer c.pool.Put(w)
	w.Reset(dst)
	if _, err := w.Write(src); err != nil {
		return nil, kgo.CodecError
	}
	if err := w.Close(); err != nil {
		return nil, kgo.CodecError
	}
	return dst.Bytes(), kgo.CodecLz4
}
