package loader

import (
	"math"
	"slices"
	"testing"
)

func plan2(n, block, batch, window int64, streams int) WindowPlan {
	return WindowPlan{Samples: n, BlockSamples: block, Batch: batch, Window: window, Streams: streams, Seed: 11, Epoch: 3}
}

// readerSamples returns the global sample indices reader a yields, batch
// by batch, and the pieces it reads.
func readerSamples(t *testing.T, p WindowPlan, a Assignment) ([][]int64, []Piece) {
	t.Helper()
	bs, own, err := p.ReaderBatches(a)
	if err != nil {
		t.Fatal(err)
	}
	wins := map[int][]Window{}
	var read []Piece
	for _, st := range own {
		wins[st.Index] = p.Windows(st)
		for _, w := range wins[st.Index] {
			read = append(read, w.Pieces...)
		}
	}
	var out [][]int64
	for _, b := range bs {
		w := wins[b.Stream][b.Window]
		pos := positions(w.Pieces)
		var s []int64
		for _, q := range BatchPositions(w.Perm, b) {
			s = append(s, pos[q])
		}
		out = append(out, s)
	}
	return out, read
}

// interleave rebuilds the global order from every reader's batches: global
// batch k is rank k%world's (k/world)-th batch, from worker (k/world)%nw.
func interleave(t *testing.T, p WindowPlan, world, nw int, a Assignment) ([]int64, []int, [][]Piece) {
	t.Helper()
	per := map[[2]int][][]int64{}
	counts := make([]int, world)
	var reads [][]Piece
	for r := 0; r < world; r++ {
		for w := 0; w < nw; w++ {
			a.Rank, a.World, a.Worker, a.NumWorkers = r, world, w, nw
			bs, read := readerSamples(t, p, a)
			per[[2]int{r, w}] = bs
			counts[r] += len(bs)
			reads = append(reads, read)
		}
	}
	var out []int64
	next := map[[2]int]int{}
	for k := int(a.SamplesSeen / p.Batch); ; k++ {
		key := [2]int{k % world, (k / world) % nw}
		i := next[key]
		if i >= len(per[key]) {
			break
		}
		next[key]++
		out = append(out, per[key][i]...)
	}
	return out, counts, reads
}

// TestWindowEveryRowOnceAndBalanced: over 2 ranks x 2 workers and 4 ranks
// x 1 worker, every sample comes once per epoch, ranks hold the same
// number of batches to within one, and no two readers read the same
// sample's bytes.
func TestWindowEveryRowOnceAndBalanced(t *testing.T) {
	for _, c := range []struct {
		n, block, batch, window int64
		world, nw               int
	}{
		{10_000, 100, 64, 1024, 2, 2}, {10_000, 100, 64, 1024, 4, 1}, {9_999, 128, 100, 700, 3, 1}, {50, 1000, 7, 7, 2, 2},
	} {
		p := plan2(c.n, c.block, c.batch, c.window, c.world*c.nw)
		got, counts, reads := interleave(t, p, c.world, c.nw, Assignment{Seed: p.Seed, Epoch: p.Epoch})
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		for i, s := range sorted {
			if s != int64(i) || len(sorted) != int(c.n) {
				t.Fatalf("%+v: samples are not 0..%d once each (at %d: %d, %d in all)", c, c.n-1, i, s, len(sorted))
			}
		}
		if slices.Max(counts)-slices.Min(counts) > 1 {
			t.Fatalf("%+v: batches per rank %v", c, counts)
		}
		seen := make([]int, c.n)
		for _, rs := range reads {
			for _, pc := range rs {
				for s := pc.Start; s < pc.End; s++ {
					seen[s]++
				}
			}
		}
		for s, k := range seen {
			if k != 1 {
				t.Fatalf("%+v: sample %d read by %d readers", c, s, k)
			}
		}
		if g, _ := p.GlobalOrder(); !slices.Equal(g, got) {
			t.Fatalf("%+v: the readers' interleaving differs from GlobalOrder", c)
		}
	}
}

