package partition

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

func TestBinsOnlyForSmallPieces(t *testing.T) {
	units := func(n int, rows int64) []Unit {
		out := make([]Unit, n)
		for i := range out {
			out[i] = Unit{Start: int64(i) * rows, Rows: rows}
		}
		return out
	}
	// 1M rows, 42 units, 16 row groups: pieces of 1,488 rows, one pass.
	if b := Bins(units(42, 23_810), 16); b != nil {
		t.Fatalf("pieces of about 1,500 rows got %d bins", len(b))
	}
	// 16M rows, 791 units, 256 row groups: pieces of 79 rows.
	b := Bins(units(791, 20_228), 256)
	if b == nil {
		t.Fatal("pieces of 79 rows: no bins")
	}
	if b[0] != 0 || b[len(b)-1] != 28 {
		t.Fatalf("791 units: bins %d to %d, want 0 to 28 (√791 bins)", b[0], b[len(b)-1])
	}
	if NumBins(b) != 29 || NumBins(nil) != 0 {
		t.Fatalf("NumBins = %d and %d for nil, want 29 and 0", NumBins(b), NumBins(nil))
	}
	count := map[int]int{}
	for i := 1; i < len(b); i++ {
		if b[i] != b[i-1] && b[i] != b[i-1]+1 {
			t.Fatalf("bins are not runs of consecutive units: unit %d in bin %d after bin %d", i, b[i], b[i-1])
		}
	}
	for _, x := range b {
		count[x]++
	}
	for x, n := range count {
		if n < 26 || n > 29 {
			t.Fatalf("bin %d holds %d units of equal size, want about 791/29", x, n)
		}
	}
}

// TestRebinEqualsOnePass routes a batch through both passes of a two-pass
// shuffle, two map tasks over three row groups each, and checks that each
// unit receives exactly its rows, in input order, as arrow's Take of the
// input gives them.
func TestRebinEqualsOnePass(t *testing.T) {
	ctx := context.Background()
	const n, nunits = 6000, 10
	in := codecBatch(t, n, 5, false)
	defer in.Release()
	r := rand.New(rand.NewSource(3))
	unitOf := make([]int, n)
	for i := range unitOf {
		unitOf[i] = r.Intn(nunits)
	}
	bins := []int{0, 0, 0, 0, 1, 1, 1, 2, 2, 2}
	dir := t.TempDir()
	work, err := storage.OpenDir(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	var segs [3][]Segment // by bin, in map order
	for m := 0; m < 2; m++ {
		sw, err := NewShuffleWriter(work, "map/m-"+string(rune('0'+m))+"/", "", false)
		if err != nil {
			t.Fatal(err)
		}
		for g := 0; g < 3; g++ { // the map's row groups, 1,000 rows each
			lo := (m*3 + g) * 1000
			rg := in.NewSlice(int64(lo), int64(lo+1000))
			src, err := NewUnitRows(in.Schema(), []arrow.RecordBatch{rg})
			if err != nil {
				t.Fatal(err)
			}
			for b := 0; b < 3; b++ {
				var idx []int64
				var us []int32
				for i := 0; i < 1000; i++ {
					if u := unitOf[lo+i]; bins[u] == b {
						idx, us = append(idx, int64(i)), append(us, int32(u))
					}
				}
				part, err := src.Take(ctx, in.Schema(), idx)
				if err != nil {
					t.Fatal(err)
				}
				part = withUnits(BinSchema(part.Schema()), part, us)
				if err := sw.Write(b, part); err != nil {
					t.Fatal(err)
				}
				part.Release()
			}
			src.Release()
		}
		out, err := sw.Publish(ctx, []int{0, 0, 0})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range out {
			segs[s.Unit] = append(segs[s.Unit], s)
		}
	}
	// A first-pass file cut short is bad input naming the file, not a
	// panic or a retry; the other bins are read below, whole.
	cut := segs[2][1]
	name := filepath.Join(dir, filepath.FromSlash(cut.Path))
	whole, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, whole[:len(whole)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Rebin(ctx, work, segs[2], in.Schema(), 700, 2, func(u int, part arrow.RecordBatch) error { return nil })
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), cut.Path) {
		t.Fatalf("a first-pass file cut short: %v, want bad input naming %s", err, cut.Path)
	}
	if err := os.WriteFile(name, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int][]arrow.RecordBatch{}
	for b := 0; b < 3; b++ {
		// 700 rows at a time: several batches per bin, cut mid-segment.
		rows, err := Rebin(ctx, work, segs[b], in.Schema(), 700, 2, func(u int, part arrow.RecordBatch) error {
			if bins[u] != b {
				t.Errorf("bin %d emitted unit %d", b, u)
			}
			part.Retain()
			mu.Lock()
			got[u] = append(got[u], part)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for _, s := range segs[b] {
			want += s.Rows
		}
		if rows != want || want == 0 {
			t.Fatalf("bin %d: rebinned %d rows, the first pass wrote %d", b, rows, want)
		}
	}
	for u := 0; u < nunits; u++ {
		var idx []int64
		for i, x := range unitOf {
			if x == u {
				idx = append(idx, int64(i))
			}
		}
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues(idx, nil)
		ind := b.NewInt64Array()
		b.Release()
		want, err := compute.TakeArray(ctx, array.RecordToStructArray(in), ind)
		ind.Release()
		if err != nil {
			t.Fatal(err)
		}
		var chunks []arrow.Array
		for _, p := range got[u] {
			if p.Schema().NumFields() != in.Schema().NumFields() {
				t.Fatalf("unit %d: %d columns, want %d (no unit column)", u, p.Schema().NumFields(), in.Schema().NumFields())
			}
			chunks = append(chunks, array.RecordToStructArray(p))
		}
		gotArr, err := array.Concatenate(chunks, memory.DefaultAllocator)
		if err != nil {
			t.Fatal(err)
		}
		if !array.Equal(gotArr, want) {
			t.Fatalf("unit %d: rows differ from the input's (%d rows, want %d)", u, gotArr.Len(), want.Len())
		}
		gotArr.Release()
		want.Release()
		for _, c := range chunks {
			c.Release()
		}
		for _, p := range got[u] {
			p.Release()
		}
	}
}
