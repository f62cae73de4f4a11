package partition

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/source"
)

// Slice is one distinct slice-key tuple and where its rows land in the output.
type Slice struct {
	// Key is the encoded tuple (see AppendKey); Parts its per-column pieces.
	Key   []byte
	Parts [][]byte
	// Values are the tuple's values, one per slice key (see Value).
	Values []any
	// Rows is the slice's row count; Start the output index of its first row.
	Rows  int64
	Start int64
	// InputRowGroups counts the input row groups holding rows of the slice.
	InputRowGroups int
}

// Histogram is the plan's view of the table: its slices in output order.
// It costs memory per distinct slice, not per row.
type Histogram struct {
	Slices []Slice
	rank   map[string]int32
}

// Rank returns the output rank of the slice with the encoded key.
func (h *Histogram) Rank(key []byte) (int32, bool) {
	r, ok := h.rank[string(key)]
	return r, ok
}

// KeyColumns resolves key names to table column indices, checking their types.
func KeyColumns(t *source.Table, names []string, what string) ([]int, error) {
	cols := make([]int, 0, len(names))
	for _, n := range names {
		i, err := t.FieldIndex(n)
		if err != nil {
			return nil, errs.BadInputf("%s: %v", what, err)
		}
		if err := SupportedKeyType(t.Schema.Field(i).Type); err != nil {
			return nil, errs.BadInputf("%s column %q: unsupported: %v", what, n, err)
		}
		cols = append(cols, i)
	}
	return cols, nil
}

// rgSlices is what readSlices finds in a row group, by local slice id (in
// order of first sight): the interned key, its rows and, with vectors,
// words bits of VectorRows-row vectors each, in one array. Kept for every
// row group until the merge, so it is compact (RowGroupSlices says why).
type rgSlices struct {
	keys   []*internedKey
	counts []int64
	words  int
	bits   []uint64
	// queries maps a query-key hash to its rows here; global maps local
	// slice ids to the merged list.
	queries map[uint64]queryAgg
	qkeys   map[uint64][]byte // with BuildOptions.QueryKeys
	global  []int32
}

// Build reads the slice-key columns of every row group (only those) and
// returns the slices in output order with their row counts. Without slice
// keys the table is one slice.
func Build(ctx context.Context, t *source.Table, sliceCols []int, parallel int) (*Histogram, error) {
	h, _, err := BuildWith(ctx, t, sliceCols, BuildOptions{}, parallel)
	return h, err
}

// VectorRows is the granularity at which BuildWith records where a slice's
// rows lie in a row group: DuckDB's vector size, the unit in which a reader
// that filters first and fetches the other columns after decides what to
// fetch.
const VectorRows = 2048

// BuildOptions asks BuildWith for more than the histogram.
type BuildOptions struct {
	// QueryCols, when set, counts each query's rows (see QueryCounts).
	QueryCols []int
	// Vectors records which VectorRows-row vectors of each row group hold
	// each slice's rows.
	Vectors bool
	// Counts records each row group's rows per slice.
	Counts bool
	// QueryKeys keeps each query's encoded key (SummarizeKeys does, for
	// the packed cuts).
	QueryKeys bool
}

// BuildExtra is what BuildOptions asked for.
type BuildExtra struct {
	Queries *QueryCounts
	// RowGroups[i] (i indexes t.RowGroups()) holds, by slice rank, the
	// slice's rows in row group i (with Counts) and the bitset of the
	// vectors holding them (with Vectors); nil when neither was asked for.
	RowGroups []*RowGroupSlices
}

// QueryCounts is what the query-key columns say about packing: exact
// counts, from the same pass as the histogram. Queries are told apart by a
// 64-bit hash of their encoded key.
type QueryCounts struct {
	// Queries is the number of distinct queries; PerSlice counts them by
	// slice rank; Items holds each query's row count (in no order).
	Queries  int64
	PerSlice []int64
	Items    []int64
}

type queryAgg struct {
	count int64
	slice int32 // local slice id, then global rank
	rg    int32
	row   int32 // first row within rg
}

