package loader

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Order names for Assignment.Order.
const (
	// OrderWindow is relayout-order-v2 (docs/loader.md): blocks dealt to
	// streams, samples permuted inside windows of many blocks. The default
	// when shuffling.
	OrderWindow = "window"
	// OrderBlock is relayout-order-v1: blocks shuffled, each read in order.
	OrderBlock = "block"
	// OrderNone is the output order (v1 without shuffling).
	OrderNone = "none"
)

// DefaultWindowBytes is the tensor bytes a v2 reader holds per stream.
const DefaultWindowBytes = 256 << 20

// Piece is a range of samples read together: a canonical block, or the
// part of one a selection, a weight or a stream boundary keeps.
type Piece = Range

// WindowPlan is relayout-order-v2's parameters for one epoch, fixed by the
// manifest and the job, not by the reader.
type WindowPlan struct {
	// Samples is N, the samples in output order; BlockSamples the
	// manifest's canonical block size.
	Samples, BlockSamples int64
	// Selection restricts the epoch to these sorted, disjoint ranges (nil:
	// everything).
	Selection []Range
	// Weights, when set, are (slice range, weight) pairs: each slice's
	// share of the epoch's samples (Weighted).
	Weights []SliceWeight
	// Window is the samples permuted together (a multiple of the batch
	// size); Streams the canonical streams.
	Window  int64
	Streams int
	// PieceSamples, when below BlockSamples, cuts each block into pieces
	// of this many samples before the shuffle: more, smaller reads, and
	// more mixing when each reader owns few blocks.
	PieceSamples int64
	Batch        int64
	Seed         uint64
	Epoch        int
}

// SliceWeight is a slice's sampling weight.
type SliceWeight struct {
	Range
	Weight float64
}

// WindowSamples converts a window in bytes to samples: the samples whose
// average bytes (the shards' total over the samples) fit windowBytes,
// rounded down to a multiple of batch, at least one batch.
func WindowSamples(windowBytes, tensorBytes, samples, batch int64) int64 {
	if windowBytes <= 0 {
		windowBytes = DefaultWindowBytes
	}
	w := samples
	if tensorBytes > 0 {
		hi, lo := bits.Mul64(uint64(windowBytes), uint64(samples))
		if hi < uint64(tensorBytes) {
			q, _ := bits.Div64(hi, lo, uint64(tensorBytes))
			w = int64(min(q, uint64(math.MaxInt64)))
		}
	}
	return max(w-w%batch, batch)
}

// streamRNG is the generator of stream s's window w.
func streamRNG(seed uint64, epoch, s int, w int64) *SplitMix64 {
	tag := (uint64(s)+1)*0x9E3779B97F4A7C15 ^ (uint64(w)+1)*0xC2B2AE3D27D4EB4F
	return NewEpochRNG(seed^tag, epoch)
}

// pieces returns the epoch's pieces before the shuffle: every canonical
// block cut to the selection, or, weighted, every block cut at slice
// boundaries and each slice's pieces repeated or subsampled to its share.
func (p WindowPlan) pieces() []Piece {
	b := max(p.BlockSamples, 1)
	ps := b
	if p.PieceSamples > 0 && p.PieceSamples < b {
		ps = p.PieceSamples
	}
	var blocks []Piece
	for s := int64(0); s < p.Samples; s += b {
		for q := s; q < min(s+b, p.Samples); q += ps {
			blocks = append(blocks, Piece{q, min(q+ps, s+b, p.Samples)})
		}
	}
	if p.Weights != nil {
		return p.weighted(blocks)
	}
	if p.Selection == nil {
		return blocks
	}
	return cut(blocks, p.Selection)
}

// cut intersects pieces with sorted, disjoint ranges.
func cut(pieces []Piece, sel []Range) []Piece {
	var out []Piece
	j := 0
	for _, pc := range pieces {
		for j > 0 && sel[j-1].End > pc.Start {
			j--
		}
		for ; j < len(sel) && sel[j].Start < pc.End; j++ {
			lo, hi := max(sel[j].Start, pc.Start), min(sel[j].End, pc.End)
			if hi > lo {
				out = append(out, Piece{lo, hi})
			}
		}
	}
	return out
}

