package loader

import (
	"fmt"
	mbits "math/bits"
	"os"
	"syscall"
	"unsafe"

	"github.com/relayout/relayout/manifests"
)

// ReadOptions configures a reader's epoch.
type ReadOptions struct {
	Assignment
	// Batch is the batch size in samples (queries when packed).
	Batch int64
	// Order is OrderWindow (default when Shuffle is set), OrderBlock
	// (relayout-order-v1) or OrderNone (the output order; the default
	// without Shuffle).
	Order string
	// Streams is relayout-order-v2's canonical streams (default:
	// World*NumWorkers). Any job whose World*NumWorkers divides Streams
	// reads the same global order: fix it to change world sizes, or to
	// resume on another, with the same order.
	Streams int
	// WindowBytes is the tensor bytes of samples permuted together, per
	// stream (default DefaultWindowBytes): a reader holds one window per
	// stream it reads.
	WindowBytes int64
	// PieceSamples cuts blocks into smaller read pieces (default: whole
	// blocks, BlockSamples): more mixing per batch when each reader owns
	// few blocks, at the cost of smaller reads.
	PieceSamples int64
	// Index adds the "_index" tensor (I64, each sample's global position
	// in the output) to every batch.
	Index bool
}

// IndexTensor is the name of the tensor ReadOptions.Index adds.
const IndexTensor = "_index"

func (o ReadOptions) order() string {
	if o.Order != "" {
		return o.Order
	}
	if o.Shuffle {
		return OrderWindow
	}
	return OrderNone
}

// WindowPlan returns relayout-order-v2's plan of the epoch for o.
func (d *Dataset) WindowPlan(o ReadOptions) (WindowPlan, error) {
	a := o.Assignment.withDefaults()
	mt := d.Manifest.Tensors
	p := WindowPlan{Samples: mt.Totals.Rows, BlockSamples: mt.Order.BlockSamples, Selection: d.sel, Weights: d.weights,
		Streams: o.Streams, Batch: o.Batch, Seed: a.Seed, Epoch: a.Epoch, PieceSamples: o.PieceSamples}
	if p.Streams == 0 {
		p.Streams = a.World * a.NumWorkers
	}
	if o.Batch <= 0 {
		return p, fmt.Errorf("batch size must be positive")
	}
	wbytes := o.WindowBytes
	if wbytes <= 0 && d.remote != nil {
		// A remote output's default window fits its cache: a quarter of it
		// per stream this reader serves (and the order depends only on
		// the window used: pass the same WindowBytes locally to match).
		per := max(p.Streams/max(a.World*a.NumWorkers, 1), 1)
		wbytes = max(min(DefaultWindowBytes, d.remote.limit/int64(4*per)), 1)
	}
	p.Window = WindowSamples(wbytes, mt.Totals.Bytes, mt.Totals.Rows, o.Batch)
	return p, nil
}

// Reader yields one reader's batches of an epoch, in order.
type Reader struct {
	d       *Dataset
	o       ReadOptions
	plan    WindowPlan
	batches []WindowBatch
	windows map[int][]Window // stream -> its windows
	cur     map[int]*windowBuf
	v1      [][]Range
	next    int
	bits    []uint64 // scratch for positions
	// remote plans a remote output's downloads (nil: local).
	remote *remotePlan
}

// windowBuf is a stream's current window: its pieces resolved to shard
// segments, and its permutation.
type windowBuf struct {
	index int
	segs  []segment
	ends  []int64 // window position past each segment
	perm  []int64
}

// segment is a piece's rows within one shard.
type segment struct {
	sh     *mapped
	lo, hi int64 // rows of the shard
	first  int64 // global index of row lo
}

