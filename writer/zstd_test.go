package writer

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestIdleEncodersOutliveCollections: released zstd encoders are used
// again after garbage collections (a sync.Pool dropped them every other
// cycle, and a run near its memory limit collects often: each new encoder
// paid for fresh hash tables), at most zstdKept of them per level are
// kept, and an encoder used again compresses as a new one does.
func TestIdleEncodersOutliveCollections(t *testing.T) {
	const level = zstd.SpeedBestCompression // a level nothing else in the package uses
	held := make([]*zstd.Encoder, zstdKept+3)
	for i := range held {
		held[i] = encoder(level)
	}
	for _, e := range held {
		release(level, e)
	}
	runtime.GC()
	runtime.GC()
	runtime.GC()
	seen := map[*zstd.Encoder]bool{}
	for _, e := range held {
		seen[e] = true
	}
	again := make([]*zstd.Encoder, zstdKept+1)
	reused := 0
	for i := range again {
		again[i] = encoder(level)
		if seen[again[i]] {
			reused++
		}
	}
	if reused != zstdKept {
		t.Fatalf("after three collections %d of %d idle encoders were used again, want %d (kept per level)", reused, len(held), zstdKept)
	}
	src := bytes.Repeat([]byte("a page of column values, "), 400)
	fresh, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithZeroFrames(true), zstd.WithAllLitEntropyCompression(true), zstd.WithWindowSize(zstdWindow),
		zstd.WithLowerEncoderMem(true))
	want := fresh.EncodeAll(src, nil)
	for _, e := range again {
		if got := e.EncodeAll(src, nil); !bytes.Equal(got, want) {
			t.Fatal("an encoder used again compressed otherwise than a new one")
		}
		release(level, e)
	}
}
