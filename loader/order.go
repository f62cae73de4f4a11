// Package loader reads relayout tensor shards: it memory-maps them, orders
// and assigns samples to (rank, worker) readers following the determinism
// contracts of docs/loader.md, and returns batches. relayout-order-v2 (the
// window order, order2.go and Reader) mixes slices inside every batch
// while each reader reads only its own blocks; relayout-order-v1 (the
// block order, Sequence and Batches) keeps blocks whole and returns views
// into the maps. python/relayout_loader.py implements both.
package loader

import (
	"fmt"
	"slices"
)

// Range is a half-open range [Start, End) of global sample indices.
type Range struct{ Start, End int64 }

// Len is the number of samples in r.
func (r Range) Len() int64 { return r.End - r.Start }

// SplitMix64 is the generator of relayout-order-v1.
type SplitMix64 struct{ state uint64 }

// NewEpochRNG seeds the generator for (seed, epoch).
func NewEpochRNG(seed uint64, epoch int) *SplitMix64 {
	return &SplitMix64{state: seed ^ (uint64(epoch)+1)*0xD1B54A32D192ED03}
}

// Next returns the next 64-bit value.
func (s *SplitMix64) Next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	return mix(s.state)
}

// mix is SplitMix64's output function (its finalizer); relayout-order-v2's
// window permutations use it as their round function.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// BlockOrder returns the order in which an epoch visits the k canonical
// blocks: a Fisher-Yates shuffle driven by NewEpochRNG(seed, epoch), or
// 0..k-1 when shuffle is off.
func BlockOrder(k int64, seed uint64, epoch int, shuffle bool) []int64 {
	p := make([]int64, k)
	for i := range p {
		p[i] = int64(i)
	}
	if !shuffle {
		return p
	}
	rng := NewEpochRNG(seed, epoch)
	for i := k - 1; i >= 1; i-- {
		j := int64(rng.Next() % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// Sequence returns the epoch's sample order as ranges: the full blocks of
// blockSamples samples of [0, n) in BlockOrder, then the partial last block
// if there is one (so batches whose size divides blockSamples never straddle
// two blocks), each cut to the selection (sorted, disjoint ranges; nil
// selects everything).
func Sequence(n, blockSamples int64, sel []Range, seed uint64, epoch int, shuffle bool) []Range {
	if blockSamples <= 0 {
		blockSamples = 1
	}
	order := BlockOrder(n/blockSamples, seed, epoch, shuffle)
	if n%blockSamples != 0 {
		order = append(order, n/blockSamples)
	}
	var out []Range
	for _, b := range order {
		blk := Range{b * blockSamples, min((b+1)*blockSamples, n)}
		if sel == nil {
			out = append(out, blk)
			continue
		}
		i, _ := slices.BinarySearchFunc(sel, blk.Start, func(r Range, x int64) int {
			if r.End <= x {
				return -1
			}
			return 1
		})
		for ; i < len(sel) && sel[i].Start < blk.End; i++ {
			lo, hi := max(sel[i].Start, blk.Start), min(sel[i].End, blk.End)
			if hi > lo {
				out = append(out, Range{lo, hi})
			}
		}
	}
	return out
}

// Assignment is one reader's place in a training job.
type Assignment struct {
	Seed       uint64
	Epoch      int
	Shuffle    bool
	Rank       int
	World      int // ranks (default 1)
	Worker     int
	NumWorkers int // loader workers per rank (default 1)
	// SamplesSeen resumes an epoch after this many samples of its global
	// order (all ranks together).
	SamplesSeen int64
	// DropLast keeps only full batches, the same number on every rank.
	DropLast bool
}

func (a Assignment) check() error {
	if a.World <= 0 || a.NumWorkers <= 0 {
		return fmt.Errorf("world and num_workers must be positive")
	}
	if a.Rank < 0 || a.Rank >= a.World || a.Worker < 0 || a.Worker >= a.NumWorkers {
		return fmt.Errorf("rank %d of %d, worker %d of %d: out of range", a.Rank, a.World, a.Worker, a.NumWorkers)
	}
	if a.SamplesSeen < 0 || a.Epoch < 0 {
		return fmt.Errorf("epoch and samples seen must not be negative")
	}
	return nil
}

func (a Assignment) withDefaults() Assignment {
	if a.World == 0 {
		a.World = 1
	}
	if a.NumWorkers == 0 {
		a.NumWorkers = 1
	}
	return a
}

// Batches cuts the sequence seq (after a.SamplesSeen samples) into batches
// of size samples and returns those of reader a, in order, each as ranges:
// global batch k goes to rank k mod World, and a rank's j-th batch to
// worker j mod NumWorkers.
func Batches(seq []Range, size int64, a Assignment) ([][]Range, error) {
	a = a.withDefaults()
	if err := a.check(); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fmt.Errorf("batch size must be positive")
	}
	var total int64
	for _, r := range seq {
		total += r.Len()
	}
	rem := max(total-a.SamplesSeen, 0)
	nb := (rem + size - 1) / size
	if a.DropLast {
		nb = rem / (size * int64(a.World)) * int64(a.World)
	}
	var out [][]Range
	// Walk the sequence once, cutting batches; keep this reader's.
	pos := a.SamplesSeen  // samples to skip
	i, off := 0, int64(0) // current range and offset in it
	for pos > 0 && i < len(seq) {
		take := min(seq[i].Len()-off, pos)
		off += take
		pos -= take
		if off == seq[i].Len() {
			i, off = i+1, 0
		}
	}
	for k := int64(0); k < nb; k++ {
		mine := k%int64(a.World) == int64(a.Rank) && (k/int64(a.World))%int64(a.NumWorkers) == int64(a.Worker)
		need := min(size, rem-k*size)
		var b []Range
		for need > 0 && i < len(seq) {
			take := min(seq[i].Len()-off, need)
			if mine {
				s := seq[i].Start + off
				if n := len(b); n > 0 && b[n-1].End == s {
					b[n-1].End += take
				} else {
					b = append(b, Range{s, s + take})
				}
			}
			off += take
			need -= take
			if off == seq[i].Len() {
				i, off = i+1, 0
			}
		}
		if mine {
			out = append(out, b)
		}
	}
	return out, nil
}
