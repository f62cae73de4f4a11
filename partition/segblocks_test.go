package partition

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

// TestSegmentBlocksServeEachSegment reads a task's adjacent segments of
// two objects through SegmentBlocks, concurrently and out of order, some
// twice, and compares every read with the object's bytes at the range
// (read independently, with os.ReadFile); a segment past the object's end
// is bad input, as read alone.
func TestSegmentBlocksServeEachSegment(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	work, err := storage.OpenDir(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var segs []Segment
	for _, name := range []string{"a.arrows", "b.arrows"} {
		var data []byte
		for u := 0; u < 40; u++ {
			n := rng.IntN(3000) // some empty
			segs = append(segs, Segment{Unit: u, Offset: int64(len(data)), Length: int64(n), Path: name})
			for range n {
				data = append(data, byte(rng.Uint32()))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := func(s Segment) []byte {
		b, err := os.ReadFile(filepath.Join(dir, s.Path))
		if err != nil {
			t.Fatal(err)
		}
		return b[s.Offset : s.Offset+s.Length]
	}
	// Blocks of about 10 KB per object: several per object.
	b := NewSegmentBlocks(work, segs, 20_000)
	order := rng.Perm(len(segs))
	order = append(order, order[:10]...) // ten read twice
	var wg sync.WaitGroup
	errc := make(chan error, len(order))
	got := make([][]byte, len(order))
	for k, i := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			data, err := b.get(ctx, segs[i])
			got[k] = data
			errc <- err
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	for k, i := range order {
		if !bytes.Equal(got[k], want(segs[i])) {
			t.Fatalf("segment %d of %s (read %d): %d bytes differ from the object's range", segs[i].Unit, segs[i].Path, k, len(got[k]))
		}
	}
	// 80 segments of about 1.5 KB in 10 KB blocks, and ten read again.
	if n := b.reads.Load(); n > 40 {
		t.Errorf("%d reads for %d segment requests: want them read by blocks", n, len(order))
	}
	t.Logf("%d reads for %d segment requests", b.reads.Load(), len(order))
	for _, o := range b.objs {
		if len(o.held) != 0 {
			t.Errorf("%d segments held after every one was read", len(o.held))
		}
	}
	// A block running past the object's end: the segment's own read
	// reports it.
	last := segs[len(segs)-1]
	past := Segment{Unit: 99, Offset: last.Offset + last.Length, Length: 100, Path: last.Path}
	b = NewSegmentBlocks(work, []Segment{segs[len(segs)-2], last, past}, 1<<20)
	if _, err := b.get(ctx, past); !errs.Is(err, errs.BadInput) {
		t.Errorf("a segment past the object's end: %v (class %v), want bad input", err, errs.ClassOf(err))
	}
}
