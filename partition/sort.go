package partition

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
)

// Sort returns the order of the rows of recs (taken as one sequence in input
// order) by (slice rank, sort key), stable so that ties keep input order:
// out[i] is the index of the i-th row in output order. Every row's slice
// must be in h.
func Sort(h *Histogram, recs []arrow.RecordBatch, sliceCols, sortCols []int) ([]int64, error) {
	var n int64
	for _, r := range recs {
		n += r.NumRows()
	}
	ranks := make([]int32, n)
	var sortArea []byte
	var sortOff []uint32
	if len(sortCols) > 0 {
		sortOff = make([]uint32, n+1)
	}
	var buf []byte
	var row int64
	for _, r := range recs {
		for i := 0; i < int(r.NumRows()); i++ {
			buf = buf[:0]
			for _, c := range sliceCols {
				buf = AppendKey(buf, r.Column(c), i)
			}
			rk, ok := h.Rank(buf)
			if !ok {
				return nil, fmt.Errorf("internal: row %d has a slice key the plan did not see", row)
			}
			ranks[row] = rk
			if sortOff != nil {
				for _, c := range sortCols {
					sortArea = AppendKey(sortArea, r.Column(c), i)
				}
				sortOff[row+1] = uint32(len(sortArea))
			}
			row++
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
		for s := 0; s < len(out); {
			e := s + 1
			for e < len(out) && ranks[out[e]] == ranks[out[s]] {
				e++
			}
			slices.SortStableFunc(out[s:e], func(a, b int64) int { return bytes.Compare(key(a), key(b)) })
			s = e
		}
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
