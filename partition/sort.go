package partition

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/internal/par"
)

// Sort returns the order of the rows of recs (taken as one sequence in input
// order) by (slice rank, sort key), stable so that ties keep input order:
// out[i] is the index of the i-th row in output order. Every row's slice
// must be in h. Up to parallel goroutines rank the batches' rows and sort
// the slices' rows by key; the order is the same for any parallel.
func Sort(h *Histogram, recs []arrow.RecordBatch, sliceCols, sortCols []int, parallel int) ([]int64, error) {
	starts := BatchStarts(recs)
	n := starts[len(recs)]
	ranks := make([]int32, n)
	// Each batch's sort keys in its own area (offsets from 0), then one
	// area with global offsets.
	areas := make([][]byte, len(recs))
	var sortOff []uint32
	if len(sortCols) > 0 {
		sortOff = make([]uint32, n+1)
	}
	ctx := context.Background()
	err := par.ForEach(ctx, len(recs), max(parallel, 1), func(b int) error {
		r := recs[b]
		row := starts[b]
		var buf, area []byte
		for i := 0; i < int(r.NumRows()); i++ {
			buf = buf[:0]
			for _, c := range sliceCols {
				buf = AppendKey(buf, r.Column(c), i)
			}
			rk, ok := h.Rank(buf)
			if !ok {
				return fmt.Errorf("internal: row %d has a slice key the plan did not see", row)
			}
			ranks[row] = rk
			if sortOff != nil {
				for _, c := range sortCols {
					area = AppendKey(area, r.Column(c), i)
				}
				sortOff[row+1] = uint32(len(area))
			}
			row++
		}
		areas[b] = area
		return nil
	})
	if err != nil {
		return nil, err
	}
	var sortArea []byte
	if sortOff != nil {
		total := 0
		for _, a := range areas {
			total += len(a)
		}
		sortArea = make([]byte, 0, total)
		for b, a := range areas {
			base := uint32(len(sortArea))
			sortArea = append(sortArea, a...)
			for row := starts[b] + 1; row <= starts[b+1]; row++ {
				sortOff[row] += base
			}
		}
	}
	out := make([]int64, n)
	if len(h.Slices) <= 1<<20 {
		// Counting sort by rank: stable in input order.
		counts := make([]int64, len(h.Slices)+1)
		for _, rk := range ranks {
			counts[rk+1]++
		}
		for i := 1; i < len(counts); i++ {
			counts[i] += counts[i-1]
		}
		for i, rk := range ranks {
			out[counts[rk]] = int64(i)
			counts[rk]++
		}
	} else {
		for i := range out {
			out[i] = int64(i)
		}
		slices.SortStableFunc(out, func(a, b int64) int { return int(ranks[a]) - int(ranks[b]) })
	}
	if sortOff != nil {
		key := func(i int64) []byte { return sortArea[sortOff[i]:sortOff[i+1]] }
		// The runs of one rank, sorted by key each, on their own.
		var runs [][2]int
		for s := 0; s < len(out); {
			e := s + 1
			for e < len(out) && ranks[out[e]] == ranks[out[s]] {
				e++
			}
			if e-s > 1 {
				runs = append(runs, [2]int{s, e})
			}
			s = e
		}
		par.ForEach(ctx, len(runs), max(parallel, 1), func(k int) error {
			s, e := runs[k][0], runs[k][1]
			slices.SortStableFunc(out[s:e], func(a, b int64) int { return bytes.Compare(key(a), key(b)) })
			return nil
		})
	}
	return out, nil
}

// SortKeyOf appends the encoded sort key of row i.
func SortKeyOf(dst []byte, rec arrow.RecordBatch, sortCols []int, i int) []byte {
	for _, c := range sortCols {
		dst = AppendKey(dst, rec.Column(c), i)
	}
	return dst
}
