package partition

import (
	"bytes"
	"context"
	"sort"

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

type rgSlices struct {
	keys   [][]byte
	parts  [][][]byte
	values [][]any
	counts []int64
}

// Build reads the slice-key columns of every row group (only those) and
// returns the slices in output order with their row counts. Without slice
// keys the table is one slice.
func Build(ctx context.Context, t *source.Table, sliceCols []int, parallel int) (*Histogram, error) {
	refs := t.RowGroups()
	if len(sliceCols) == 0 {
		return &Histogram{Slices: []Slice{{Rows: t.Rows, InputRowGroups: len(refs)}}, rank: map[string]int32{"": 0}}, nil
	}
	per := make([]*rgSlices, len(refs))
	err := par.ForEach(ctx, len(refs), parallel, func(i int) error {
		var err error
		per[i], err = readSlices(ctx, t, refs[i], sliceCols)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errs.TransientErr(err)
		}
		return nil, err
	}
	global := map[string]int{}
	var all []Slice
	for _, k := range per {
		for li, key := range k.keys {
			g, ok := global[string(key)]
			if !ok {
				g = len(all)
				global[string(key)] = g
				all = append(all, Slice{Key: key, Parts: k.parts[li], Values: k.values[li]})
			}
			all[g].Rows += k.counts[li]
			all[g].InputRowGroups++
		}
	}
	sort.Slice(all, func(a, b int) bool { return bytes.Compare(all[a].Key, all[b].Key) < 0 })
	h := &Histogram{Slices: all, rank: make(map[string]int32, len(all))}
	var start int64
	for i := range all {
		all[i].Start = start
		start += all[i].Rows
		h.rank[string(all[i].Key)] = int32(i)
	}
	return h, nil
}

func readSlices(ctx context.Context, t *source.Table, ref source.RowGroupRef, cols []int) (*rgSlices, error) {
	rec, err := t.Read(ctx, ref, cols, 1)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	n := int(rec.NumRows())
	k := &rgSlices{}
	local := map[string]int{}
	var buf []byte
	arrs := rec.Columns()
	for i := 0; i < n; i++ {
		buf = buf[:0]
		for c := range arrs {
			buf = AppendKey(buf, arrs[c], i)
		}
		id, ok := local[string(buf)]
		if !ok {
			id = len(k.keys)
			local[string(buf)] = id
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
			k.keys = append(k.keys, key)
			k.parts = append(k.parts, parts)
			k.values = append(k.values, vals)
			k.counts = append(k.counts, 0)
		}
		k.counts[id]++
	}
	return k, nil
}
