package loader

import (
	"fmt"
	"math/bits"
	"os"
	"slices"
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
	// Reuse lets window-order readers scatter into the buffers of windows
	// they are done with, their own or an earlier Reuse reader's of the
	// same Dataset, instead of fresh memory (whose page faults cost more
	// than the scatter). A batch is then valid only until the reader
	// returns a batch of its stream's next window, or until another Reuse
	// reader opens a window after this one ended or was closed: for
	// loaders that copy each batch (to the device, to pinned memory)
	// before asking for the next. Without it a batch stays valid while it
	// is referenced.
	Reuse bool
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
	// remote plans a remote output's downloads (nil: local).
	remote *remotePlan
}

// windowBuf is a stream's current window: its pieces resolved to shard
// segments, its permutation, and its samples scattered into batch order.
type windowBuf struct {
	index int
	segs  []segment
	perm  WindowPerm
	// out holds each schema tensor's samples in slot order (the window's
	// batches one after another).
	out    []slotted
	global []int64 // each slot's global sample index (ReadOptions.Index)
	slot   []int64 // scratch: each window position's slot
	fill   []int64 // scratch: samples placed per batch
	tab    RoundTables
	// itemEnds (packed outputs) is where each slot's items end in the
	// scattered item-level rows: itemEnds[s+1], counted in items, shared
	// by every item-level tensor of fixed-size rows.
	itemEnds []int64
	// stage holds rows read with pread (mapped.file) before they are
	// scattered: a chunk of one tensor, or a segment's rows of one.
	stage []byte
}

// grow returns b resized to n elements, reusing its memory when it can
// (the contents are not cleared).
func grow[T any](b []T, n int64) []T {
	if int64(cap(b)) >= n {
		return b[:n]
	}
	return make([]T, n)
}

// recycle hands a window's buffers to the dataset's pool (ReadOptions.Reuse).
func (d *Dataset) recycle(w *windowBuf) {
	if w != nil {
		d.pool.Put(w)
	}
}

// pooled takes a recycled window's buffers, or fresh ones.
func (d *Dataset) pooled() *windowBuf {
	if w, ok := d.pool.Get(); ok {
		return w
	}
	return &windowBuf{}
}

// release recycles the reader's open windows (ReadOptions.Reuse).
func (r *Reader) release() {
	if !r.o.Reuse {
		return
	}
	for s, w := range r.cur {
		r.d.recycle(w)
		delete(r.cur, s)
	}
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
	r.release()
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
		r.release()
		return nil, nil
	}
	wb := r.batches[r.next]
	r.next++
	buf := r.cur[wb.Stream]
	if buf == nil || buf.index != wb.Window {
		w := r.windows[wb.Stream][wb.Window]
		if r.remote != nil {
			if err := r.opened(winRef{wb.Stream, wb.Window}); err != nil {
				r.stop()
				return nil, err
			}
		}
		var into *windowBuf
		if r.o.Reuse {
			r.d.recycle(buf)
			delete(r.cur, wb.Stream)
			into = r.d.pooled()
		}
		var err error
		buf, err = r.d.openWindow(into, w, r.plan.Batch, r.o.Index)
		if r.remote != nil && err == nil {
			// The window is scattered (copied): its shards may go.
			r.windowDone(winRef{wb.Stream, wb.Window})
		}
		if err != nil {
			r.stop()
			return nil, err
		}
		r.cur[wb.Stream] = buf
	}
	return buf.batch(r.d.Manifest.Tensors.Schema, wb), nil
}

