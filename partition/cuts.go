package partition

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/source"
)

// Packed runs cut files at query boundaries: a planned file cut that falls
// inside a query moves back to that query's first row (the packer holds a
// query back until it is complete, so it lands in the next file). Inside a
// slice (slices are query-level), that boundary depends on the query keys,
// so it is computed once here, from the key columns of the slices that a
// file cut splits. The run cuts its chunks there, and the distributed plan
// makes it a partition boundary, so both hand the packer the same records.
//
// Rows of a slice that a unit boundary splits are routed by cuts: the sort
// key and input position of the row at each boundary (ComputeCuts).

// PackCuts says where each packed output file starts, in flat (item) rows.
type PackCuts struct {
	// starts[f] is the first item of flat file f's packed file, and
	// starts[len(files)] the table's rows; a file with starts[f] ==
	// starts[f+1] is empty (a query covered it whole).
	Starts []int64
	// queries counts, per flat file, the queries of split slices in it.
	Queries []int64
}

// Cut routes the rows of a slice split over units: rows ordered at or
// after (Key, Pos) (up to the next cut) go to Unit. Key is the encoded sort
// key (packed runs: query key, then item order) and Pos the input position
// of the row at the unit's start: rows of a slice are ordered by both.
type Cut struct {
	Key  []byte `json:"key"`
	Pos  int64  `json:"pos"`
	Unit int    `json:"unit"`
}

// fileOfCut returns the file of a row of a split slice with the given key
// and input position: -1 when the slice has no cuts, -2 before the first.
func fileOfCut(cuts []Cut, key []byte, pos int64) int {
	if len(cuts) == 0 {
		return -1
	}
	i := sort.Search(len(cuts), func(i int) bool {
		c := bytes.Compare(cuts[i].Key, key)
		return c > 0 || (c == 0 && cuts[i].Pos > pos)
	})
	if i == 0 {
		return -2 // before the first cut: the slice's first file
	}
	return cuts[i-1].Unit
}

// splitAt lists the slices that a cut position falls strictly inside, with
// the indices of those positions (ascending).
func splitAt(hist *Histogram, at []int64) map[int32][]int {
	out := map[int32][]int{}
	for i, c := range at {
		rk := hist.Locate(c)
		if rk < 0 || rk >= len(hist.Slices) {
			continue
		}
		if s := hist.Slices[rk]; s.Start < c && c < s.Start+s.Rows {
			out[int32(rk)] = append(out[int32(rk)], i)
		}
	}
	return out
}

// splitBySlice lists the slices that a file cut falls strictly inside, with
// those files.
func splitBySlice(hist *Histogram, lay Layout) map[int32][]int {
	starts := make([]int64, len(lay.Files))
	for f, file := range lay.Files {
		starts[f] = file.Start
	}
	out := splitAt(hist, starts)
	for rk, fs := range out {
		out[rk] = slices.DeleteFunc(fs, func(f int) bool { return f == 0 })
		if len(out[rk]) == 0 {
			delete(out, rk)
		}
	}
	return out
}

// ComputePackCuts reads the slice and query key columns of the input (only
// when a file cut falls inside a slice) and places every packed file start.
func ComputePackCuts(ctx context.Context, tbl *source.Table, hist *Histogram, lay Layout, sliceCols, queryCols []int, parallel int) (*PackCuts, error) {
	split := splitBySlice(hist, lay)
	if len(split) == 0 {
		return packCuts(hist, lay, tbl.Rows, nil, nil)
	}
	// Items per query key, for the split slices' rows only.
	counts := map[int32]map[string]int64{}
	for rk := range split {
		counts[rk] = map[string]int64{}
	}
	err := scanSplit(ctx, tbl, hist, split, sliceCols, queryCols, parallel, func(rows []splitRow) {
		for _, r := range rows {
			counts[r.rank][string(r.key)]++
		}
	})
	if err != nil {
		return nil, err
	}
	return packCuts(hist, lay, tbl.Rows, split, counts)
}

// PackCutsFromItems is ComputePackCuts from the queries a distributed key
// pass listed (SummaryExtra.Items): it reads no rows.
func PackCutsFromItems(hist *Histogram, lay Layout, rows int64, items []QueryItem) (*PackCuts, error) {
	split := splitBySlice(hist, lay)
	counts := map[int32]map[string]int64{}
	for rk := range split {
		counts[rk] = map[string]int64{}
	}
	for _, it := range items {
		if c, ok := counts[it.Slice]; ok {
			c[string(it.Key)] += it.Rows
		}
	}
	return packCuts(hist, lay, rows, split, counts)
}

// packCuts places every packed file start from the items per query key of
// the slices that file cuts split.
func packCuts(hist *Histogram, lay Layout, rows int64, split map[int32][]int, counts map[int32]map[string]int64) (*PackCuts, error) {
	pc := &PackCuts{Starts: make([]int64, len(lay.Files)+1), Queries: make([]int64, len(lay.Files))}
	for f, file := range lay.Files {
		pc.Starts[f] = file.Start
	}
	pc.Starts[len(lay.Files)] = rows
	if len(split) == 0 {
		return pc, nil
	}
	for rk, files := range split {
		s := hist.Slices[rk]
		keys := make([]string, 0, len(counts[rk]))
		for k := range counts[rk] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		// Query q occupies items [s.Start+before[q], s.Start+before[q+1]).
		before := make([]int64, len(keys)+1)
		for q, k := range keys {
			before[q+1] = before[q] + counts[rk][k]
		}
		if before[len(keys)] != s.Rows {
			return nil, errs.BadInputf("the input changed while it was read: slice %v holds %d rows, the key pass counted %d", s.Values, before[len(keys)], s.Rows)
		}
		// fileOf[q] is the packed file of query q: the one holding its
		// first item after the cuts move back.
		qFirst := 0
		for _, f := range files {
			r := lay.Files[f].Start - 1 - s.Start // rank of the last row before the cut
			q := sort.Search(len(keys), func(q int) bool { return before[q+1] > r })
			pc.Starts[f] = s.Start + before[q]
			// Queries qFirst..q-1 belong to the file before f (or earlier).
			for x := qFirst; x < q; x++ {
				pc.Queries[fileAtItem(pc.Starts, s.Start+before[x])]++
			}
			qFirst = q
		}
		for x := qFirst; x < len(keys); x++ {
			pc.Queries[fileAtItem(pc.Starts, s.Start+before[x])]++
		}
	}
	// Moved-back starts must stay ordered (two cuts inside one query give
	// an empty file between them).
	for f := 1; f < len(pc.Starts); f++ {
		if pc.Starts[f] < pc.Starts[f-1] {
			pc.Starts[f] = pc.Starts[f-1]
		}
	}
	return pc, nil
}