// NewReader plans reader o's epoch. Shards are mapped as they are needed.
func (d *Dataset) NewReader(o ReadOptions) (*Reader, error) {
	r := &Reader{d: d, o: o, cur: map[int]*windowBuf{}}
	switch o.order() {
	case OrderBlock, OrderNone:
		if d.weights != nil {
			return nil, fmt.Errorf("weights need the window order")
		}
		a := o.Assignment
		a.Shuffle = o.order() == OrderBlock
		bs, err := Batches(d.Sequence(a.Seed, a.Epoch, a.Shuffle), o.Batch, a)
		if err != nil {
			return nil, err
		}
		r.v1 = bs
		if rc := d.remote; rc != nil && d.Manifest.Tensors.Totals.Bytes > rc.limit {
			// Block-order batches are views into the mapped shards, which
			// must then stay: the whole output in the cache.
			return nil, fmt.Errorf("cache %s: the %s order reads views of mapped shards, so a remote output's %d tensor bytes must fit CacheBytes (%d); use the window order or raise CacheBytes",
				rc.dir, o.order(), d.Manifest.Tensors.Totals.Bytes, rc.limit)
		}
		return r, nil
	case OrderWindow:
	default:
		return nil, fmt.Errorf("order %q: want window, block or none", o.Order)
	}
	p, err := d.WindowPlan(o)
	if err != nil {
		return nil, err
	}
	bs, own, err := p.ReaderBatches(o.Assignment)
	if err != nil {
		return nil, err
	}
	r.plan, r.batches, r.windows = p, bs, map[int][]Window{}
	for _, st := range own {
		r.windows[st.Index] = p.Windows(st)
	}
	if d.remote != nil {
		if err := r.planRemote(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Close stops the reader's downloads (a remote output's prefetcher); a
// reader that reached the end of its epoch has stopped already.
func (r *Reader) Close() {
	r.stop()
}

// Len is the number of batches the reader yields.
func (r *Reader) Len() int {
	if r.v1 != nil {
		return len(r.v1)
	}
	return len(r.batches)
}

// Next returns the next batch, or nil at the end of the epoch.
func (r *Reader) Next() (*Batch, error) {
	if r.v1 != nil {
		if r.next >= len(r.v1) {
			return nil, nil
		}
		rs := r.v1[r.next]
		r.next++
		b, err := r.d.Batch(rs)
		if err == nil && r.o.Index {
			var idx []int64
			for _, x := range rs {
				for s := x.Start; s < x.End; s++ {
					idx = append(idx, s)
				}
			}
			b.Tensors = append(b.Tensors, indexTensor(idx))
		}
		return b, err
	}
	if r.next >= len(r.batches) {
		r.stop()
		return nil, nil
	}
	j := r.next
	wb := r.batches[j]
	r.next++
	buf := r.cur[wb.Stream]
	if buf == nil || buf.index != wb.Window {
		w := r.windows[wb.Stream][wb.Window]
		if r.remote != nil {
			r.opened(winRef{wb.Stream, wb.Window})
		}
		var err error
		if buf, err = r.d.openWindow(w); err != nil {
			r.stop()
			return nil, err
		}
		r.cur[wb.Stream] = buf
	}
	idx := r.positions(buf.perm, wb)
	b, g := r.d.gather(buf, idx, r.o.Index)
	if r.o.Index {
		b.Tensors = append(b.Tensors, indexTensor(g))
	}
	if r.remote != nil {
		if w := (winRef{wb.Stream, wb.Window}); r.remote.lastUse[w] == j {
			// The batch is a copy (gather): the window's shards may go.
			delete(r.cur, wb.Stream)
			r.windowDone(w)
		}
	}
	return b, nil
}

// positions is BatchPositions with a bitmap over the window instead of a
// sort: mark the batch's positions, then list the marked ones in order.
func (r *Reader) positions(perm []int64, wb WindowBatch) []int64 {
	words := (len(perm) + 63) / 64
	if int64(words) > 16*wb.Count { // a sparse batch of a large window: sort
		return BatchPositions(perm, wb)
	}
	if cap(r.bits) < words {
		r.bits = make([]uint64, words)
	}
	bits := r.bits[:words]
	clear(bits)
	for _, q := range perm[wb.First : wb.First+wb.Count] {
		bits[q>>6] |= 1 << (q & 63)
	}
	out := make([]int64, 0, wb.Count)
	for i, w := range bits {
		for w != 0 {
			out = append(out, int64(i)*64+int64(mbits.TrailingZeros64(w)))
			w &= w - 1
		}
	}
	return out
}

// openWindow resolves a window's pieces to shard segments and asks the
// kernel to read them ahead, piece by piece in order (one sequential read
// of each tensor's rows per piece), so the gather finds them in memory.
func (d *Dataset) openWindow(w Window) (*windowBuf, error) {
	segs, err := d.segments(w.Pieces)
	if err != nil {
		return nil, err
	}
	buf := &windowBuf{index: w.Index, perm: w.Perm, segs: segs}
	var pos int64
	for _, sg := range segs {
		pos += sg.hi - sg.lo
		buf.ends = append(buf.ends, pos)
		willNeed(sg.sh, sg.lo, sg.hi)
	}
	return buf, nil
}

// willNeed advises the kernel that rows [lo, hi) of every tensor of a
// mapped shard are about to be read.
func willNeed(sh *mapped, lo, hi int64) {
	base := uintptr(unsafe.Pointer(unsafe.SliceData(sh.data)))
	for k := range sh.views {
		a, e := sh.rowBytes(k, lo, hi)
		if e <= a {
			continue
		}
		v := sh.views[k].data
		start := int64(uintptr(unsafe.Pointer(unsafe.SliceData(v)))-base) + a
		p0 := start &^ (pageSize - 1)
		_ = syscall.Madvise(sh.data[p0:start+(e-a)], syscall.MADV_WILLNEED)
	}
}

var pageSize = int64(os.Getpagesize())

// rowBytes returns the byte range, within the shard's k-th schema tensor,
// of the shard's samples [lo, hi): their rows at the tensor's level (items
// via query.item_offsets), their values (via the tensor's offsets), or
// their offsets entries.
func (sh *mapped) rowBytes(k int, lo, hi int64) (int64, int64) {
	v := &sh.views[k]
	switch v.kind {
	case "offsets":
		if v.offsItem {
			lo, hi = sh.items[lo], sh.items[hi]
		}
		return lo * 8, (hi + 1) * 8
	case "values":
		if v.offsItem {
			lo, hi = sh.items[lo], sh.items[hi]
		}
		return v.offs[lo] * v.per, v.offs[hi] * v.per
	}
	if v.item {
		lo, hi = sh.items[lo], sh.items[hi]
	}
	return lo * v.per, hi * v.per
}

// gather copies window positions idx (ascending) into a new batch, sample
// by sample: each sample is one contiguous range of every tensor in its
// shard (its row, its items, its values); offsets are rebased. It returns
// the samples' global indices too when index is set.
func (d *Dataset) gather(w *windowBuf, idx []int64, index bool) (*Batch, []int64) {
	schema := d.Manifest.Tensors.Schema
	// Positions ascend, so samples come in runs of one segment each.
	type run struct {
		sh     *mapped
		i0, i1 int
	}
	rows := make([]int64, len(idx))
	var runs []run
	var global []int64
	if index {
		global = make([]int64, len(idx))
	}
	k := -1
	for i, q := range idx {
		if k < 0 || q >= w.ends[k] {
			for k++; q >= w.ends[k]; k++ {
			}
			runs = append(runs, run{sh: w.segs[k].sh, i0: i})
		}
		runs[len(runs)-1].i1 = i + 1
		sg := &w.segs[k]
		start := w.ends[k] - (sg.hi - sg.lo)
		rows[i] = sg.lo + q - start
		if index {
			global[i] = sg.first + q - start
		}
	}
	out := &Batch{Samples: int64(len(idx)), Tensors: make([]Tensor, 0, len(schema))}
	for ti, t := range schema {
		if t.Kind == "offsets" {
			offs := make([]int64, 1, len(idx)+1)
			for _, rn := range runs {
				v := &rn.sh.views[ti]
				for _, row := range rows[rn.i0:rn.i1] {
					a, e := row, row+1
					if v.offsItem {
						a, e = rn.sh.items[a], rn.sh.items[e]
					}
					base := offs[len(offs)-1] - v.offs[a]
					for _, x := range v.offs[a+1 : e+1] {
						offs = append(offs, x+base)
					}
				}
			}
			out.Tensors = append(out.Tensors, Tensor{Name: t.Name, DType: t.DType, Shape: []int{len(offs)},
				Data: unsafe.Slice((*byte)(unsafe.Pointer(&offs[0])), len(offs)*8)})
			continue
		}
		fixed := t.Kind != "values" && t.Level != "item"
		per := rowSizeOf(t)
		var n int64
		var spans [][2]int64 // ragged tensors: each sample's byte range, found once
		if fixed {
			n = int64(len(rows)) * per
		} else {
			spans = make([][2]int64, 0, len(rows))
			for _, rn := range runs {
				for _, row := range rows[rn.i0:rn.i1] {
					a, e := rn.sh.rowBytes(ti, row, row+1)
					spans = append(spans, [2]int64{a, e})
					n += e - a
				}
			}
		}
		data := make([]byte, n)
		var off int64
		for _, rn := range runs {
			src := rn.sh.views[ti].data
			rs := rows[rn.i0:rn.i1]
			switch {
			case fixed && per == 8:
				d, s := u64s(data[off:]), u64s(src)
				for i, row := range rs {
					d[i] = s[row]
				}
				off += int64(len(rs)) * 8
			case fixed && per == 4:
				d, s := u32s(data[off:]), u32s(src)
				for i, row := range rs {
					d[i] = s[row]
				}
				off += int64(len(rs)) * 4
			case fixed && per%8 == 0:
				wd := per / 8
				d, s := u64s(data[off:]), u64s(src)
				for i, row := range rs {
					dr, sr := d[int64(i)*wd:int64(i+1)*wd], s[row*wd:(row+1)*wd]
					for x := range dr {
						dr[x] = sr[x]
					}
				}
				off += int64(len(rs)) * per
			case fixed:
				for _, row := range rs {
					off += copyRow(data[off:], src[row*per:(row+1)*per])
				}
			default:
				for _, sp := range spans[rn.i0:rn.i1] {
					off += copyRow(data[off:], src[sp[0]:sp[1]])
				}
			}
		}
		if t.Kind == "values" {
			per = dtypeSize[t.DType]
		}
		nrows := 0
		if per > 0 {
			nrows = int(n / per)
		}
		out.Tensors = append(out.Tensors, Tensor{Name: t.Name, DType: t.DType, Shape: append([]int{nrows}, t.Shape...), Data: data})
	}
	return out, global
}

// copyRow copies a short range: word by word when it is whole words
// (cheaper than a memmove call for the 1-64 byte rows most tensors have).
func copyRow(dst, src []byte) int64 {
	switch n := len(src); {
	case n == 8:
		*(*uint64)(unsafe.Pointer(&dst[0])) = *(*uint64)(unsafe.Pointer(&src[0]))
	case n == 4:
		*(*uint32)(unsafe.Pointer(&dst[0])) = *(*uint32)(unsafe.Pointer(&src[0]))
	case n > 0 && n <= 128 && n%8 == 0:
		d, s := u64s(dst[:n]), u64s(src)
		for k := range s {
			d[k] = s[k]
		}
	default:
		copy(dst, src)
	}
	return int64(len(src))
}

func rowSizeOf(t manifests.Tensor) int64 {
	per := dtypeSize[t.DType]
	for _, x := range t.Shape {
		per *= int64(x)
	}
	return per
}

func indexTensor(idx []int64) Tensor {
	t := Tensor{Name: IndexTensor, DType: "I64", Shape: []int{len(idx)}}
	if len(idx) > 0 {
		t.Data = unsafe.Slice((*byte)(unsafe.Pointer(&idx[0])), len(idx)*8)
	}
	return t
}

func u16s(b []byte) []uint16 {
	if len(b) < 2 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

func u32s(b []byte) []uint32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func u64s(b []byte) []uint64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}
