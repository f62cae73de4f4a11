package writer

import (
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"

	"github.com/relayout/relayout/internal/par"
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

// Idle encoders, per level. Up to KeepIdleEncoders of them are kept on a
// par.FreeList; the rest go to a sync.Pool, which the collector empties every
// other cycle. A run near its --memory-limit collects often, and pooled
// encoders kept being dropped and made again, each with fresh hash tables
// whose first touches were page faults: zstd took 1.74 CPU-s of a spilling
// 1,200-file Hive run at --memory-limit 1GiB against 1.0 in memory (that
// run: 9.5-10.2 s before, 8.1-9.2 s with them kept). An idle encoder holds
// about 2.5 MiB (after 1 MiB pages, at the default level), so a run keeps
// them only where its limit has room (pipeline.Run: one per 256 MiB).
var (
	idleKeep  atomic.Int64
	idle      [zstd.SpeedBestCompression + 1]par.FreeList[*zstd.Encoder] // by level
	zstdPools sync.Map                                                   // zstd.EncoderLevel -> *sync.Pool
)

// KeepIdleEncoders sets how many idle zstd encoders per level are kept
// through garbage collections (0, the default: none, all pooled) and
// returns the previous setting. Those beyond n are released.
func KeepIdleEncoders(n int) int {
	n = max(n, 0)
	prev := idleKeep.Swap(int64(n))
	for i := range idle {
		idle[i].Trim(n)
	}
	return int(prev)
}

func pool(level zstd.EncoderLevel) *sync.Pool {
	if p, ok := zstdPools.Load(level); ok {
		return p.(*sync.Pool)
	}
	p, _ := zstdPools.LoadOrStore(level, &sync.Pool{New: func() any { return newEncoder(level) }})
	return p.(*sync.Pool)
}

// newEncoder makes an encoder of the codec's settings. Its frames carry no
// content checksum: every page header carries a CRC32 of the page as stored
// (pagecrc.go), and every file an xxhash64 in the manifest, so the frame's
// own 4 bytes checked nothing more. A Hive output of 1,200 folders has about
// 70,000 pages, most under 200 bytes: 53.26 -> 52.97 MB without them.
func newEncoder(level zstd.EncoderLevel) *zstd.Encoder {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithZeroFrames(true), zstd.WithAllLitEntropyCompression(true), zstd.WithWindowSize(zstdWindow),
		zstd.WithLowerEncoderMem(true), zstd.WithEncoderCRC(false))
	return enc
}

func encoder(level zstd.EncoderLevel) *zstd.Encoder {
	if int(level) < len(idle) {
		if enc, ok := idle[level].Get(); ok {
			return enc
		}
	}
	return pool(level).Get().(*zstd.Encoder)
}

func release(level zstd.EncoderLevel, enc *zstd.Encoder) {
	if int(level) < len(idle) && idle[level].PutUpTo(enc, int(idleKeep.Load())) {
		return
	}
	pool(level).Put(enc)
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
