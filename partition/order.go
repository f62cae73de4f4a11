package partition

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/source"
)

// Slice is one distinct slice-key tuple and where its rows land in the output.
type Slice struct {
	// Key is the encoded tuple (see AppendKey).
	Key []byte
	// Values are the tuple's values, one per slice key (see Value).
	Values []any
	// Rows is the slice's row count; Start the output index of its first row.
	Rows  int64
	Start int64
}

// Order is the total order of a table's rows.
type Order struct {
	// Slices in output order. Without slice keys there is one slice holding
	// every row, with no values.
	Slices []Slice
	// Perm[i] is the input position of output row i.
	Perm []int64
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

type rgKeys struct {
	ids      []uint32 // local slice id per row
	keys     [][]byte // local slice keys
	values   [][]any
	sortArea []byte
	sortOff  []uint32 // len rows+1
}

// Build reads the key columns of every row group (only those columns) and
// returns the total order of the table's rows. It holds 12 bytes per row plus
// the sort keys, if any.
func Build(ctx context.Context, t *source.Table, sliceCols, sortCols []int, parallel int) (*Order, error) {
	refs := t.RowGroups()
	cols := append(append([]int{}, sliceCols...), sortCols...)
	if parallel < 1 {
		parallel = 1
	}
	per := make([]*rgKeys, len(refs))
	if len(cols) > 0 {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		next := make(chan int, len(refs))
		for i := range refs {
			next <- i
		}
		close(next)
		for w := 0; w < parallel; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					mu.Lock()
					stop := first != nil
					mu.Unlock()
					if stop {
						continue
					}
					k, err := readKeys(ctx, t, refs[i], cols, len(sliceCols))
					mu.Lock()
					if err != nil && first == nil {
						first = err
					}
					per[i] = k
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if first != nil {
			return nil, first
		}
	}
	return assemble(t, refs, per, len(sliceCols) > 0, len(sortCols) > 0), nil
}

func readKeys(ctx context.Context, t *source.Table, ref source.RowGroupRef, cols []int, nSlice int) (*rgKeys, error) {
	rec, err := t.Read(ctx, ref, cols, 1)
	if err != nil {
		return nil, err
	}
	defer rec.Release()
	n := int(rec.NumRows())
	k := &rgKeys{ids: make([]uint32, n)}
	local := map[string]uint32{}
	var buf []byte
	arrs := rec.Columns()
	for i := 0; i < n; i++ {
		buf = buf[:0]
		for c := 0; c < nSlice; c++ {
			buf = AppendKey(buf, arrs[c], i)
		}
		id, ok := local[string(buf)]
		if !ok {
			id = uint32(len(k.keys))
			local[string(buf)] = id
			k.keys = append(k.keys, bytes.Clone(buf))
			vals := make([]any, nSlice)
			for c := 0; c < nSlice; c++ {
				vals[c] = Value(arrs[c], i)
			}
			k.values = append(k.values, vals)
		}
		k.ids[i] = id
	}
	if len(arrs) > nSlice {
		k.sortOff = make([]uint32, n+1)
		for i := 0; i < n; i++ {
			for c := nSlice; c < len(arrs); c++ {
				k.sortArea = AppendKey(k.sortArea, arrs[c], i)
			}
			k.sortOff[i+1] = uint32(len(k.sortArea))
		}
	}
	return k, nil
}

func assemble(t *source.Table, refs []source.RowGroupRef, per []*rgKeys, hasSlices, hasSort bool) *Order {
	n := t.Rows
	o := &Order{Perm: make([]int64, n)}
	if !hasSlices && !hasSort {
		for i := range o.Perm {
			o.Perm[i] = int64(i)
		}
		o.Slices = []Slice{{Rows: n}}
		return o
	}
	// Global slice ids, ranked by key.
	global := map[string]int{}
	var keys [][]byte
	var values [][]any
	if !hasSlices {
		keys, values = [][]byte{nil}, [][]any{nil}
	}
	remap := make([][]int, len(per))
	for r, k := range per {
		if !hasSlices {
			remap[r] = []int{0}
			continue
		}
		remap[r] = make([]int, len(k.keys))
		for li, key := range k.keys {
			g, ok := global[string(key)]
			if !ok {
				g = len(keys)
				global[string(key)] = g
				keys = append(keys, key)
				values = append(values, k.values[li])
			}
			remap[r][li] = g
		}
	}
	rank := make([]int, len(keys))
	byKey := make([]int, len(keys))
	for i := range byKey {
		byKey[i] = i
	}
	sort.Slice(byKey, func(a, b int) bool { return bytes.Compare(keys[byKey[a]], keys[byKey[b]]) < 0 })
	for r, g := range byKey {
		rank[g] = r
	}
	counts := make([]int64, len(keys))
	sliceOf := make([]uint32, n) // rank per position
	for r, ref := range refs {
		off := ref.Offset()
		k := per[r]
		for i := int64(0); i < ref.Rows(); i++ {
			g := 0
			if hasSlices {
				g = remap[r][k.ids[i]]
			}
			rk := rank[g]
			sliceOf[off+i] = uint32(rk)
			counts[rk]++
		}
	}
	o.Slices = make([]Slice, len(keys))
	var start int64
	for r, g := range byKey {
		o.Slices[r] = Slice{Key: keys[g], Values: values[g], Rows: counts[r], Start: start}
		if !hasSlices {
			o.Slices[r].Values = nil
		}
		start += counts[r]
	}
	// Counting sort by slice rank, stable in input position.
	next := make([]int64, len(o.Slices))
	for r := range o.Slices {
		next[r] = o.Slices[r].Start
	}
	for p := int64(0); p < n; p++ {
		r := sliceOf[p]
		o.Perm[next[r]] = p
		next[r]++
	}
	if hasSort {
		// Locate each position's sort key.
		sortKey := func(p int64) []byte {
			// binary search the row group holding p
			r := sort.Search(len(refs), func(j int) bool { return refs[j].Offset()+refs[j].Rows() > p })
			k := per[r]
			i := p - refs[r].Offset()
			return k.sortArea[k.sortOff[i]:k.sortOff[i+1]]
		}
		for _, s := range o.Slices {
			seg := o.Perm[s.Start : s.Start+s.Rows]
			keyed := make([]struct {
				key []byte
				pos int64
			}, len(seg))
			for i, p := range seg {
				keyed[i].key, keyed[i].pos = sortKey(p), p
			}
			slices.SortStableFunc(keyed, func(a, b struct {
				key []byte
				pos int64
			}) int {
				return bytes.Compare(a.key, b.key)
			})
			for i := range keyed {
				seg[i] = keyed[i].pos
			}
		}
	}
	return o
}
