package loader

import (
	"fmt"
	"slices"
	"testing"
)

func flatten(bs [][]Range) []int64 {
	var out []int64
	for _, b := range bs {
		for _, r := range b {
			for s := r.Start; s < r.End; s++ {
				out = append(out, s)
			}
		}
	}
	return out
}

// globalOrder interleaves every reader's batches back into the global batch
// order: batch k is rank k%world's (k/world)-th batch, served by worker
// (k/world)%workers.
func globalOrder(t *testing.T, seq []Range, size int64, world, workers int, a Assignment) ([][]Range, []int) {
	t.Helper()
	per := map[[2]int][][]Range{}
	counts := make([]int, world)
	for r := 0; r < world; r++ {
		for w := 0; w < workers; w++ {
			a.Rank, a.World, a.Worker, a.NumWorkers = r, world, w, workers
			bs, err := Batches(seq, size, a)
			if err != nil {
				t.Fatal(err)
			}
			per[[2]int{r, w}] = bs
			counts[r] += len(bs)
		}
	}
	var out [][]Range
	next := map[[2]int]int{}
	for k := 0; ; k++ {
		r := k % world
		j := k / world
		key := [2]int{r, j % workers}
		i := next[key]
		if i >= len(per[key]) {
			break
		}
		next[key]++
		out = append(out, per[key][i])
	}
	total := 0
	for _, bs := range per {
		total += len(bs)
	}
	if total != len(out) {
		t.Fatalf("interleaving used %d of %d batches: the assignment is not round robin", len(out), total)
	}
	return out, counts
}

func TestEveryRowOncePerEpoch(t *testing.T) {
	for _, n := range []int64{0, 1, 4095, 10000, 65537} {
		for _, block := range []int64{1, 1000, 4096} {
			for _, world := range []int{1, 2, 3, 4} {
				for _, workers := range []int{1, 2, 3} {
					seq := Sequence(n, block, nil, 42, 3, true)
					got, counts := globalOrder(t, seq, 512, world, workers, Assignment{Seed: 42, Epoch: 3, Shuffle: true})
					idx := flatten(got)
					if int64(len(idx)) != n {
						t.Fatalf("n=%d block=%d world=%d workers=%d: %d samples read", n, block, world, workers, len(idx))
					}
					sorted := slices.Clone(idx)
					slices.Sort(sorted)
					for i, v := range sorted {
						if v != int64(i) {
							t.Fatalf("n=%d world=%d workers=%d: sample %d missing or repeated", n, world, workers, i)
						}
					}
					if slices.Max(append(counts, 0))-slices.Min(append(counts, 1<<30)) > 1 && n > 0 {
						t.Fatalf("n=%d world=%d: ranks hold %v batches; must differ by at most one", n, world, counts)
					}
				}
			}
		}
	}
}

func TestOrderIndependentOfWorldAndWorkers(t *testing.T) {
	seq := Sequence(100_003, 4096, nil, 7, 0, true)
	ref, _ := globalOrder(t, seq, 256, 1, 1, Assignment{Seed: 7, Shuffle: true})
	for _, c := range [][2]int{{2, 1}, {4, 1}, {2, 3}, {4, 2}, {8, 4}} {
		got, _ := globalOrder(t, seq, 256, c[0], c[1], Assignment{Seed: 7, Shuffle: true})
		if fmt.Sprint(got) != fmt.Sprint(ref) {
			t.Fatalf("world %d, workers %d: global order differs from world 1", c[0], c[1])
		}
	}
}

func TestSeedAndEpoch(t *testing.T) {
	a := Sequence(50_000, 1000, nil, 1, 0, true)
	if b := Sequence(50_000, 1000, nil, 1, 0, true); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("same seed and epoch gave different orders")
	}
	if b := Sequence(50_000, 1000, nil, 1, 1, true); fmt.Sprint(a) == fmt.Sprint(b) {
		t.Fatal("epoch 1 repeats epoch 0's order")
	}
	if b := Sequence(50_000, 1000, nil, 2, 0, true); fmt.Sprint(a) == fmt.Sprint(b) {
		t.Fatal("seed 2 repeats seed 1's order")
	}
	if b := Sequence(50_000, 1000, nil, 1, 0, false); b[0].Start != 0 || b[len(b)-1].End != 50_000 || len(b) != 50 {
		t.Fatalf("shuffle off: want blocks in order, got %v...", b[:3])
	}
}