// openWindow resolves a window's pieces to shard segments, asks the
// kernel to read them ahead, piece by piece in order, and scatters the
// window's samples into batch order (scatter).
func (d *Dataset) openWindow(buf *windowBuf, w Window, batch int64, index bool) (*windowBuf, error) {
	segs, err := d.segmentsOf(w.Pieces, d.byBlock())
	if err != nil {
		return nil, err
	}
	if buf == nil {
		buf = &windowBuf{}
	}
	buf.index, buf.perm, buf.segs = w.Index, w.Perm, segs
	for _, sg := range segs {
		if sg.sh.header != nil { // a mapped shard, not a block read into memory
			willNeed(sg.sh, sg.lo, sg.hi)
		}
	}
	if err := d.scatter(buf, batch, index); err != nil {
		return nil, err
	}
	buf.segs = nil // the window's samples are copied: no shard is needed
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

// slotted is one schema tensor of a scattered window: its samples in slot
// order. Fixed rows (per bytes each) need no index; ragged tensors
// (values, item-level rows) have ends, where each slot's bytes end
// (ends[s+1]); an offsets tensor keeps its entries' lengths in lens, with
// ends counting entries, and each batch sums them into offsets.
type slotted struct {
	data []byte
	lens []int64
	ends []int64
	per  int64
	// items: fixed-size item rows (per bytes each), cut by the window's
	// itemEnds instead of ends of their own.
	items bool
}

// scatter lays window w's samples out in batch order. Window position q
// goes to slot b*batch + r, where b is the batch (of the window) whose
// places hold Pos(q) and r counts that batch's positions below q, so each
// batch is one contiguous range of every tensor, its samples in ascending
// window position. Every position's slot is computed first (w.slot);
// then each tensor's rows are read once, front to back, and stored to
// their slots, one tensor after another. The random access is in the
// writes, which the CPU does not wait for (a gather waits on every random
// read); the lines being filled are one per batch of one tensor, each
// asked for some rows ahead (scatterRowsAhead). Until 2026-12-07 a chunk
// of positions was stored to every tensor before the next chunk: a line
// per batch of every tensor at once, which at small batches left the
// caches before it was full and was fetched again for each chunk
// (docs/benchmarks.md: batches of 512 took 1.5x as long, of 64 2.5x).
// Variable tensors (packed items, lists) come after.
func (d *Dataset) scatter(w *windowBuf, batch int64, index bool) error {
	schema := d.Manifest.Tensors.Schema
	n := w.perm.N
	w.fill = grow(w.fill, (n+batch-1)/batch)
	fill := w.fill
	clear(fill)
	w.out = grow(w.out, int64(len(schema)))
	w.global = w.global[:0]
	if index {
		w.global = grow(w.global, n)
	}
	fixed := make([]bool, len(schema))
	varying := false
	var fixedBytes int64 // the fixed tensors' rows in the window
	for ti, t := range schema {
		fixed[ti] = t.Kind != "offsets" && t.Kind != "values" && t.Level != "item"
		varying = varying || !fixed[ti]
		if fixed[ti] {
			o := &w.out[ti]
			o.per = rowSizeOf(t)
			o.data = grow(o.data, n*o.per)
			o.ends = nil
			fixedBytes += n * o.per
		}
	}
	w.slot = grow(w.slot, n)
	div := newDivider(batch, n)
	tabled := w.perm.Tables(&w.tab)
	var q int64
	for _, sg := range w.segs {
		for lo := sg.lo; lo < sg.hi; lo += scatterChunk {
			hi := min(lo+scatterChunk, sg.hi)
			c := w.slot[q : q+hi-lo]
			if tabled {
				w.perm.PosRangeTables(q, c, &w.tab)
			} else {
				w.perm.PosRange(q, c)
			}
			for i, p := range c {
				b := div.div(p)
				c[i] = b*batch + fill[b]
				fill[b]++
			}
			if index {
				for i, sl := range c {
					w.global[sl] = sg.first + lo - sg.lo + int64(i)
				}
			}
			q += hi - lo
		}
	}
	for ti := range schema {
		if !fixed[ti] {
			continue
		}
		o := &w.out[ti]
		q = 0
		for _, sg := range w.segs {
			for lo := sg.lo; lo < sg.hi; lo += scatterChunk {
				hi := min(lo+scatterChunk, sg.hi)
				src, err := w.read(sg.sh, sg.sh.views[ti].data[lo*o.per:hi*o.per])
				if err != nil {
					return err
				}
				scatterRowsAhead(o.data, src, w.slot[q:q+hi-lo], o.per, fixedBytes)
				q += hi - lo
			}
		}
	}
	if !varying {
		return nil
	}
	slot := w.slot
	itemRows := func(t manifests.Tensor) bool {
		return t.Level == "item" && t.Kind != "offsets" && t.Kind != "values"
	}
	if slices.ContainsFunc(schema, itemRows) {
		// Every item-level tensor's rows of sample i are its items
		// items[i]..items[i+1]: their ends in slot order are computed once.
		w.itemEnds = grow(w.itemEnds, n+1)
		ends := w.itemEnds
		ends[0] = 0
		q := 0
		for _, sg := range w.segs {
			items := sg.sh.items
			for i := sg.lo; i < sg.hi; i++ {
				ends[slot[q]+1] = items[i+1] - items[i]
				q++
			}
		}
		prefixSum(ends)
	}
	for ti, t := range schema {
		o := &w.out[ti]
		o.items = false
		switch {
		case itemRows(t):
			o.per, o.ends, o.items = rowSizeOf(t), nil, true
			ends, per := w.itemEnds, o.per
			o.data = grow(o.data, ends[n]*per)
			q := 0
			for _, sg := range w.segs {
				items := sg.sh.items
				base := items[sg.lo] * per
				src, err := w.read(sg.sh, sg.sh.views[ti].data[base:items[sg.hi]*per])
				if err != nil {
					return err
				}
				for i := sg.lo; i < sg.hi; i++ {
					copyRow(o.data[ends[slot[q]]*per:], src[items[i]*per-base:items[i+1]*per-base])
					q++
				}
			}
		case t.Kind == "offsets":
			// entries of sample i of segment sg: its own, or its items'.
			entries := func(sg *segment, v *tensorView, i int64) (int64, int64) {
				if v.offsItem {
					return sg.sh.items[i], sg.sh.items[i+1]
				}
				return i, i + 1
			}
			o.ends = grow(o.ends, n+1)
			o.ends[0] = 0
			q := 0
			for k := range w.segs {
				sg := &w.segs[k]
				v := &sg.sh.views[ti]
				for i := sg.lo; i < sg.hi; i++ {
					a, e := entries(sg, v, i)
					o.ends[slot[q]+1] = e - a
					q++
				}
			}
			prefixSum(o.ends)
			o.lens = grow(o.lens, o.ends[n])
			q = 0
			for k := range w.segs {
				sg := &w.segs[k]
				v := &sg.sh.views[ti]
				for i := sg.lo; i < sg.hi; i++ {
					a, e := entries(sg, v, i)
					dst := o.lens[o.ends[slot[q]]:]
					for x := a; x < e; x++ {
						dst[x-a] = v.offs[x+1] - v.offs[x]
					}
					q++
				}
			}
		case fixed[ti]:
		default:
			o.ends = grow(o.ends, n+1)
			o.ends[0] = 0
			q := 0
			for _, sg := range w.segs {
				for i := sg.lo; i < sg.hi; i++ {
					a, e := sg.sh.rowBytes(ti, i, i+1)
					o.ends[slot[q]+1] = e - a
					q++
				}
			}
			prefixSum(o.ends)
			o.data = grow(o.data, o.ends[n])
			q = 0
			for _, sg := range w.segs {
				base, end := sg.sh.rowBytes(ti, sg.lo, sg.hi)
				src, err := w.read(sg.sh, sg.sh.views[ti].data[base:end])
				if err != nil {
					return err
				}
				for i := sg.lo; i < sg.hi; i++ {
					a, e := sg.sh.rowBytes(ti, i, i+1)
					copyRow(o.data[o.ends[slot[q]]:], src[a-base:e-base])
					q++
				}
			}
		}
	}
	return nil
}

// read returns src, a range of shard sh's mapped bytes: read with pread
// into w.stage when sh keeps its file open (Options.ReadMapped unset),
// else src itself. The result is valid until the next read.
func (w *windowBuf) read(sh *mapped, src []byte) ([]byte, error) {
	if sh.file == nil || len(src) == 0 {
		return src, nil
	}
	off := int64(uintptr(unsafe.Pointer(unsafe.SliceData(src))) - uintptr(unsafe.Pointer(unsafe.SliceData(sh.data))))
	w.stage = grow(w.stage, int64(len(src)))
	if _, err := sh.file.ReadAt(w.stage, off); err != nil {
		return nil, fmt.Errorf("%s: read %d bytes at %d: %w", sh.file.Name(), len(src), off, err)
	}
	return w.stage, nil
}

// ntMinBytes is the smallest destination whose 64-byte rows are stored
// around the caches (scatterLines): a smaller one (a small window's
// batches) may still be in the cache when the batch is read.
const ntMinBytes = 8 << 20

// aheadMinBytes is the smallest window (all its fixed tensors' rows)
// whose rows are stored with their lines asked for ahead
// (scatterRowsAhead): a smaller one stays in the caches.
const aheadMinBytes = ntMinBytes

// scatterRows copies row i of src (per bytes each) to row slot[i] of dst,
// with a typed store for the common row sizes.
func scatterRows(dst, src []byte, slot []int64, per int64) {
	if per%64 == 0 && scatterLines(dst, src, slot, per) {
		return
	}
	switch per {
	case 8:
		scatterTyped(u64s(dst), u64s(src), slot)
	case 4:
		scatterTyped(u32s(dst), u32s(src), slot)
	case 2:
		scatterTyped(u16s(dst), u16s(src), slot)
	case 1:
		scatterTyped(dst, src, slot)
	case 64:
		scatterTyped(lines(dst), lines(src), slot)
	default:
		for i, sl := range slot {
			copy(dst[sl*per:(sl+1)*per], src[int64(i)*per:int64(i+1)*per])
		}
	}
}

// scatterTyped stores s[i] at d[slot[i]].
func scatterTyped[T any](d, s []T, slot []int64) {
	for i, sl := range slot {
		d[sl] = s[i]
	}
}

// scatterChunk is the window positions whose slots are computed, or
// whose rows of a tensor are read (into w.stage) and stored, together.
const scatterChunk = 4096

// divider divides by a constant with a multiply (Lemire's fastdiv) when
// dividends and divisor fit 32 bits, as window places and batch sizes do.
type divider struct {
	d, m uint64
}

func newDivider(d, upTo int64) divider {
	if d > 0 && d < 1<<32 && upTo < 1<<32 {
		return divider{d: uint64(d), m: ^uint64(0)/uint64(d) + 1}
	}
	return divider{d: uint64(d)}
}

func (v divider) div(x int64) int64 {
	if v.m == 0 {
		return x / int64(v.d)
	}
	hi, _ := bits.Mul64(v.m, uint64(x))
	return int64(hi)
}

func prefixSum(xs []int64) {
	for i := 1; i < len(xs); i++ {
		xs[i] += xs[i-1]
	}
}

// batch returns window batch wb: a contiguous range of every scattered
// tensor (capacity capped, so an append cannot reach the next batch), and
// offsets summed from their lengths, rebased to start at 0.
func (w *windowBuf) batch(schema []manifests.Tensor, wb WindowBatch) *Batch {
	lo, hi := wb.First, wb.First+wb.Count
	out := &Batch{Samples: wb.Count, Tensors: make([]Tensor, 0, len(schema)+1)}
	for ti, t := range schema {
		o := &w.out[ti]
		if t.Kind == "offsets" {
			lens := o.lens[o.ends[lo]:o.ends[hi]]
			offs := make([]int64, len(lens)+1)
			for i, l := range lens {
				offs[i+1] = offs[i] + l
			}
			out.Tensors = append(out.Tensors, Tensor{Name: t.Name, DType: t.DType, Shape: []int{len(offs)},
				Data: unsafe.Slice((*byte)(unsafe.Pointer(&offs[0])), len(offs)*8)})
			continue
		}
		a, e := lo*o.per, hi*o.per
		switch {
		case o.items:
			a, e = w.itemEnds[lo]*o.per, w.itemEnds[hi]*o.per
		case o.ends != nil:
			a, e = o.ends[lo], o.ends[hi]
		}
		data := o.data[a:e:e]
		per := rowSizeOf(t)
		if t.Kind == "values" {
			per = dtypeSize[t.DType]
		}
		nrows := 0
		if per > 0 {
			nrows = int(int64(len(data)) / per)
		}
		out.Tensors = append(out.Tensors, Tensor{Name: t.Name, DType: t.DType, Shape: append([]int{nrows}, t.Shape...), Data: data})
	}
	if len(w.global) > 0 {
		out.Tensors = append(out.Tensors, indexTensor(w.global[lo:hi:hi]))
	}
	return out
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

// line is a 64-byte row (a float32 row of 16, an int64 row of 8): one
// cache line, copied as one value.
type line [64]byte

func lines(b []byte) []line {
	if len(b) < 64 {
		return nil
	}
	return unsafe.Slice((*line)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/64)
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
