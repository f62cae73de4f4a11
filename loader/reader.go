package loader

import (
	"fmt"
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
		Streams: o.Streams, Batch: o.Batch, Seed: a.Seed, Epoch: a.Epoch}
	if p.Streams == 0 {
		p.Streams = a.World * a.NumWorkers
	}
	if o.Batch <= 0 {
		return p, fmt.Errorf("batch size must be positive")
	}
	p.Window = WindowSamples(o.WindowBytes, mt.Totals.Bytes, mt.Totals.Rows, o.Batch)
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
}

type windowBuf struct {
	index int
	data  *Batch
	pos   []int64 // global index of each window-local sample
	perm  []int64
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
	return r, nil
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
		return nil, nil
	}
	wb := r.batches[r.next]
	r.next++
	buf := r.cur[wb.Stream]
	if buf == nil || buf.index != wb.Window {
		// The stream's next window: read its pieces in order, once.
		w := r.windows[wb.Stream][wb.Window]
		data, err := r.d.Batch(w.Pieces)
		if err != nil {
			return nil, err
		}
		buf = &windowBuf{index: wb.Window, data: data, pos: positions(w.Pieces), perm: w.Perm}
		r.cur[wb.Stream] = buf
	}
	idx := buf.perm[wb.First : wb.First+wb.Count]
	b := gather(r.d.Manifest.Tensors.Schema, buf.data, idx)
	if r.o.Index {
		g := make([]int64, len(idx))
		for i, q := range idx {
			g[i] = buf.pos[q]
		}
		b.Tensors = append(b.Tensors, indexTensor(g))
	}
	return b, nil
}

func indexTensor(idx []int64) Tensor {
	t := Tensor{Name: IndexTensor, DType: "I64", Shape: []int{len(idx)}}
	if len(idx) > 0 {
		t.Data = unsafe.Slice((*byte)(unsafe.Pointer(&idx[0])), len(idx)*8)
	}
	return t
}

// gather copies samples idx (positions in the window batch w) into a new
// batch, in that order: rows of sample-level tensors, the items of packed
// queries, ragged values by their offsets (rebased).
func gather(schema []manifests.Tensor, w *Batch, idx []int64) *Batch {
	out := &Batch{Samples: int64(len(idx))}
	byName := map[string]*Tensor{}
	for i := range w.Tensors {
		byName[w.Tensors[i].Name] = &w.Tensors[i]
	}
	// rows[level] are the window rows each level's tensors take.
	rows := map[string][]int64{"row": idx, "query": idx}
	if io, ok := byName["query.item_offsets"]; ok {
		o := int64s(io.Data)
		var items []int64
		for _, q := range idx {
			for it := o[q]; it < o[q+1]; it++ {
				items = append(items, it)
			}
		}
		rows["item"] = items
	}
	// Offsets first: values tensors are cut by them.
	valueRows := map[string][]int64{}
	made := map[string]Tensor{}
	for _, t := range schema {
		if t.Kind != "offsets" {
			continue
		}
		o := int64s(byName[t.Name].Data)
		r := rows[t.Level]
		offs := make([]int64, 1, len(r)+1)
		var vals []int64
		for _, x := range r {
			offs = append(offs, offs[len(offs)-1]+o[x+1]-o[x])
			if t.Name != "query.item_offsets" {
				for v := o[x]; v < o[x+1]; v++ {
					vals = append(vals, v)
				}
			}
		}
		valueRows[t.Name] = vals
		made[t.Name] = Tensor{Name: t.Name, DType: t.DType, Shape: []int{len(offs)},
			Data: unsafe.Slice((*byte)(unsafe.Pointer(&offs[0])), len(offs)*8)}
	}
	for _, t := range schema {
		if t.Kind == "offsets" {
			out.Tensors = append(out.Tensors, made[t.Name])
			continue
		}
		r := rows[t.Level]
		if t.Kind == "values" {
			r = valueRows[t.Offsets]
		}
		per := dtypeSize[t.DType]
		for _, x := range t.Shape {
			per *= int64(x)
		}
		data := gatherRows(byName[t.Name].Data, per, r)
		out.Tensors = append(out.Tensors, Tensor{Name: t.Name, DType: t.DType, Shape: append([]int{len(r)}, t.Shape...), Data: data})
	}
	return out
}

// gatherRows copies rows r (each per bytes) of src, in order.
func gatherRows(src []byte, per int64, r []int64) []byte {
	dst := make([]byte, int64(len(r))*per)
	switch per {
	case 4:
		s, d := u32s(src), u32s(dst)
		for i, x := range r {
			d[i] = s[x]
		}
	case 8:
		s, d := u64s(src), u64s(dst)
		for i, x := range r {
			d[i] = s[x]
		}
	case 1:
		for i, x := range r {
			dst[i] = src[x]
		}
	case 2:
		s, d := u16s(src), u16s(dst)
		for i, x := range r {
			d[i] = s[x]
		}
	default:
		for i, x := range r {
			copy(dst[int64(i)*per:], src[x*per:(x+1)*per])
		}
	}
	return dst
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
