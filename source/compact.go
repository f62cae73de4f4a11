package source

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// minCompact is the smallest buffer compact copies: below it the slack is
// a few pages at most.
const minCompact = 64 << 10

// compact returns arr with every buffer whose backing array is over a
// quarter larger than its bytes copied into one of its own size, and
// releases arr when it made a copy (else returns it as it is).
//
// arrow-go's column readers grow their buffers as they decode and shrink
// them by reslicing, so a decoded array can hold twice its bytes: a row
// group of 65,536 rows (a power of two, a common writer setting) reserves
// for 65,536 values, then for one more batch when full, and keeps the
// 131,072-value array; strings grow by doubling. The Go collector keeps a
// whole backing array alive for any slice of it, so the slack is heap for
// as long as the array lives: 130 MB of the 440 MB heap that held the 1M-row
// log in memory (docs/benchmarks.md). The copy goes to a buffer of the
// array's size, and the large one back to the allocator, where the next row
// group's reader takes it (internal/arrowmem), so reading faults in about
// the table's bytes rather than twice them.
func compact(arr arrow.Array, mem memory.Allocator) arrow.Array {
	d, changed := compactData(arr.Data(), mem)
	if !changed {
		return arr
	}
	out := array.MakeFromData(d)
	d.Release()
	arr.Release()
	return out
}

// compactData is compact for one ArrayData and its children: it returns d
// itself (not retained) when nothing was copied, else new data the caller
// releases.
func compactData(d arrow.ArrayData, mem memory.Allocator) (arrow.ArrayData, bool) {
	if d.DataType().ID() == arrow.DICTIONARY {
		return d, false // not produced by the readers here; left as it is
	}
	bufs := d.Buffers()
	var nb []*memory.Buffer
	for i, b := range bufs {
		if b == nil || b.Len() < minCompact || cap(b.Buf()) <= b.Len()+b.Len()/4 {
			continue
		}
		if nb == nil {
			nb = append([]*memory.Buffer(nil), bufs...)
		}
		c := memory.NewResizableBuffer(mem)
		c.Resize(b.Len())
		copy(c.Bytes(), b.Bytes())
		nb[i] = c
	}
	children := d.Children()
	var nc []arrow.ArrayData
	for i, ch := range children {
		c, changed := compactData(ch, mem)
		if !changed {
			continue
		}
		if nc == nil {
			nc = append([]arrow.ArrayData(nil), children...)
		}
		nc[i] = c
	}
	if nb == nil && nc == nil {
		return d, false
	}
	useBufs, useChildren := bufs, children
	if nb != nil {
		useBufs = nb
	}
	if nc != nil {
		useChildren = nc
	}
	out := array.NewData(d.DataType(), d.Len(), useBufs, useChildren, d.NullN(), d.Offset())
	// NewData retained what it was given: drop the references made here.
	for i, b := range nb {
		if b != bufs[i] {
			b.Release()
		}
	}
	for i, c := range nc {
		if c != children[i] {
			c.Release()
		}
	}
	return out, true
}
