package writer

import (
	"runtime"
	"sync"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// arrow-go's zstd codec pools encoders with zstd's default window (8 MiB at
// the default level), and each concurrent compressor holds one: tens of MiB
// of history for pages that are at most a few MiB. relayout registers a
// codec that encodes with a window of zstdWindow bytes and decodes with
// arrow-go's codec unchanged. The window is the default page size (data
// pages target --page-bytes, 1 MiB by default; dictionary pages are capped
// at 1 MiB): an encoder's history is the window and one 128 KiB block.
// A 4 MiB window held 8.4 MB of history for the two encoders of a 2-core
// run at --memory-limit 128MiB, and made the 1M-row flat output 34 bytes
// smaller (of 48.8 MB); larger pages (--page-bytes) still compress, with
// matches up to 1 MiB back.
const zstdWindow = 1 << 20

type smallWindowZstd struct {
	compress.Codec // arrow-go's codec: decoding, streams, bounds
}

// zstdFree keeps idle encoders per level (zstd.EncoderLevel -> chan):
// not a sync.Pool, which the collector empties every other cycle. A run
// near its --memory-limit collects often, so pooled encoders kept being
// dropped and made again, each with fresh hash tables whose first touches
// were page faults: zstd took 1.74 CPU-s of a spilling 1,200-file Hive
// run against 1.0 in memory (that run: 9.5-10.2 s before, 8.1-9.2 s
// after).
var zstdFree sync.Map

// zstdKept bounds the idle encoders kept per level: one per core, as many
// as compress at once. Twice that added 12 MB to the peak RSS of a flat
// run at --memory-limit 128MiB; one per core adds about 2 MB.
var zstdKept = runtime.GOMAXPROCS(0)

func encoder(level zstd.EncoderLevel) *zstd.Encoder {
	c, _ := zstdFree.LoadOrStore(level, make(chan *zstd.Encoder, zstdKept))
	select {
	case enc := <-c.(chan *zstd.Encoder):
		return enc
	default:
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithZeroFrames(true), zstd.WithAllLitEntropyCompression(true), zstd.WithWindowSize(zstdWindow),
		zstd.WithLowerEncoderMem(true))
	return enc
}

func release(level zstd.EncoderLevel, enc *zstd.Encoder) {
	c, _ := zstdFree.Load(level)
	select {
	case c.(chan *zstd.Encoder) <- enc:
	default: // enough kept
	}
}

func (z smallWindowZstd) Encode(dst, src []byte) []byte {
	return z.EncodeLevel(dst, src, compress.DefaultCompressionLevel)
}

func (z smallWindowZstd) EncodeLevel(dst, src []byte, level int) []byte {
	l := zstd.EncoderLevelFromZstd(level)
	if level == compress.DefaultCompressionLevel {
		l = zstd.SpeedDefault
	}
	enc := encoder(l)
	defer release(l, enc)
	return enc.EncodeAll(src, dst[:0])
}

func init() {
	base, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		panic(err)
	}
	compress.RegisterCodec(compress.Codecs.Zstd, smallWindowZstd{base})
}