// weighted gives each weighted slice round(M * w / sum(w)) samples, M the
// weighted slices' rows: whole copies of its pieces, then whole pieces in a
// random order (its own generator) until the rest is reached, the last one
// cut short.
func (p WindowPlan) weighted(blocks []Piece) []Piece {
	var rows int64
	var sum float64
	for _, sw := range p.Weights {
		rows += sw.Len()
		sum += sw.Weight
	}
	var out []Piece
	for i, sw := range p.Weights {
		if sw.Len() <= 0 || sw.Weight <= 0 || sum <= 0 {
			continue
		}
		want := int64(math.Floor(float64(rows)*sw.Weight/sum + 0.5))
		own := cut(blocks, []Range{sw.Range})
		for ; want >= sw.Len(); want -= sw.Len() {
			out = append(out, own...)
		}
		rng := streamRNG(p.Seed, p.Epoch, -2, int64(i)) // -2: the weights' generator
		order := make([]int, len(own))
		for k := range order {
			order[k] = k
		}
		for k := len(order) - 1; k >= 1; k-- {
			j := int(rng.Next() % uint64(k+1))
			order[k], order[j] = order[j], order[k]
		}
		for _, k := range order {
			if want <= 0 {
				break
			}
			pc := own[k]
			if pc.Len() > want {
				pc.End = pc.Start + want
			}
			out = append(out, pc)
			want -= pc.Len()
		}
	}
	return out
}

// Stream is one canonical stream of an epoch: its pieces in order, and
// where its windows start. Its samples are the pieces' samples in order,
// permuted inside each window.
type Stream struct {
	Index  int
	Pieces []Piece
	// Samples is the stream's sample count (its batches: Samples/Batch,
	// rounded up).
	Samples int64
}

// StreamsOf deals the epoch's shuffled pieces to p.Streams streams: the
// pieces are shuffled (Fisher-Yates, NewEpochRNG(seed, epoch)) into one
// sequence T, and stream s is the s-th run of T, sized so that every
// stream holds the same number of full batches to within one, and the
// epoch's last, partial batch (if any) ends the stream after the last one
// with an extra batch. It also returns the epoch's global batches.
func (p WindowPlan) StreamsOf() ([]Stream, int64, error) {
	if p.Streams <= 0 || p.Batch <= 0 || p.Window <= 0 {
		return nil, 0, fmt.Errorf("streams, batch and window must be positive")
	}
	ps := p.pieces()
	rng := NewEpochRNG(p.Seed, p.Epoch)
	for i := len(ps) - 1; i >= 1; i-- {
		j := int(rng.Next() % uint64(i+1))
		ps[i], ps[j] = ps[j], ps[i]
	}
	var m int64
	for _, pc := range ps {
		m += pc.Len()
	}
	full, last := m/p.Batch, m%p.Batch
	S := int64(p.Streams)
	out := make([]Stream, p.Streams)
	var cur cursor
	for s := range out {
		nb := full / S
		if int64(s) < full%S {
			nb++
		}
		n := nb * p.Batch
		if int64(s) == full%S {
			n += last
		}
		out[s] = Stream{Index: s, Samples: n, Pieces: cur.take(ps, n)}
	}
	batches := full
	if last > 0 {
		batches++
	}
	return out, batches, nil
}

// cursor walks a list of pieces: piece k, of which off samples are taken.
type cursor struct {
	k   int
	off int64
}

// take returns the next n samples of ps as pieces (the first and last
// possibly cut) and advances the cursor.
func (c *cursor) take(ps []Piece, n int64) []Piece {
	var out []Piece
	for n > 0 {
		pc := ps[c.k]
		t := min(pc.Len()-c.off, n)
		out = append(out, Piece{pc.Start + c.off, pc.Start + c.off + t})
		c.off += t
		n -= t
		if c.off == pc.Len() {
			c.k, c.off = c.k+1, 0
		}
	}
	return out
}

// Window is one window of a stream: the pieces to read (in order) and the
// permutation of their samples (window-local positions, in the pieces'
// order).
type Window struct {
	Stream, Index int
	Pieces        []Piece
	Perm          WindowPerm
}

// Windows cuts stream st into windows of p.Window samples, each with its
// own generator's permutation (computed as it is used: a Window holds its
// keys, not its samples).
func (p WindowPlan) Windows(st Stream) []Window {
	var out []Window
	var cur cursor
	for w, left := int64(0), st.Samples; left > 0; w++ {
		n := min(p.Window, left)
		out = append(out, Window{Stream: st.Index, Index: int(w), Pieces: cur.take(st.Pieces, n),
			Perm: NewWindowPerm(n, streamRNG(p.Seed, p.Epoch, st.Index, w))})
		left -= n
	}
	return out
}

