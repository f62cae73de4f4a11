package writer

import (
	"bytes"
	"runtime"
	"testing"

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
