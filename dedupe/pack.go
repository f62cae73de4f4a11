package dedupe

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/partition"
)

// Packer turns flat rows in key order into packed rows, one per query.
type Packer struct {
	l     *Layout
	carry arrow.RecordBatch // flat rows of the trailing, maybe incomplete, query
	// MaxItems caps the items of one query (0: no cap); a larger query is an
	// error naming it, so memory stays bounded.
	MaxItems int64
	// Queries and Items count what was emitted; ItemsPerQuery lists each
	// query's item count in order.
	Queries, Items int64
	ItemsPerQuery  []int64
}

// NewPacker returns a packer for the layout.
func NewPacker(l *Layout) *Packer { return &Packer{l: l} }

// Add appends flat rows (schema l.Flat) and returns the complete queries
// packed, in order (none when no query is complete yet). The last query of
// rec is held back until the next Add or Flush, since it may continue. Only
// a query that continues from the previous call is copied; the rest is
// packed without copying.
func (p *Packer) Add(ctx context.Context, rec arrow.RecordBatch) ([]arrow.RecordBatch, error) {
	var out []arrow.RecordBatch
	fail := func(err error) ([]arrow.RecordBatch, error) {
		for _, r := range out {
			r.Release()
		}
		return nil, err
	}
	rest := rec
	rest.Retain()
	defer func() { rest.Release() }()
	starts := p.starts(rest)
	if p.carry != nil && len(starts) > 0 {
		// Does rec begin with the carried query?
		if p.sameQuery(p.carry, int(p.carry.NumRows())-1, rest, 0) {
			e := int64(rest.NumRows())
			if len(starts) > 1 {
				e = int64(starts[1])
			}
			head := rest.NewSlice(0, e)
			joined, err := concatRecords(p.l.Flat, p.carry, head)
			head.Release()
			if err != nil {
				return fail(err)
			}
			p.carry.Release()
			p.carry = nil
			if e == rest.NumRows() { // the query goes on
				p.carry = joined
				if p.MaxItems > 0 && p.carry.NumRows() > p.MaxItems {
					return fail(p.tooBig(p.carry))
				}
				return nil, nil
			}
			packed, err := p.pack(ctx, joined, []int{0})
			joined.Release()
			if err != nil {
				return fail(err)
			}
			out = append(out, packed)
			next := rest.NewSlice(e, rest.NumRows())
			rest.Release()
			rest = next
			starts = p.starts(rest)
		} else {
			packed, err := p.Flush(ctx)
			if err != nil {
				return fail(err)
			}
			if packed != nil {
				out = append(out, packed)
			}
		}
	}
	if len(starts) == 0 {
		return out, nil
	}
	last := starts[len(starts)-1]
	p.carry = rest.NewSlice(int64(last), rest.NumRows())
	if p.MaxItems > 0 && p.carry.NumRows() > p.MaxItems {
		return fail(p.tooBig(p.carry))
	}
	if last > 0 {
		head := rest.NewSlice(0, int64(last))
		packed, err := p.pack(ctx, head, starts[:len(starts)-1])
		head.Release()
		if err != nil {
			return fail(err)
		}
		out = append(out, packed)
	}
	return out, nil
}

// sameQuery reports whether row i of a and row j of b have the same key.
func (p *Packer) sameQuery(a arrow.RecordBatch, i int, b arrow.RecordBatch, j int) bool {
	var ka, kb []byte
	for _, c := range p.l.QueryKey {
		ka = partition.AppendKey(ka, a.Column(c), i)
		kb = partition.AppendKey(kb, b.Column(c), j)
	}
	return bytes.Equal(ka, kb)
}

// Flush packs the held-back query; nil when there is none.
func (p *Packer) Flush(ctx context.Context) (arrow.RecordBatch, error) {
	if p.carry == nil || p.carry.NumRows() == 0 {
		return nil, nil
	}
	c := p.carry
	p.carry = nil
	defer c.Release()
	return p.pack(ctx, c, []int{0})
}

// Pending reports whether a query is held back.
func (p *Packer) Pending() bool { return p.carry != nil && p.carry.NumRows() > 0 }

func (p *Packer) tooBig(rec arrow.RecordBatch) error {
	var key []any
	for _, c := range p.l.QueryKey {
		key = append(key, partition.Value(rec.Column(c), 0))
	}
	return fmt.Errorf("query %v has more than %d items; raise --max-items-per-query (and --memory-limit)", key, p.MaxItems)
}