// fileAtItem returns the packed file holding item position pos: the last
// file starting at or before it (skipping empty files).
func fileAtItem(starts []int64, pos int64) int {
	n := len(starts) - 1
	f := sort.Search(n, func(f int) bool { return starts[f] > pos }) - 1
	return max(f, 0)
}

// CutChunks splits chunks at the given item positions.
func CutChunks(chunks []RowGroup, at []int64) []RowGroup {
	if len(at) == 0 {
		return chunks
	}
	cuts := slices.Clone(at)
	slices.Sort(cuts)
	var out []RowGroup
	k := 0
	for _, c := range chunks {
		start, end := c.Start, c.Start+c.Rows
		for k < len(cuts) && cuts[k] <= start {
			k++
		}
		for k < len(cuts) && cuts[k] < end {
			out = append(out, RowGroup{Start: start, Rows: cuts[k] - start})
			start = cuts[k]
			k++
		}
		out = append(out, RowGroup{Start: start, Rows: end - start})
	}
	return out
}

// ChunksIn returns the chunks inside [lo, hi), clipped.
func ChunksIn(chunks []RowGroup, lo, hi int64) []RowGroup {
	var out []RowGroup
	for _, c := range chunks {
		s, e := max(c.Start, lo), min(c.Start+c.Rows, hi)
		if e > s {
			out = append(out, RowGroup{Start: s, Rows: e - s})
		}
	}
	return out
}

// ComputeCuts finds, for each slice that a unit start falls inside, the
// sort key and input position of the row at that start: rows of a slice are
// ordered by (sort key, input position), so a map task routes a row by
// comparing it with the cuts. It reads the slice and sort key columns and
// holds the split slices' sort keys.
func ComputeCuts(ctx context.Context, tbl *source.Table, hist *Histogram, unitStarts []int64, sliceCols, sortCols []int, parallel int) (map[int32][]Cut, error) {
	split := splitAt(hist, unitStarts)
	if len(split) == 0 {
		return nil, nil
	}
	rows := map[int32][]splitRow{}
	err := scanSplit(ctx, tbl, hist, split, sliceCols, sortCols, parallel, func(rs []splitRow) {
		for _, r := range rs {
			rows[r.rank] = append(rows[r.rank], r)
		}
	})
	if err != nil {
		return nil, err
	}
	out := map[int32][]Cut{}
	for rk, files := range split {
		rs := rows[rk]
		slices.SortFunc(rs, func(a, b splitRow) int {
			if c := bytes.Compare(a.key, b.key); c != 0 {
				return c
			}
			return int(a.pos - b.pos)
		})
		s := hist.Slices[rk]
		if int64(len(rs)) != s.Rows {
			return nil, errs.BadInputf("the input changed while it was read: slice %v holds %d rows, the key pass counted %d", s.Values, len(rs), s.Rows)
		}
		for _, u := range files {
			x := rs[unitStarts[u]-s.Start]
			out[rk] = append(out[rk], Cut{Key: x.key, Pos: x.pos, Unit: u})
		}
	}
	return out, nil
}

// splitRow is a row of a split slice: its slice rank, encoded key (query or
// sort key) and input position.
type splitRow struct {
	rank int32
	key  []byte
	pos  int64
}

// scanSplit reads the slice and key columns of every row group, in
// parallel, and hands the rows of the split slices to add, one row group
// at a time (add is never called concurrently).
func scanSplit(ctx context.Context, tbl *source.Table, hist *Histogram, split map[int32][]int, sliceCols, keyCols []int, parallel int, add func([]splitRow)) error {
	var mu sync.Mutex
	cols := append(append([]int{}, sliceCols...), keyCols...)
	refs := tbl.RowGroups()
	return par.ForEach(ctx, len(refs), parallel, func(i int) error {
		rec, err := tbl.Read(ctx, refs[i], cols, 1)
		if err != nil {
			return err
		}
		defer rec.Release()
		var rows []splitRow
		var sk []byte
		for r := 0; r < int(rec.NumRows()); r++ {
			sk = sk[:0]
			for c := range sliceCols {
				sk = AppendKey(sk, rec.Column(c), r)
			}
			rk, ok := hist.Rank(sk)
			if !ok {
				return errs.BadInputf("%s: a row's slice key was not seen by the key pass (did the input change?)", refs[i].File.Obj.URL)
			}
			if _, isSplit := split[rk]; !isSplit {
				continue
			}
			var k []byte
			for c := len(sliceCols); c < len(cols); c++ {
				k = AppendKey(k, rec.Column(c), r)
			}
			rows = append(rows, splitRow{rank: rk, key: k, pos: refs[i].Offset() + int64(r)})
		}
		mu.Lock()
		add(rows)
		mu.Unlock()
		return nil
	})
}
