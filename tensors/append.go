package tensors

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/relayout/relayout/internal/par"
)

// SampleBytes returns the bytes each sample of rec in [lo, hi) adds to the
// tensors, in order: fixed sizes plus ragged values.
func (p *Plan) SampleBytes(rec arrow.RecordBatch, lo, hi int, out []int64) []int64 {
	out = out[:0]
	var items *array.List
	if p.packed {
		items = rec.Column(p.itemsCol).(*array.List)
	}
	// The ragged entries' list accessors, resolved once per record, not per row.
	type raggedSrc struct {
		la   listAccess
		item bool
		es   int64
	}
	var ragged []raggedSrc
	for _, e := range p.entries {
		if e.kind != kRagged {
			continue
		}
		r := raggedSrc{item: e.level == LevelItem, es: int64(e.conv.dt.Size())}
		if r.item {
			r.la, _ = listOf(items.ListValues().(*array.Struct).Field(e.srcs[0].child))
		} else {
			r.la, _ = listOf(rec.Column(e.srcs[0].col))
		}
		ragged = append(ragged, r)
	}
	for i := lo; i < hi; i++ {
		n := p.sampleBytes
		ilo, ihi := int64(0), int64(0)
		if items != nil {
			ilo, ihi = items.ValueOffsets(i)
			n += (ihi - ilo) * p.itemBytes
		}
		for _, r := range ragged {
			r0, r1 := int64(i), int64(i+1)
			if r.item {
				r0, r1 = ilo, ihi
			}
			if r1 > r0 {
				s, _ := r.la.bounds(int(r0))
				_, t := r.la.bounds(int(r1 - 1))
				n += (t - s) * r.es
			}
		}
		out = append(out, n)
	}
	return out
}

// Append converts samples [lo, hi) of rec (rows, or packed queries) into b.
func (p *Plan) Append(b *Buffers, rec arrow.RecordBatch, lo, hi int) error {
	if hi <= lo {
		return nil
	}
	ilo, ihi := 0, 0
	var items *array.List
	var itemStruct *array.Struct
	if p.packed {
		items = rec.Column(p.itemsCol).(*array.List)
		itemStruct = items.ListValues().(*array.Struct)
		s, _ := items.ValueOffsets(lo)
		_, e := items.ValueOffsets(hi - 1)
		ilo, ihi = int(s), int(e)
		d := b.Data[p.itemOffsets]
		for i := lo; i < hi; i++ {
			_, e := items.ValueOffsets(i)
			d = appendCast(d, []int64{b.Items + e - int64(ilo)}, I64)
		}
		b.Data[p.itemOffsets] = d
	}
	err := par.ForEach(context.Background(), len(p.entries), p.Parallel, func(k int) error {
		e := p.entries[k]
		arrs := make([]arrow.Array, len(e.srcs))
		for j, s := range e.srcs {
			if s.child >= 0 {
				arrs[j] = itemStruct.Field(s.child)
			} else {
				arrs[j] = rec.Column(s.col)
			}
		}
		r0, r1 := lo, hi
		if e.level == LevelItem {
			r0, r1 = ilo, ihi
		}
		if err := e.append(b, arrs, r0, r1); err != nil {
			return fmt.Errorf("tensor %s from column %s: %w", e.name, e.srcs[0].name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.Rows += int64(hi - lo)
	b.Items += int64(ihi - ilo)
	return nil
}

func (e *entry) append(b *Buffers, arrs []arrow.Array, lo, hi int) error {
	var err error
	out := e.out[0]
	switch e.kind {
	case kScalar:
		if b.Data[out], err = appendArray(b.Data[out], arrs[0], lo, hi, &e.conv); err != nil {
			return err
		}
		if e.valid {
			b.Data[e.out[1]] = appendValid(b.Data[e.out[1]], arrs[0], lo, hi)
		}
	case kGroup:
		es := e.conv.dt.Size()
		n, f := hi-lo, len(arrs)
		var tmp []byte
		d, t := grow(b.Data[out], n*f*es)
		for j, a := range arrs {
			tmp, err = appendArray(tmp[:0], a, lo, hi, &e.conv)
			if err != nil {
				return err
			}
			interleave(t, tmp, j, f, es)
		}
		b.Data[out] = d
		if e.valid {
			v, t := grow(b.Data[e.out[1]], n*f)
			for j, a := range arrs {
				for i := 0; i < n; i++ {
					if a.IsValid(lo + i) {
						t[i*f+j] = 1
					} else {
						t[i*f+j] = 0
					}
				}
			}
			b.Data[e.out[1]] = v
		}
	case kFixed, kRagged:
		a := arrs[0]
		la, _ := listOf(a)
		es := e.conv.dt.Size()
		d := b.Data[out]
		var offs []int64
		end := b.ends[out]
		// Runs of valid lists are contiguous in the values array.
		for i := lo; i < hi; {
			if a.IsNull(i) {
				if e.kind == kFixed {
					for k := 0; k < e.width; k++ {
						d = append(d, e.conv.fill...)
					}
				}
				offs = append(offs, end)
				i++
				continue
			}
			j := i
			s0, _ := la.bounds(i)
			for j < hi && a.IsValid(j) {
				s, t := la.bounds(j)
				if e.kind == kFixed && t-s != int64(e.width) {
					return fmt.Errorf("row %d holds a list of %d elements; the tensor shape %v needs %d", j, t-s, e.shape, e.width)
				}
				end += t - s
				offs = append(offs, end)
				j++
			}
			_, t1 := la.bounds(j - 1)
			if d, err = appendArray(d, la.values, int(s0), int(t1), &e.conv); err != nil {
				return err
			}
			i = j
		}
		_ = es
		b.Data[out] = d
		if e.kind == kRagged {
			b.Data[e.out[1]] = appendCast(b.Data[e.out[1]], offs, I64)
			b.ends[out] = end
		}
		if e.valid {
			b.Data[e.out[len(e.out)-1]] = appendValid(b.Data[e.out[len(e.out)-1]], a, lo, hi)
		}
	}
	return nil
}

// interleave writes column j of an [n, f] row-major matrix of es-byte
// elements from col.
func interleave(dst, col []byte, j, f, es int) {
	n := len(col) / es
	switch es {
	case 1:
		for i := 0; i < n; i++ {
			dst[i*f+j] = col[i]
		}
	case 2:
		d, s := view[uint16](dst, n*f), view[uint16](col, n)
		for i := 0; i < n; i++ {
			d[i*f+j] = s[i]
		}
	case 4:
		d, s := view[uint32](dst, n*f), view[uint32](col, n)
		for i := 0; i < n; i++ {
			d[i*f+j] = s[i]
		}
	default:
		d, s := view[uint64](dst, n*f), view[uint64](col, n)
		for i := 0; i < n; i++ {
			d[i*f+j] = s[i]
		}
	}
}