// starts returns the row index where each query of rec starts.
func (p *Packer) starts(rec arrow.RecordBatch) []int {
	n := int(rec.NumRows())
	var out []int
	var prev, cur []byte
	for i := 0; i < n; i++ {
		cur = cur[:0]
		for _, c := range p.l.QueryKey {
			cur = partition.AppendKey(cur, rec.Column(c), i)
		}
		if i == 0 || !bytes.Equal(prev, cur) {
			out = append(out, i)
		}
		prev, cur = cur, prev
	}
	return out
}

// pack builds one packed row per query of rec; starts are the queries'
// first rows (starts[0] == 0).
func (p *Packer) pack(ctx context.Context, rec arrow.RecordBatch, starts []int) (arrow.RecordBatch, error) {
	n := int(rec.NumRows())
	mem := memory.DefaultAllocator
	b := array.NewInt64Builder(mem)
	for _, s := range starts {
		b.Append(int64(s))
	}
	idx := b.NewInt64Array()
	b.Release()
	defer idx.Release()
	cols := make([]arrow.Array, 0, len(p.l.QueryColumns)+1)
	release := func() {
		for _, a := range cols {
			a.Release()
		}
	}
	for _, c := range p.l.QueryColumns {
		a, err := compute.TakeArray(ctx, rec.Column(c), idx)
		if err != nil {
			release()
			return nil, fmt.Errorf("pack column %s: %w", p.l.Flat.Field(c).Name, err)
		}
		cols = append(cols, a)
	}
	itemType := p.l.Packed.Field(len(p.l.QueryColumns)).Type.(*arrow.ListType)
	st := itemType.Elem().(*arrow.StructType)
	children := make([]arrow.ArrayData, len(p.l.ItemColumns))
	for i, c := range p.l.ItemColumns {
		children[i] = rec.Column(c).Data()
	}
	sd := array.NewData(st, n, []*memory.Buffer{nil}, children, 0, 0)
	defer sd.Release()
	offsets := make([]int32, len(starts)+1)
	for i, s := range starts {
		offsets[i] = int32(s)
		cnt := int64(n - s)
		if i+1 < len(starts) {
			cnt = int64(starts[i+1] - s)
		}
		p.ItemsPerQuery = append(p.ItemsPerQuery, cnt)
	}
	offsets[len(starts)] = int32(n)
	ob := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offsets))
	ld := array.NewData(itemType, len(starts), []*memory.Buffer{nil, ob}, []arrow.ArrayData{sd}, 0, 0)
	items := array.NewListData(ld)
	ld.Release()
	cols = append(cols, items)
	out := array.NewRecordBatch(p.l.Packed, cols, int64(len(starts)))
	release()
	p.Queries += int64(len(starts))
	p.Items += int64(n)
	return out, nil
}

// Unpack restores the flat rows of packed rows: each item becomes a row with
// its query's columns, in the flat schema's column order.
func Unpack(ctx context.Context, l *Layout, packed arrow.RecordBatch) (arrow.RecordBatch, error) {
	items := packed.Column(len(l.QueryColumns)).(*array.List)
	nq := items.Len()
	off := items.Offsets()
	first, last := int64(off[0]), int64(off[nq])
	b := array.NewInt64Builder(memory.DefaultAllocator)
	for q := 0; q < nq; q++ {
		for k := off[q]; k < off[q+1]; k++ {
			b.Append(int64(q))
		}
	}
	idx := b.NewInt64Array()
	b.Release()
	defer idx.Release()
	st := items.ListValues().(*array.Struct)
	cols := make([]arrow.Array, l.Flat.NumFields())
	release := func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}
	for i, c := range l.QueryColumns {
		a, err := compute.TakeArray(ctx, packed.Column(i), idx)
		if err != nil {
			release()
			return nil, err
		}
		cols[c] = a
	}
	for i, c := range l.ItemColumns {
		cols[c] = array.NewSlice(st.Field(i), first, last)
	}
	out := array.NewRecordBatch(l.Flat, cols, last-first)
	release()
	return out, nil
}

func concatRecords(schema *arrow.Schema, a, b arrow.RecordBatch) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, schema.NumFields())
	for c := range cols {
		x, err := array.Concatenate([]arrow.Array{a.Column(c), b.Column(c)}, memory.DefaultAllocator)
		if err != nil {
			for _, y := range cols[:c] {
				y.Release()
			}
			return nil, err
		}
		cols[c] = x
	}
	out := array.NewRecordBatch(schema, cols, a.NumRows()+b.NumRows())
	for _, x := range cols {
		x.Release()
	}
	return out, nil
}