// WindowBatch is one batch of a reader under relayout-order-v2: global
// batch K, which is local batch Local of stream Stream, and its samples as
// positions in that stream's window Window.
type WindowBatch struct {
	K, Local     int64
	Stream       int
	Window       int
	First, Count int64 // places [First, First+Count) of the window's permuted sequence
}

// ReaderBatches returns reader a's batches under relayout-order-v2, in
// the order it yields them, and the streams it reads. Global batch k is
// stream k mod Streams's batch k div Streams; rank k mod World takes it,
// as that rank's batch j = k div World, which worker j mod NumWorkers
// yields. World*NumWorkers must divide Streams; then each reader reads
// whole streams of its own. a.SamplesSeen (all ranks together) must be a
// multiple of the batch: the first SamplesSeen/Batch global batches are
// skipped.
func (p WindowPlan) ReaderBatches(a Assignment) ([]WindowBatch, []Stream, error) {
	a = a.withDefaults()
	if err := a.check(); err != nil {
		return nil, nil, err
	}
	R := a.World * a.NumWorkers
	if p.Streams%R != 0 {
		return nil, nil, fmt.Errorf("streams %d must be a multiple of world %d x num_workers %d", p.Streams, a.World, a.NumWorkers)
	}
	streams, total, err := p.StreamsOf()
	if err != nil {
		return nil, nil, err
	}
	if a.SamplesSeen%p.Batch != 0 && a.SamplesSeen < total*p.Batch {
		return nil, nil, fmt.Errorf("samples seen %d is not a multiple of the batch size %d (resume at a batch boundary)", a.SamplesSeen, p.Batch)
	}
	K := total
	if a.DropLast {
		full := total
		if streamsTotal(streams) != total*p.Batch {
			full-- // the last batch is short
		}
		K = full / int64(a.World) * int64(a.World)
	}
	mine := a.Worker*a.World + a.Rank
	var own []Stream
	for _, st := range streams {
		if st.Index%R == mine {
			own = append(own, st)
		}
	}
	wps := p.Window / p.Batch // batches per window
	var out []WindowBatch
	for k := (a.SamplesSeen + p.Batch - 1) / p.Batch; k < K; k++ {
		if k%int64(a.World) != int64(a.Rank) || (k/int64(a.World))%int64(a.NumWorkers) != int64(a.Worker) {
			continue
		}
		s := int(k % int64(p.Streams))
		j := k / int64(p.Streams)
		st := streams[s]
		n := min(p.Batch, st.Samples-j*p.Batch)
		out = append(out, WindowBatch{K: k, Local: j, Stream: s, Window: int(j / wps), First: (j % wps) * p.Batch, Count: n})
	}
	return out, own, nil
}

// BatchPositions returns batch b's samples as positions in its window:
// those the permutation sends to places [First, First+Count), in
// ascending order. A batch's set of samples is what mixes; ascending order
// makes the gather a forward pass over the window.
func BatchPositions(perm WindowPerm, b WindowBatch) []int64 {
	idx := make([]int64, b.Count)
	for i := range idx {
		idx[i] = perm.At(b.First + int64(i))
	}
	slices.Sort(idx)
	return idx
}

func streamsTotal(ss []Stream) int64 {
	var n int64
	for _, s := range ss {
		n += s.Samples
	}
	return n
}

// GlobalOrder returns the epoch's samples in global batch order (all
// readers together): what every (world, num_workers) dividing Streams
// yields, interleaved by global batch index. For tests and tools.
func (p WindowPlan) GlobalOrder() ([]int64, error) {
	streams, total, err := p.StreamsOf()
	if err != nil {
		return nil, err
	}
	// Each stream's samples in order, batch by batch.
	seqs := make([][]int64, len(streams))
	for i, st := range streams {
		for _, w := range p.Windows(st) {
			pos := positions(w.Pieces)
			for first := int64(0); first < w.Perm.N; first += p.Batch {
				n := min(p.Batch, w.Perm.N-first)
				for _, q := range BatchPositions(w.Perm, WindowBatch{First: first, Count: n}) {
					seqs[i] = append(seqs[i], pos[q])
				}
			}
		}
	}
	var out []int64
	for k := int64(0); k < total; k++ {
		s, j := k%int64(p.Streams), k/int64(p.Streams)
		seq := seqs[s]
		out = append(out, seq[j*p.Batch:min((j+1)*p.Batch, int64(len(seq)))]...)
	}
	return out, nil
}

// positions lists the global sample indices of pieces, in order.
func positions(ps []Piece) []int64 {
	var out []int64
	for _, pc := range ps {
		for s := pc.Start; s < pc.End; s++ {
			out = append(out, s)
		}
	}
	return out
}