// BuildWith is Build that also, in the same pass, counts each query's rows
// and records where each slice's rows lie, as o asks. A query whose rows lie
// in two slices is bad input (slice keys must be query-level), named with
// both values.
func BuildWith(ctx context.Context, t *source.Table, sliceCols []int, o BuildOptions, parallel int) (*Histogram, *BuildExtra, error) {
	refs := t.RowGroups()
	queryCols := o.QueryCols
	if len(sliceCols) == 0 && len(queryCols) == 0 && !o.Vectors && !o.Counts {
		return &Histogram{Slices: []Slice{{Rows: t.Rows, InputRowGroups: len(refs)}}, rank: map[string]int32{"": 0}}, &BuildExtra{}, nil
	}
	all := make([]int, len(refs))
	for i := range all {
		all[i] = i
	}
	per, err := readKeys(ctx, t, all, sliceCols, o, parallel)
	if err != nil {
		return nil, nil, err
	}
	return mergeSlices(ctx, t, per, sliceCols, o)
}

// readKeys reads the slices of the given row groups, in parallel.
func readKeys(ctx context.Context, t *source.Table, rowGroups []int, sliceCols []int, o BuildOptions, parallel int) ([]*rgSlices, error) {
	refs := t.RowGroups()
	per := make([]*rgSlices, len(rowGroups))
	in := &keyIntern{m: map[string]*internedKey{}}
	// Row groups of files in an object store are read more at once than
	// there are cores: each waits on a ranged GET.
	err := par.ForEach(ctx, len(rowGroups), t.Readers(parallel), func(i int) error {
		var err error
		per[i], err = readSlices(ctx, t, refs[rowGroups[i]], rowGroups[i], sliceCols, o, in)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errs.TransientErr(err)
		}
		return nil, err
	}
	return per, nil
}

// mergeSlices orders the slices every row group found and sums their
// rows and queries (per holds every row group, in order).
func mergeSlices(ctx context.Context, t *source.Table, per []*rgSlices, sliceCols []int, o BuildOptions) (*Histogram, *BuildExtra, error) {
	refs := t.RowGroups()
	queryCols := o.QueryCols
	global := map[string]int{}
	var all []Slice
	for _, k := range per {
		k.global = make([]int32, len(k.keys))
		for li, ik := range k.keys {
			g, ok := global[string(ik.key)]
			if !ok {
				g = len(all)
				global[string(ik.key)] = g
				all = append(all, Slice{Key: ik.key, Parts: ik.parts, Values: ik.values})
			}
			k.global[li] = int32(g)
			all[g].Rows += k.counts[li]
			all[g].InputRowGroups++
		}
	}
	h, rankOf := orderSlices(all)
	ex := &BuildExtra{}
	if o.Vectors || o.Counts {
		ex.RowGroups = make([]*RowGroupSlices, len(per))
		for i, k := range per {
			ranks := make([]int32, len(k.keys))
			for li := range ranks {
				ranks[li] = rankOf[k.global[li]]
			}
			var counts []int64
			if o.Counts {
				counts = k.counts
			}
			ex.RowGroups[i] = newRowGroupSlices(ranks, counts, k.words, k.bits)
			k.keys, k.counts, k.bits = nil, nil, nil // only the queries are left to merge
		}
	}
	if len(queryCols) == 0 {
		return h, ex, nil
	}
	queries := map[uint64]queryAgg{}
	for i, k := range per {
		for qh, a := range k.queries {
			a.slice = rankOf[k.global[a.slice]]
			g, ok := queries[qh]
			if ok && g.slice != a.slice {
				return nil, nil, splitQuery(ctx, t, sliceCols, queryCols, refs[g.rg], int(g.row), refs[i], int(a.row))
			}
			if ok {
				g.count += a.count
			} else {
				g = a
			}
			queries[qh] = g
		}
		per[i] = nil
	}
	qc := &QueryCounts{Queries: int64(len(queries)), PerSlice: make([]int64, len(all)), Items: make([]int64, 0, len(queries))}
	for _, a := range queries {
		qc.PerSlice[a.slice]++
		qc.Items = append(qc.Items, a.count)
	}
	ex.Queries = qc
	return h, ex, nil
}

