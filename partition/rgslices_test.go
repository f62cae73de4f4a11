package partition

import (
	"context"
	"runtime"
	"slices"
	"testing"

	"github.com/relayout/relayout/internal/gen"
)

// TestKeyPassRecordsPerRowGroup checks what the key pass records of each
// row group (BuildExtra.RowGroups) against a plain count of the row
// group's rows by slice, and that the records are compact: on an unsorted
// table every row group holds most slices, and the key pass keeps these
// records for every row group of the table at once.
func TestKeyPassRecordsPerRowGroup(t *testing.T) {
	// 1,200 slices (40 countries x 30 days); row groups of 32,768 rows
	// hold most of them.
	tbl, col := openEvents(t, gen.Options{Rows: 600_000, Files: 2, Seed: 3, RowGroupRows: 32768})
	ctx := context.Background()
	sliceCols := []int{col("country"), col("date")}
	h, ex, err := BuildWith(ctx, tbl, sliceCols, BuildOptions{Vectors: true, Counts: true}, 2)
	if err != nil {
		t.Fatal(err)
	}
	refs := tbl.RowGroups()
	if len(ex.RowGroups) != len(refs) {
		t.Fatalf("%d row groups recorded, the table has %d", len(ex.RowGroups), len(refs))
	}
	entries := 0
	for i, ref := range refs {
		// The oracle: each row's slice rank, counted and placed in its
		// vector, row by row.
		rec, err := tbl.Read(ctx, ref, sliceCols, 1)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[int32]int64{}
		vecs := map[int32][]uint64{}
		words := (int(rec.NumRows())/VectorRows + 64) / 64
		var key []byte
		for r := 0; r < int(rec.NumRows()); r++ {
			key = key[:0]
			for c := range sliceCols {
				key = AppendKey(key, rec.Column(c), r)
			}
			rk, ok := h.Rank(key)
			if !ok {
				t.Fatalf("row group %d row %d: key not in the histogram", i, r)
			}
			counts[rk]++
			if vecs[rk] == nil {
				vecs[rk] = make([]uint64, words)
			}
			v := r / VectorRows
			vecs[rk][v/64] |= 1 << (v % 64)
		}
		rec.Release()
		got := ex.RowGroups[i]
		if !slices.IsSorted(got.IDs) || len(got.IDs) != len(counts) {
			t.Fatalf("row group %d: %d slices recorded (sorted: %v), %d hold rows", i, len(got.IDs), slices.IsSorted(got.IDs), len(counts))
		}
		entries += len(got.IDs)
		for rk := int32(-1); rk <= int32(len(h.Slices)); rk++ {
			if got.Count(rk) != counts[rk] {
				t.Fatalf("row group %d slice %d: %d rows recorded, %d counted", i, rk, got.Count(rk), counts[rk])
			}
			v, ok := got.Vectors(rk)
			if ok != (vecs[rk] != nil) || !slices.Equal(v, vecs[rk]) {
				t.Fatalf("row group %d slice %d: vectors %v (%v), want %v", i, rk, v, ok, vecs[rk])
			}
		}
	}
	if entries < len(refs)*len(h.Slices)/2 {
		t.Fatalf("%d (row group, slice) entries for %d row groups and %d slices: the table is too sorted to test this", entries, len(refs), len(h.Slices))
	}
	// The records' bytes: the heap with them, then without (two
	// collections each, which empty the allocator's sync.Pools).
	runtime.GC()
	runtime.GC()
	var with, without runtime.MemStats
	runtime.ReadMemStats(&with)
	ex.RowGroups = nil
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&without)
	// IDs 4 bytes, rows 8, one bitset word 8, and slack: a map per row
	// group (the representation before) took about 100.
	held := int64(with.HeapAlloc) - int64(without.HeapAlloc)
	if per := float64(held) / float64(entries); per > 32 {
		t.Errorf("the key pass holds %d bytes for %d (row group, slice) entries: %.1f each, want at most 32", held, entries, per)
	}
	t.Logf("%d row groups, %d slices, %d entries: %d bytes held, %.1f each", len(refs), len(h.Slices), entries, held, float64(held)/float64(entries))
	runtime.KeepAlive(h)
}

// TestRowGroupSlicesAddVectors checks the builder the report's models use:
// ids ascending, a repeated last id merged.
func TestRowGroupSlicesAddVectors(t *testing.T) {
	r := &RowGroupSlices{}
	if _, ok := r.Vectors(0); ok {
		t.Fatal("an empty record has vectors")
	}
	r.AddVectors(2, []uint64{1, 0})
	r.AddVectors(5, []uint64{2, 0})
	r.AddVectors(5, []uint64{0, 4})
	if v, ok := r.Vectors(5); !ok || !slices.Equal(v, []uint64{2, 4}) {
		t.Fatalf("slice 5: %v %v, want [2 4]", v, ok)
	}
	if v, ok := r.Vectors(2); !ok || !slices.Equal(v, []uint64{1, 0}) {
		t.Fatalf("slice 2: %v %v", v, ok)
	}
	if _, ok := r.Vectors(3); ok {
		t.Fatal("slice 3 has no rows but vectors")
	}
	if r.Count(2) != 0 {
		t.Fatal("counts were never recorded")
	}
	var nilRec *RowGroupSlices
	if _, ok := nilRec.Vectors(2); ok || nilRec.Count(2) != 0 {
		t.Fatal("a nil record answers")
	}
}
