package writer

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// TestIdleEncodersOutliveCollections: with KeepIdleEncoders(n), n released
// zstd encoders per level are used again after garbage collections (a
// sync.Pool drops them every other cycle, and a run near its memory limit
// collects often: each new encoder paid for fresh hash tables), no more
// than n are kept, lowering n releases the rest, and an encoder used again
// compresses as a new one does.
func TestIdleEncodersOutliveCollections(t *testing.T) {
	const level = zstd.SpeedBestCompression // a level nothing else in the package uses
	const keep = 3
	prev := KeepIdleEncoders(keep)
	defer KeepIdleEncoders(prev)
	cycle := func(n int) (reused int, again []*zstd.Encoder) {
		held := make([]*zstd.Encoder, n)
		seen := map[*zstd.Encoder]bool{}
		for i := range held {
			held[i] = encoder(level)
			seen[held[i]] = true
		}
		for _, e := range held {
			release(level, e)
		}
		runtime.GC()
		runtime.GC()
		runtime.GC()
		again = make([]*zstd.Encoder, n)
		for i := range again {
			if again[i] = encoder(level); seen[again[i]] {
				reused++
			}
		}
		return reused, again
	}
	reused, again := cycle(keep + 2)
	if reused != keep {
		t.Fatalf("after three collections %d of %d idle encoders were used again, want %d (kept)", reused, keep+2, keep)
	}
	src := bytes.Repeat([]byte("a page of column values, "), 400)
	want := newEncoder(level).EncodeAll(src, nil)
	for _, e := range again {
		if got := e.EncodeAll(src, nil); !bytes.Equal(got, want) {
			t.Fatal("an encoder used again compressed otherwise than a new one")
		}
		release(level, e)
	}
	KeepIdleEncoders(1)
	n := 0
	for {
		if _, ok := idle[level].Get(); !ok {
			break
		}
		n++
	}
	if n != 1 {
		t.Fatalf("KeepIdleEncoders(1) left %d idle encoders kept", n)
	}
	KeepIdleEncoders(0)
	if reused, _ := cycle(2); reused != 0 {
		t.Fatalf("with none kept, %d encoders outlived three collections (a sync.Pool's)", reused)
	}
}

// TestZstdFramesCarryNoChecksum: the pages relayout writes are zstd frames
// without a content checksum (the page header's CRC32 and the manifest's
// xxhash64 cover them), which any zstd reader (arrow-go's, here) decodes.
func TestZstdFramesCarryNoChecksum(t *testing.T) {
	codec, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range [][]byte{[]byte("a"), bytes.Repeat([]byte("page of values "), 100), make([]byte, 300<<10)} {
		frame := codec.EncodeLevel(nil, src, compress.DefaultCompressionLevel)
		if len(frame) < 5 || !bytes.Equal(frame[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Fatalf("%d bytes: not a zstd frame: % x", len(src), frame[:min(len(frame), 8)])
		}
		// The frame header descriptor's bit 2 is Content_Checksum_flag.
		if frame[4]&0x04 != 0 {
			t.Errorf("%d bytes: the frame carries a content checksum (descriptor %08b)", len(src), frame[4])
		}
		got := codec.Decode(make([]byte, len(src)), frame)
		if !bytes.Equal(got, src) {
			t.Errorf("%d bytes: decoded %d bytes that differ", len(src), len(got))
		}
	}
}