// orderSlices puts merged slices (in first-seen order) in output order,
// by key, numbers their rows from 0 and returns the histogram with each
// first-seen slice's rank.
func orderSlices(all []Slice) (*Histogram, []int32) {
	order := make([]int, len(all))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return bytes.Compare(all[order[a]].Key, all[order[b]].Key) < 0 })
	rankOf := make([]int32, len(all))
	sorted := make([]Slice, len(all))
	for r, g := range order {
		rankOf[g] = int32(r)
		sorted[r] = all[g]
	}
	var start int64
	for i := range sorted {
		sorted[i].Start = start
		start += sorted[i].Rows
	}
	return NewHistogram(sorted), rankOf
}

// splitQuery words the error for a query seen at row ra of one row group
// and row rb of another with different slice keys.
func splitQuery(ctx context.Context, t *source.Table, sliceCols, queryCols []int, a source.RowGroupRef, ra int, b source.RowGroupRef, rb int) error {
	cols := append(append([]int{}, queryCols...), sliceCols...)
	recA, err := t.Read(ctx, a, cols, 1)
	if err != nil {
		return err
	}
	defer recA.Release()
	recB := recA
	if a != b {
		if recB, err = t.Read(ctx, b, cols, 1); err != nil {
			return err
		}
		defer recB.Release()
	}
	return splitErr(t, sliceCols, queryCols, recA, ra, recB, rb)
}

func splitErr(t *source.Table, sliceCols, queryCols []int, recA arrow.RecordBatch, ra int, recB arrow.RecordBatch, rb int) error {
	nq := len(queryCols)
	var q []any
	for c := 0; c < nq; c++ {
		q = append(q, Value(recA.Column(c), ra))
	}
	for k, col := range sliceCols {
		c := nq + k
		if !bytes.Equal(AppendKey(nil, recA.Column(c), ra), AppendKey(nil, recB.Column(c), rb)) {
			return errs.BadInputf("slice key %q must be query-level but varies within query %v: %v then %v",
				t.Schema.Field(col).Name, q, Value(recA.Column(c), ra), Value(recB.Column(c), rb))
		}
	}
	return errs.BadInputf("slice keys must be query-level but vary within query %v", q)
}

// checkUTF8 refuses a slice key value of a string column that is not valid
// UTF-8, which a Parquet STRING must be (DuckDB refuses such a file whole).
// The manifest, the reports and Hive folder names name a slice by its
// values as text, where invalid bytes read as U+FFFD: two slices could
// share one name, and a loader asking for one by value would get neither.
// Other columns' bytes are carried over unchanged; only keys are checked.
func checkUTF8(t *source.Table, ref source.RowGroupRef, sliceCols []int, arrs []arrow.Array, i int) error {
	for c, arr := range arrs {
		if v, ok := stringValue(arr, i); ok && !utf8.ValidString(v) {
			return errs.BadInputf("slice key %q: the value %q in %s, row group %d, is not valid UTF-8, which a Parquet string must be, so no manifest or report could name its slice (repair the column upstream, or slice by other --slice-keys)",
				t.Schema.Field(sliceCols[c]).Name, v, ref.File.Obj.URL, ref.RowGroup)
		}
	}
	return nil
}

// stringValue is arr[i] where arr holds strings (plain or dictionary
// encoded) and the value is not null.
func stringValue(arr arrow.Array, i int) (string, bool) {
	if arr.IsNull(i) {
		return "", false
	}
	switch a := arr.(type) {
	case *array.String:
		return a.Value(i), true
	case *array.LargeString:
		return a.Value(i), true
	case *array.Dictionary:
		return stringValue(a.Dictionary(), a.GetValueIndex(i))
	}
	return "", false
}

