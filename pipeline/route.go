package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
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
	exact   map[int32]*exactRanks
	// cuts, when set, routes the rows of a slice split over units (here:
	// files) by key: the query key (so each query goes whole to one unit)
	// or the sort key with the input position.
	cuts    map[int32][]queryCut
	cutCols []int
	qbuf    []byte
}

type exactRanks struct {
	positions []int64 // ascending
	ranks     []int64 // rank within the slice of positions[i]
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
	var within int64
	if ex := r.exact[rk]; ex != nil {
		i, found := slices.BinarySearch(ex.positions, pos)
		if !found {
			return 0, fmt.Errorf("internal: position %d has no rank", pos)
		}
		within = ex.ranks[i]
	} else {
		within = r.counter[rk]
		r.counter[rk]++
	}
	return r.unitAt(r.h.Slices[rk].Start + within), nil
}

// rankSplitSlices computes the exact within-slice rank, by (sort key, input
// position), of every row of a split slice. It reads only key columns and
// holds the sort keys of those slices' rows.
func (r *router) rankSplitSlices(ctx context.Context, t *source.Table, sliceCols, sortCols []int) error {
	split := r.split()
	if len(split) == 0 || len(sortCols) == 0 {
		return nil
	}
	isSplit := map[int32]bool{}
	for _, s := range split {
		isSplit[s] = true
	}
	type row struct {
		key []byte
		pos int64
	}
	rows := map[int32][]row{}
	cols := append(append([]int{}, sliceCols...), sortCols...)
	var buf []byte
	for _, ref := range t.RowGroups() {
		rec, err := t.Read(ctx, ref, cols, 2)
		if err != nil {
			return err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			buf = buf[:0]
			for c := range sliceCols {
				buf = partition.AppendKey(buf, rec.Column(c), i)
			}
			rk, ok := r.h.Rank(buf)
			if !ok || !isSplit[rk] {
				continue
			}
			var k []byte
			for c := len(sliceCols); c < len(cols); c++ {
				k = partition.AppendKey(k, rec.Column(c), i)
			}
			rows[rk] = append(rows[rk], row{k, ref.Offset() + int64(i)})
		}
		rec.Release()
	}
	r.exact = map[int32]*exactRanks{}
	for rk, rs := range rows {
		slices.SortStableFunc(rs, func(a, b row) int { return bytes.Compare(a.key, b.key) })
		ex := &exactRanks{positions: make([]int64, len(rs)), ranks: make([]int64, len(rs))}
		type pr struct{ pos, rank int64 }
		prs := make([]pr, len(rs))
		for i, x := range rs {
			prs[i] = pr{x.pos, int64(i)}
		}
		slices.SortFunc(prs, func(a, b pr) int { return int(a.pos - b.pos) })
		for i, p := range prs {
			ex.positions[i], ex.ranks[i] = p.pos, p.rank
		}
		r.exact[rk] = ex
	}
	return nil
}
