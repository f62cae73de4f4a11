package partition

import (
	"bytes"
	"context"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/source"
)

// The key pass as tasks (docs/distributed.md): each key task reads the key
// columns of a run of input row groups and hands the plan step a
// KeySummary, whose size grows with the slices (and, packed, the queries)
// the run holds, not with its rows or row groups; BuildFromSummaries merges
// the summaries of runs that cover the table into exactly BuildWith's
// histogram and query counts.

// KeySummary is one key task's result: the key pass over the row groups
// [First, End) of the table's RowGroups(), merged over them. JSON-encoded,
// its values decode (with UseNumber) to what plan.json holds.
type KeySummary struct {
	First int   `json:"first"`
	End   int   `json:"end"`
	Rows  int64 `json:"rows"`
	// Slices are the run's slices in first-seen order.
	Slices []SliceSummary `json:"slices"`
	// Queries are the run's queries (with BuildOptions.QueryCols), ordered
	// by key.
	Queries []QuerySummary `json:"queries,omitempty"`
}

// SliceSummary is one slice's rows in a key task's run.
type SliceSummary struct {
	Parts  [][]byte `json:"parts"`
	Values []any    `json:"values"`
	Rows   int64    `json:"rows"`
	// RowGroups counts the run's row groups holding the slice.
	RowGroups int `json:"row_groups"`
	// ReadBytes is what the caller prices from the run's vectors (the
	// read-cost model's share of the run's row groups that hold the slice;
	// report.PresentBytes); BuildFromSummaries sums it per slice.
	ReadBytes int64 `json:"read_bytes"`
}

// QuerySummary is one query's rows in a key task's run: its encoded key,
// its slice (an index into the run's Slices) and its first row (row group
// index in the table's RowGroups(), row), which names it in errors.
type QuerySummary struct {
	Key      []byte `json:"key"`
	Rows     int64  `json:"rows"`
	Slice    int32  `json:"slice"`
	RowGroup int32  `json:"row_group"`
	Row      int32  `json:"row"`
}

// QueryItem is one query of the whole table: its encoded key, the output
// rank of its slice and its rows.
type QueryItem struct {
	Key   []byte
	Slice int32
	Rows  int64
}

// SummaryExtra is what BuildFromSummaries knows besides the histogram.
type SummaryExtra struct {
	// Queries are the query counts (with QueryCols), as BuildWith's.
	Queries *QueryCounts
	// Items lists every query (with QueryCols), for PackCutsFromItems.
	Items []QueryItem
	// TaskCounts[i] maps a slice rank to its rows in the i-th summary's
	// run (summaries ordered by First).
	TaskCounts []map[int32]int64
	// ReadBytes sums the summaries' ReadBytes per slice rank.
	ReadBytes []int64
}

// SummarizeKeys is one key task: the key pass over row groups [first,
// end), merged. It also returns, per row group of the run, the vectors
// holding each of the summary's slices (index into Slices), from which the
// caller prices ReadBytes; o.Vectors asks for them.
func SummarizeKeys(ctx context.Context, t *source.Table, first, end int, sliceCols []int, o BuildOptions, parallel int) (*KeySummary, []*RowGroupSlices, error) {
	refs := t.RowGroups()
	if first < 0 || end > len(refs) || first > end {
		return nil, nil, errs.BadInputf("key task: row groups [%d, %d) are outside the table's %d", first, end, len(refs))
	}
	sum := &KeySummary{First: first, End: end}
	for _, ref := range refs[first:end] {
		sum.Rows += ref.Rows()
	}
	if len(sliceCols) == 0 && len(o.QueryCols) == 0 {
		// One slice, held by every non-empty row group: nothing to read.
		s := SliceSummary{Parts: [][]byte{}, Values: []any{}}
		for _, ref := range refs[first:end] {
			if ref.Rows() > 0 {
				s.Rows += ref.Rows()
				s.RowGroups++
			}
		}
		if s.Rows > 0 {
			sum.Slices = []SliceSummary{s}
		}
		return sum, nil, nil
	}
	rgs := make([]int, end-first)
	for i := range rgs {
		rgs[i] = first + i
	}
	o.QueryKeys = true
	per, err := readKeys(ctx, t, rgs, sliceCols, o, parallel)
	if err != nil {
		return nil, nil, err
	}
	local := map[string]int32{}
	var vectors []*RowGroupSlices
	if o.Vectors {
		vectors = make([]*RowGroupSlices, len(per))
	}
	type agg struct {
		queryAgg
		key []byte
	}
	queries := map[uint64]agg{}
	for i, k := range per {
		ids := make([]int32, len(k.keys))
		for li, ik := range k.keys {
			id, ok := local[string(ik.key)]
			if !ok {
				id = int32(len(sum.Slices))
				local[string(ik.key)] = id
				sum.Slices = append(sum.Slices, SliceSummary{Parts: ik.parts, Values: ik.values})
			}
			ids[li] = id
			sum.Slices[id].Rows += k.counts[li]
			sum.Slices[id].RowGroups++
		}
		if vectors != nil && len(k.keys) > 0 {
			vectors[i] = newRowGroupSlices(ids, nil, k.words, k.bits)
		}
		for h, a := range k.queries {
			a.slice = ids[a.slice]
			g, ok := queries[h]
			if ok && g.slice != a.slice {
				return nil, nil, splitQuery(ctx, t, sliceCols, o.QueryCols, refs[g.rg], int(g.row), refs[a.rg], int(a.row))
			}
			if ok {
				g.count += a.count
			} else {
				g = agg{a, k.qkeys[h]}
			}
			queries[h] = g
		}
		per[i] = nil
	}
	for _, a := range queries {
		sum.Queries = append(sum.Queries, QuerySummary{Key: a.key, Rows: a.count, Slice: a.slice, RowGroup: a.rg, Row: a.row})
	}
	slices.SortFunc(sum.Queries, func(a, b QuerySummary) int { return bytes.Compare(a.Key, b.Key) })
	return sum, vectors, nil
}

