package partition

import (
	"fmt"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
)

// Router sends an input row to the unit that holds its output position,
// using only per-slice state: a slice inside one unit goes there whole; a
// slice split over units (larger than a unit) is cut by its rows' rank within
// the slice, which is their input order (a running counter, as rows are
// routed in input order) or, with sort keys, an exact rank computed for split
// slices only.
type Router struct {
	h       *Histogram
	units   []Unit
	Whole   []int32 // unit of each slice, or -1 when split
	Counter []int64
	// cuts, when set, routes the rows of a slice split over units (here:
	// files) by key: the query key (so each query goes whole to one unit)
	// or the sort key with the input position.
	Cuts    map[int32][]Cut
	CutCols []int
	// Bins, when set, is each unit's bin: the first pass of a two-pass
	// shuffle routes rows to bins, each row with its unit (Bins).
	Bins []int
	qbuf []byte
}

func NewRouter(h *Histogram, units []Unit) *Router {
	r := &Router{h: h, units: units, Whole: make([]int32, len(h.Slices)), Counter: make([]int64, len(h.Slices))}
	for i, s := range h.Slices {
		if s.Rows == 0 {
			continue
		}
		a, b := r.unitAt(s.Start), r.unitAt(s.Start+s.Rows-1)
		if a == b {
			r.Whole[i] = int32(a)
		} else {
			r.Whole[i] = -1
		}
	}
	return r
}

func (r *Router) unitAt(row int64) int {
	return sort.Search(len(r.units), func(i int) bool { return r.units[i].Start+r.units[i].Rows > row })
}

func (r *Router) Split() []int32 {
	var out []int32
	for i, u := range r.Whole {
		if u < 0 {
			out = append(out, int32(i))
		}
	}
	return out
}

// UnitOfRow is unitOf for row i of rec, whose key routes it when the
// Router has cuts.
func (r *Router) UnitOfRow(key []byte, rec arrow.RecordBatch, i int, pos int64) (int, error) {
	if r.Cuts == nil {
		return r.unitOf(key, pos)
	}
	rk, ok := r.h.Rank(key)
	if !ok {
		return 0, fmt.Errorf("internal: a row has a slice key the plan did not see")
	}
	if u := r.Whole[rk]; u >= 0 {
		return int(u), nil
	}
	r.qbuf = r.qbuf[:0]
	for _, c := range r.CutCols {
		r.qbuf = AppendKey(r.qbuf, rec.Column(c), i)
	}
	switch f := fileOfCut(r.Cuts[rk], r.qbuf, pos); f {
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
func (r *Router) unitOf(key []byte, pos int64) (int, error) {
	rk, ok := r.h.Rank(key)
	if !ok {
		return 0, fmt.Errorf("internal: a row has a slice key the plan did not see")
	}
	if u := r.Whole[rk]; u >= 0 {
		return int(u), nil
	}
	within := r.Counter[rk]
	r.Counter[rk]++
	return r.unitAt(r.h.Slices[rk].Start + within), nil
}
