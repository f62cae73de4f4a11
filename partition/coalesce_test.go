package partition

import (
	"context"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestRuns(t *testing.T) {
	for _, c := range []struct {
		rows  []int64
		limit int64
		want  []int
	}{
		{nil, 100, []int{0}},
		{[]int64{20, 20, 20, 20, 20}, 50, []int{0, 3, 5}},            // joined until a run reaches 50
		{[]int64{20, 20, 20, 20, 20}, 1000, []int{0, 5}},             // all in one
		{[]int64{20, 9000, 20, 20}, 1000, []int{0, 1, 2, 4}},         // a large row group stays alone
		{[]int64{9000, 10000, 20}, 1000, []int{0, 1, 2, 3}},          // large ones are never joined
		{[]int64{8191, 1, 5000}, 100_000, []int{0, 3}},               // all under SmallRows
		{[]int64{100, 100, 100}, 1, []int{0, 1, 2, 3}},               // a tiny limit joins nothing
		{[]int64{0, 0, 30, 0}, 30, []int{0, 3, 4}},                   // empty row groups join too
		{[]int64{SmallRows, SmallRows - 1}, 1 << 20, []int{0, 1, 2}}, // SmallRows itself is not small
	} {
		if got := Runs(c.rows, c.limit, nil); !slices.Equal(got, c.want) {
			t.Errorf("Runs(%v, %d) = %v, want %v", c.rows, c.limit, got, c.want)
		}
	}
	// A batch that may not join the one before starts a run.
	gap := func(i int) bool { return i != 2 }
	if got := Runs([]int64{20, 20, 20, 20}, 1000, gap); !slices.Equal(got, []int{0, 2, 4}) {
		t.Errorf("Runs with batch 2 not following batch 1 = %v, want [0 2 4]", got)
	}
}

// TestCoalesce joins pieces of a batch of every column type the shuffle
// codec's tests use and checks each result against arrow's slice of the
// original (rows, order, values and nulls), that the pieces it did not
// join come back as they were, and that the joined batches' memory is
// released with them.
func TestCoalesce(t *testing.T) {
	const n = 10_000
	in := codecBatch(t, n, 7, false)
	defer in.Release()
	sizes := []int64{7, 13, 100, 1, 9000, 50, 829}
	var pieces []arrow.RecordBatch
	var off int64
	for _, s := range sizes {
		pieces = append(pieces, in.NewSlice(off, off+s))
		off += s
	}
	big := pieces[4]
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	out, err := Coalesce(context.Background(), pieces, 120, 2, mem)
	if err != nil {
		t.Fatal(err)
	}
	// Runs: [7 13 100] reaches 120; [1] ends at the large piece; [9000]
	// alone; [50 829].
	var got []int64
	for _, r := range out {
		got = append(got, r.NumRows())
	}
	if !slices.Equal(got, []int64{120, 1, 9000, 879}) {
		t.Fatalf("batches of %v rows, want [120 1 9000 879]", got)
	}
	if out[2] != big {
		t.Fatal("the large piece was copied; it should be returned as it was")
	}
	off = 0
	for k, r := range out {
		want := in.NewSlice(off, off+r.NumRows())
		if !array.RecordEqual(r, want) {
			t.Fatalf("batch %d (rows %d to %d) differs from the input's rows", k, off, off+r.NumRows())
		}
		want.Release()
		off += r.NumRows()
	}
	if off != n {
		t.Fatalf("%d rows out of %d", off, n)
	}
	for _, r := range out {
		r.Release()
	}
	mem.AssertSize(t, 0)
}

// TestCoalesceNothingSmall: batches at or above SmallRows are returned as
// they are, without a copy.
func TestCoalesceNothingSmall(t *testing.T) {
	in := codecBatch(t, 2*SmallRows, 3, false)
	defer in.Release()
	pieces := []arrow.RecordBatch{in.NewSlice(0, SmallRows), in.NewSlice(SmallRows, 2*SmallRows)}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	out, err := Coalesce(context.Background(), pieces, CoalesceRows, 2, mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != pieces[0] || out[1] != pieces[1] {
		t.Fatalf("%d batches; want the two pieces as they were", len(out))
	}
	mem.AssertSize(t, 0)
	for _, r := range out {
		r.Release()
	}
}