func TestResumeYieldsTheRemainder(t *testing.T) {
	seq := Sequence(30_001, 4096, nil, 9, 2, true)
	full, _ := globalOrder(t, seq, 500, 2, 2, Assignment{Seed: 9, Epoch: 2, Shuffle: true})
	all := flatten(full)
	for _, seen := range []int64{0, 500, 2000, 12_345, 30_000, 30_001, 40_000} {
		// Resume on another world size: the rest of the epoch is the same.
		got, _ := globalOrder(t, seq, 500, 4, 3, Assignment{Seed: 9, Epoch: 2, Shuffle: true, SamplesSeen: seen})
		rest := flatten(got)
		want := all[min(seen, int64(len(all))):]
		if !slices.Equal(rest, want) {
			t.Fatalf("resume after %d samples: got %d samples, want the %d remaining in order", seen, len(rest), len(want))
		}
	}
}

func TestDropLastEqualBatches(t *testing.T) {
	seq := Sequence(10_000, 1000, nil, 1, 0, true)
	for _, world := range []int{1, 3, 4, 7} {
		_, counts := globalOrder(t, seq, 256, world, 2, Assignment{Seed: 1, Shuffle: true, DropLast: true})
		for _, c := range counts {
			if c != counts[0] {
				t.Fatalf("world %d drop_last: ranks hold %v batches", world, counts)
			}
		}
		if want := int(10_000 / (256 * world) * world / world); counts[0] != want {
			t.Fatalf("world %d: %d batches per rank, want %d", world, counts[0], want)
		}
	}
}

func TestSelectionIsASubsequence(t *testing.T) {
	sel := []Range{{100, 900}, {5000, 5001}, {7000, 12000}}
	full := flatten([][]Range{Sequence(20_000, 1000, nil, 5, 1, true)})
	part := flatten([][]Range{Sequence(20_000, 1000, sel, 5, 1, true)})
	in := func(x int64) bool {
		for _, r := range sel {
			if x >= r.Start && x < r.End {
				return true
			}
		}
		return false
	}
	var want []int64
	for _, x := range full {
		if in(x) {
			want = append(want, x)
		}
	}
	if !slices.Equal(part, want) {
		t.Fatalf("selection order is not the full order restricted to the selection (%d vs %d samples)", len(part), len(want))
	}
}

func TestAssignmentErrors(t *testing.T) {
	for _, a := range []Assignment{{Rank: 2, World: 2}, {Worker: -1}, {World: 1, NumWorkers: 1, SamplesSeen: -1}} {
		if _, err := Batches(nil, 10, a); err == nil {
			t.Fatalf("%+v: want an error", a)
		}
	}
	if _, err := Batches(nil, 0, Assignment{}); err == nil {
		t.Fatal("batch size 0: want an error")
	}
}

// TestSplitMix64Reference: the generator matches Vigna's reference output
// (state 0: first value 0xe220a8397b1dcdaf).
func TestSplitMix64Reference(t *testing.T) {
	g := &SplitMix64{}
	if v := g.Next(); v != 0xe220a8397b1dcdaf {
		t.Fatalf("first value %#x", v)
	}
}

// TestPartialBlockLastKeepsBatchesAligned: with the partial block last,
// batches whose size divides the block size each lie in one block.
func TestPartialBlockLastKeepsBatchesAligned(t *testing.T) {
	seq := Sequence(10_000, 1024, nil, 3, 0, true)
	if last := seq[len(seq)-1]; last.Start != 9*1024 || last.End != 10_000 {
		t.Fatalf("last range %v, want the partial block [9216, 10000)", last)
	}
	bs, err := Batches(seq, 256, Assignment{})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bs {
		if len(b) != 1 {
			t.Fatalf("batch %d spans %d ranges: %v", i, len(b), b)
		}
	}
}