// keyIntern holds one copy of each slice key's bytes, parts and values for
// a whole key pass. Every row group of an unsorted table holds most slices,
// so copies per row group grew with row groups x slices: 16x the generated
// log (672 row groups, 1,200 slices) held over 100 MiB of them.
type keyIntern struct {
	mu sync.Mutex
	m  map[string]*internedKey
}

type internedKey struct {
	key    []byte
	parts  [][]byte
	values []any
}

// get returns the interned copy of key, made by build on first sight.
func (in *keyIntern) get(key []byte, build func() *internedKey) *internedKey {
	in.mu.Lock()
	defer in.mu.Unlock()
	if ik, ok := in.m[string(key)]; ok {
		return ik
	}
	ik := build()
	in.m[string(ik.key)] = ik
	return ik
}

func readSlices(ctx context.Context, t *source.Table, ref source.RowGroupRef, rgIndex int, sliceCols []int, o BuildOptions, in *keyIntern) (*rgSlices, error) {
	queryCols, vectors := o.QueryCols, o.Vectors
	cols := append(append([]int{}, queryCols...), sliceCols...)
	rec, err := t.Read(ctx, ref, cols, 1)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	n := int(rec.NumRows())
	k := &rgSlices{}
	if vectors {
		k.words = (n/VectorRows + 64) / 64
	}
	local := map[string]int{}
	if len(queryCols) > 0 {
		k.queries = map[uint64]queryAgg{}
		if o.QueryKeys {
			k.qkeys = map[uint64][]byte{}
		}
	}
	var buf, qk []byte
	nq := len(queryCols)
	arrs := rec.Columns()[nq:]
	for i := 0; i < n; i++ {
		buf = buf[:0]
		for c := range arrs {
			buf = AppendKey(buf, arrs[c], i)
		}
		id, ok := local[string(buf)]
		if !ok {
			if err := checkUTF8(t, ref, sliceCols, arrs, i); err != nil {
				return nil, err
			}
			id = len(k.keys)
			local[string(buf)] = id
			ik := in.get(buf, func() *internedKey {
				key := bytes.Clone(buf)
				parts := make([][]byte, len(arrs))
				vals := make([]any, len(arrs))
				off := 0
				for c := range arrs {
					end := len(AppendKey(key[:off:off], arrs[c], i))
					parts[c] = key[off:end]
					off = end
					vals[c] = Value(arrs[c], i)
				}
				return &internedKey{key: key, parts: parts, values: vals}
			})
			k.keys = append(k.keys, ik)
			k.counts = append(k.counts, 0)
			k.bits = append(k.bits, make([]uint64, k.words)...)
		}
		k.counts[id]++
		if vectors {
			v := i / VectorRows
			k.bits[id*k.words+v/64] |= 1 << (v % 64)
		}
		if nq > 0 {
			qk = qk[:0]
			for c := 0; c < nq; c++ {
				qk = AppendKey(qk, rec.Column(c), i)
			}
			h := xxhash.Sum64(qk)
			a, seen := k.queries[h]
			if !seen {
				a = queryAgg{slice: int32(id), rg: int32(rgIndex), row: int32(i)}
				if o.QueryKeys {
					k.qkeys[h] = bytes.Clone(qk)
				}
			} else if a.slice != int32(id) {
				return nil, splitErr(t, sliceCols, queryCols, rec, int(a.row), rec, i)
			}
			a.count++
			k.queries[h] = a
		}
	}
	return k, nil
}

// Locate returns the index of the slice holding output row `row` (the first
// slice ending after it; len(Slices) when none does).
func (h *Histogram) Locate(row int64) int {
	return sort.Search(len(h.Slices), func(i int) bool { return h.Slices[i].Start+h.Slices[i].Rows > row })
}

// NewHistogram rebuilds a histogram from its slices in output order (as a
// plan stores them): Key must be the concatenation of Parts.
func NewHistogram(slices []Slice) *Histogram {
	h := &Histogram{Slices: slices, rank: make(map[string]int32, len(slices))}
	for i, s := range slices {
		h.rank[string(s.Key)] = int32(i)
	}
	return h
}
