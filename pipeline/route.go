package pipeline

import (
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/partition"
)

// router sends an input row to the unit that holds its output position,
// using only per-slice state: a slice inside one unit goes there whole; a
// slice split over units (larger than a unit) is cut by its rows' rank within
// the slice, which is their input order (a running counter, as rows are
// routed in input order) or, with sort keys, an exact rank computed for split
// slices only.
type router struct {
	h       *partition.Histogram
	units   []partition.Unit
	whole   []int32 // unit of each slice, or -1 when split
	counter []int64
	// cuts, when set, routes the rows of a slice split over units (here:
	// files) by key: the query key (so each query goes whole to one unit)
	// or the sort key with the input position.
	cuts    map[int32][]queryCut
	cutCols []int
	qbuf    []byte
}

func newRouter(h *partition.Histogram, units []partition.Unit) *router {
	r := &router{h: h, units: units, whole: make([]int32, len(h.Slices)), counter: make([]int64, len(h.Slices))}
	for i, s := range h.Slices {
		if s.Rows == 0 {
			continue
		}
		a, b := r.unitAt(s.Start), r.unitAt(s.Start+s.Rows-1)
		if a == b {
			r.whole[i] = int32(a)
		} else {
			r.whole[i] = -1
		}
	}
	return r
}

func (r *router) unitAt(row int64) int {
	return sort.Search(len(r.units), func(i int) bool { return r.units[i].Start+r.units[i].Rows > row })
}

func (r *router) split() []int32 {
	var out []int32
	for i, u := range r.whole {
		if u < 0 {
			out = append(out, int32(i))
		}
	}
	return out
}

// unitOfRow is unitOf for row i of rec, whose key routes it when the
// router has cuts.
func (r *router) unitOfRow(key []byte, rec arrow.RecordBatch, i int, pos int64) (int, error) {
	if r.cuts == nil {
		return r.unitOf(key, pos)
	}
	rk, ok := r.h.Rank(key)
	if !ok {
		return 0, fmt.Errorf("internal: a row has a slice key the plan did not see")
	}
	if u := r.whole[rk]; u >= 0 {
		return int(u), nil
	}
	r.qbuf = r.qbuf[:0]
	for _, c := range r.cutCols {
		r.qbuf = partition.AppendKey(r.qbuf, rec.Column(c), i)
	}
	switch f := fileOfCut(r.cuts[rk], r.qbuf, pos); f {
	case -1:
		return 0, fmt.Errorf("internal: slice %v spans files but the plan has no cuts for it", r.h.Slices[rk].Values)
	case -2:
		return r.unitAt(r.h.Slices[rk].Start), nil
	default:
		return f, nil
	}
}

// unitOf returns the unit of the row at input position pos with the encoded
// slice key. Rows must be routed in input order.
func (r *router) unitOf(key []byte, pos int64) (int, error) {
	rk, ok := r.h.Rank(key)
	if !ok {
		return 0, fmt.Errorf("internal: a row has a slice key the plan did not see")
	}
	if u := r.whole[rk]; u >= 0 {
		return int(u), nil
	}
	within := r.counter[rk]
	r.counter[rk]++
	return r.unitAt(r.h.Slices[rk].Start + within), nil
}
