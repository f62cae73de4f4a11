package writer

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/tensors"
)

// chunked is one tensor's bytes as the sealed blocks of a shard's buffers.
type chunked struct {
	bs   [][]byte
	ends []int64 // running end of each block
}

func newChunked(bs [][]byte) chunked {
	c := chunked{bs: bs, ends: make([]int64, len(bs))}
	var n int64
	for i, b := range bs {
		n += int64(len(b))
		c.ends[i] = n
	}
	return c
}

// int64At is the little-endian int64 at byte offset off (8-aligned, so
// never split between blocks: each block holds whole elements).
func (c chunked) int64At(off int64) int64 {
	i := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] > off })
	start := c.ends[i] - int64(len(c.bs[i]))
	return int64(binary.LittleEndian.Uint64(c.bs[i][off-start:]))
}

// feed hashes bytes [a, e).
func (c chunked) feed(h *xxhash.Digest, a, e int64) {
	i := sort.Search(len(c.ends), func(i int) bool { return c.ends[i] > a })
	for ; a < e && i < len(c.bs); i++ {
		start := c.ends[i] - int64(len(c.bs[i]))
		hi := min(e, c.ends[i])
		h.Write(c.bs[i][a-start : hi-start])
		a = hi
	}
}

// blockTable cuts a shard whose first sample is the output's firstRow at
// every multiple of blockSamples and locates each block in every tensor
// (order is the tensors' data order and begin[i] tensor i's offset in the
// data buffer, in plan order).
func blockTable(plan *tensors.Plan, b *tensors.Buffers, order []int, begin []int64, firstRow, blockSamples int64) *manifests.BlockTable {
	ts := plan.Tensors()
	cs := make([]chunked, len(ts))
	byName := map[string]int{}
	for i, t := range ts {
		cs[i] = newChunked(b.Blocks(i))
		byName[t.Name] = i
	}
	items, packed := byName["query.item_offsets"]
	entries := func(level string, lo, hi int64) (int64, int64) {
		if level == tensors.LevelItem && packed {
			return cs[items].int64At(lo * 8), cs[items].int64At(hi * 8)
		}
		return lo, hi
	}
	// rangeOf is rows [lo, hi) of tensor i, in bytes of the tensor.
	rangeOf := func(i int, lo, hi int64) (int64, int64) {
		t := ts[i]
		switch t.Kind {
		case tensors.KindOffsets:
			a, e := entries(t.Level, lo, hi)
			return a * 8, (e + 1) * 8
		case tensors.KindValues:
			o := byName[t.Offsets]
			a, e := entries(ts[o].Level, lo, hi)
			es := int64(tensors.DType(t.DType).Size())
			return cs[o].int64At(a*8) * es, cs[o].int64At(e*8) * es
		}
		per := int64(tensors.DType(t.DType).Size())
		for _, x := range t.Shape {
			per *= int64(x)
		}
		a, e := entries(t.Level, lo, hi)
		return a * per, e * per
	}
	bt := &manifests.BlockTable{Rows: manifests.BlockRows(firstRow, b.Rows, blockSamples)}
	h := xxhash.New()
	for k := 0; k+1 < len(bt.Rows); k++ {
		lo, hi := bt.Rows[k], bt.Rows[k+1]
		rs := make([]int64, 2*len(ts))
		for i := range ts {
			a, e := rangeOf(i, lo, hi)
			rs[2*i], rs[2*i+1] = begin[i]+a, begin[i]+e
		}
		// Hashed in data order, as a reader lays the block out.
		h.Reset()
		for _, i := range order {
			cs[i].feed(h, rs[2*i]-begin[i], rs[2*i+1]-begin[i])
		}
		bt.Ranges = append(bt.Ranges, rs)
		bt.XXHash64 = append(bt.XXHash64, fmt.Sprintf("%016x", h.Sum64()))
	}
	return bt
}