// TestWindowElasticWorldSizes: with Streams fixed, every (world,
// num_workers) whose product divides it yields the same global order; a
// product that does not divide it is refused.
func TestWindowElasticWorldSizes(t *testing.T) {
	p := plan2(20_000, 250, 128, 2048, 8)
	want, err := p.GlobalOrder()
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range [][2]int{{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {8, 1}, {2, 4}, {1, 8}} {
		got, _, _ := interleave(t, p, ws[0], ws[1], Assignment{Seed: p.Seed, Epoch: p.Epoch})
		if !slices.Equal(got, want) {
			t.Fatalf("world %d x %d workers: another global order", ws[0], ws[1])
		}
	}
	if _, _, err := p.ReaderBatches(Assignment{World: 3, NumWorkers: 1}); err == nil {
		t.Fatal("world 3 with 8 streams: no error")
	}
	// Another epoch or seed, another order; the same, the same.
	q := p
	q.Epoch++
	if o, _ := q.GlobalOrder(); slices.Equal(o, want) {
		t.Fatal("epoch 4 repeats epoch 3's order")
	}
	if o, _ := p.GlobalOrder(); !slices.Equal(o, want) {
		t.Fatal("the same plan gave another order")
	}
}

// TestWindowResume: resumed after s samples (a batch boundary) on another
// world size, the readers yield exactly the rest of the global order.
func TestWindowResume(t *testing.T) {
	p := plan2(7_000, 100, 50, 500, 4)
	all, _ := p.GlobalOrder()
	for _, seen := range []int64{0, 50, 1000, 6950, 7000} {
		got, _, _ := interleave(t, p, 2, 2, Assignment{Seed: p.Seed, Epoch: p.Epoch, SamplesSeen: seen})
		if !slices.Equal(got, all[seen:]) {
			t.Fatalf("resumed at %d: %d samples, want the %d left", seen, len(got), len(all)-int(seen))
		}
	}
	if _, _, err := p.ReaderBatches(Assignment{SamplesSeen: 75, World: 2, NumWorkers: 2}); err == nil {
		t.Fatal("resume inside a batch: no error")
	}
}

// TestWindowMixes: with blocks holding one "slice" each, a batch draws
// from many slices (a plain block order gives one).
func TestWindowMixes(t *testing.T) {
	p := plan2(40_000, 1000, 500, 40_000, 1) // 40 blocks = 40 slices
	order, _ := p.GlobalOrder()
	var distinct float64
	for b := 0; b < len(order)/500; b++ {
		seen := map[int64]bool{}
		for _, s := range order[b*500 : (b+1)*500] {
			seen[s/1000] = true
		}
		distinct += float64(len(seen))
	}
	distinct /= float64(len(order) / 500)
	// A uniform draw of 500 of 40 equal classes sees 40*(1-(39/40)^500) = 40.
	if distinct < 0.9*40 {
		t.Fatalf("%.1f distinct slices per batch, want about 40", distinct)
	}
}

// TestWindowWeights: each slice's share of the epoch is its weight's to
// within 2%, down-weighted slices read only the blocks they sample, and
// up-weighted ones repeat.
func TestWindowWeights(t *testing.T) {
	p := plan2(30_000, 100, 64, 4096, 2)
	w := []float64{1, 5, 0.2}
	for i, x := range w {
		p.Weights = append(p.Weights, SliceWeight{Range{int64(i) * 10_000, int64(i+1) * 10_000}, x})
	}
	got, _, reads := interleave(t, p, 2, 1, Assignment{Seed: p.Seed, Epoch: p.Epoch})
	count := make([]float64, 3)
	for _, s := range got {
		count[s/10_000]++
	}
	for i := range w {
		want := w[i] / 6.2
		if f := count[i] / float64(len(got)); math.Abs(f-want) > 0.02*want {
			t.Errorf("slice %d: %.4f of the epoch, weight says %.4f", i, f, want)
		}
	}
	var read int64
	for _, rs := range reads {
		for _, pc := range rs {
			if pc.Start >= 20_000 {
				read += pc.Len()
			}
		}
	}
	if read != int64(count[2]) {
		t.Errorf("the down-weighted slice: %d samples read for %v sampled", read, count[2])
	}
}