// BuildFromSummaries merges key summaries whose runs cover the table's row
// groups (in any order) into BuildWith's histogram and query counts, with
// each run's rows per slice: what a plan needs, computed from the
// summaries alone (the table's footers check their row counts). A run
// missing, given twice or whose rows differ from the footers' is bad input.
func BuildFromSummaries(ctx context.Context, t *source.Table, sums []*KeySummary, sliceCols []int, o BuildOptions) (*Histogram, *SummaryExtra, error) {
	refs := t.RowGroups()
	sums = slices.Clone(sums)
	slices.SortFunc(sums, func(a, b *KeySummary) int { return a.First - b.First })
	next := 0
	for _, s := range sums {
		if s.First != next || s.End < s.First || s.End > len(refs) {
			if s.First < next {
				return nil, nil, errs.BadInputf("key pass: row groups [%d, %d) overlap another task's", s.First, s.End)
			}
			return nil, nil, errs.BadInputf("key pass: row groups [%d, %d) are missing (the table has %d)", next, min(s.First, len(refs)), len(refs))
		}
		var rows int64
		for _, ref := range refs[s.First:s.End] {
			rows += ref.Rows()
		}
		var srows int64
		for _, sl := range s.Slices {
			if len(sl.Parts) != len(sliceCols) || len(sl.Values) != len(sliceCols) {
				return nil, nil, errs.BadInputf("key pass: row groups [%d, %d): a slice has %d parts and %d values for %d slice keys", s.First, s.End, len(sl.Parts), len(sl.Values), len(sliceCols))
			}
			srows += sl.Rows
		}
		if s.Rows != rows || srows != rows {
			return nil, nil, errs.BadInputf("key pass: row groups [%d, %d) hold %d rows; the task counted %d (%d in its slices): did the input change?", s.First, s.End, rows, s.Rows, srows)
		}
		next = s.End
	}
	if next != len(refs) {
		return nil, nil, errs.BadInputf("key pass: row groups [%d, %d) are missing", next, len(refs))
	}
	global := map[string]int{}
	var all []Slice
	var readBytes []int64
	ids := make([][]int, len(sums))
	for i, s := range sums {
		ids[i] = make([]int, len(s.Slices))
		var key []byte
		for li, sl := range s.Slices {
			key = key[:0]
			for _, p := range sl.Parts {
				key = append(key, p...)
			}
			g, ok := global[string(key)]
			if !ok {
				g = len(all)
				global[string(key)] = g
				all = append(all, Slice{Key: bytes.Clone(key), Parts: sl.Parts, Values: sl.Values})
				readBytes = append(readBytes, 0)
			}
			ids[i][li] = g
			all[g].Rows += sl.Rows
			all[g].InputRowGroups += sl.RowGroups
			readBytes[g] += sl.ReadBytes
		}
	}
	h, rankOf := orderSlices(all)
	ex := &SummaryExtra{ReadBytes: make([]int64, len(all))}
	for g, r := range rankOf {
		ex.ReadBytes[r] = readBytes[g]
	}
	for i, s := range sums {
		m := make(map[int32]int64, len(s.Slices))
		for li, sl := range s.Slices {
			m[rankOf[ids[i][li]]] = sl.Rows
		}
		ex.TaskCounts = append(ex.TaskCounts, m)
	}
	if len(o.QueryCols) == 0 {
		return h, ex, nil
	}
	type agg struct {
		item    int
		rg, row int32
		slice   int32
	}
	queries := map[uint64]agg{}
	for i, s := range sums {
		for _, q := range s.Queries {
			if q.Slice < 0 || int(q.Slice) >= len(s.Slices) || q.RowGroup < int32(s.First) || q.RowGroup >= int32(s.End) {
				return nil, nil, errs.BadInputf("key pass: row groups [%d, %d): query at row group %d names slice %d of %d", s.First, s.End, q.RowGroup, q.Slice, len(s.Slices))
			}
			rk := rankOf[ids[i][q.Slice]]
			hq := xxhash.Sum64(q.Key)
			g, ok := queries[hq]
			if ok && g.slice != rk {
				return nil, nil, splitQuery(ctx, t, sliceCols, o.QueryCols, refs[g.rg], int(g.row), refs[q.RowGroup], int(q.Row))
			}
			if ok {
				ex.Items[g.item].Rows += q.Rows
				continue
			}
			queries[hq] = agg{item: len(ex.Items), rg: q.RowGroup, row: q.Row, slice: rk}
			ex.Items = append(ex.Items, QueryItem{Key: q.Key, Slice: rk, Rows: q.Rows})
		}
	}
	qc := &QueryCounts{Queries: int64(len(ex.Items)), PerSlice: make([]int64, len(h.Slices)), Items: make([]int64, len(ex.Items))}
	for i, it := range ex.Items {
		qc.PerSlice[it.Slice]++
		qc.Items[i] = it.Rows
	}
	ex.Queries = qc
	return h, ex, nil
}
