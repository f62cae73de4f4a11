package partition

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

// SegmentBlocks reads a task's segments with as few requests as their
// layout allows. A map task that holds its units in memory writes them
// one after another into one object (ShuffleWriter.Hold), so the segments
// of a detect or reduce task's consecutive units are adjacent byte ranges
// of each map task's object. Read one at a time, a task of many small
// units (a Hive folder each) made a request per unit and map task: 4,800
// GETs of 10 ms on a store for the reduce tasks of the 1,200-folder
// output from 4 map tasks. On the first request for a segment,
// SegmentBlocks reads the run of the task's segments adjacent to it in
// the same object, up to a block, and keeps the others for the requests
// that follow, handing each out once. Each segment is still checked
// against its own hash before it is decoded. Safe for concurrent use.
type SegmentBlocks struct {
	work  storage.Location
	block int64 // the most bytes one read takes from an object
	objs  map[string]*segObject
	reads atomic.Int64 // reads made (tests)
}

// segObject is one map task's object: the task's segments in it.
type segObject struct {
	mu   sync.Mutex       // one read of the object at a time
	segs []Segment        // by offset
	read []bool           // segs[i] was read (in a block or alone)
	held map[int64][]byte // read, not yet handed out, by offset
}

// NewSegmentBlocks reads segs, a task's segments, from work, holding at
// most about budget bytes read ahead (a block per object: budget over the
// objects).
func NewSegmentBlocks(work storage.Location, segs []Segment, budget int64) *SegmentBlocks {
	objs := map[string]*segObject{}
	for _, s := range segs {
		o := objs[s.Path]
		if o == nil {
			o = &segObject{held: map[int64][]byte{}}
			objs[s.Path] = o
		}
		o.segs = append(o.segs, s)
	}
	for _, o := range objs {
		slices.SortFunc(o.segs, func(a, b Segment) int { return cmp.Compare(a.Offset, b.Offset) })
		o.read = make([]bool, len(o.segs))
	}
	return &SegmentBlocks{work: work, block: budget / int64(max(len(objs), 1)), objs: objs}
}

// ReadSegment is ReadSegment through the blocks.
func (b *SegmentBlocks) ReadSegment(ctx context.Context, seg Segment, schema *arrow.Schema) ([]arrow.RecordBatch, error) {
	comp, err := b.get(ctx, seg)
	if err != nil {
		return nil, err
	}
	return decodeSegment(b.work, seg, schema, comp)
}

// get returns seg's bytes: held from an earlier read, or read with the
// adjacent segments after it.
func (b *SegmentBlocks) get(ctx context.Context, seg Segment) ([]byte, error) {
	b.reads.Add(1) // less those served held, below
	o := b.objs[seg.Path]
	if o == nil || seg.Length >= b.block {
		return getSegment(ctx, b.work, seg)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if data, ok := o.held[seg.Offset]; ok && int64(len(data)) == seg.Length {
		b.reads.Add(-1)
		delete(o.held, seg.Offset)
		return data, nil
	}
	i, found := slices.BinarySearchFunc(o.segs, seg.Offset, func(s Segment, off int64) int { return cmp.Compare(s.Offset, off) })
	if !found || o.segs[i].Length != seg.Length || o.read[i] {
		return getSegment(ctx, b.work, seg) // not the task's, or read again
	}
	// The block: the segments not read yet adjacent to seg, those after
	// it first (requests come mostly in unit order; the writes of small
	// partitions several at once ask a little out of it), then before.
	lo, hi, size := i, i+1, seg.Length
	for hi < len(o.segs) && !o.read[hi] && o.segs[hi].Offset == o.segs[hi-1].Offset+o.segs[hi-1].Length && size+o.segs[hi].Length <= b.block {
		size += o.segs[hi].Length
		hi++
	}
	for lo > 0 && !o.read[lo-1] && o.segs[lo-1].Offset+o.segs[lo-1].Length == o.segs[lo].Offset && size+o.segs[lo-1].Length <= b.block {
		size += o.segs[lo-1].Length
		lo--
	}
	o.read[i] = true
	if hi-lo == 1 {
		return getSegment(ctx, b.work, seg)
	}
	start := o.segs[lo].Offset
	data, err := storage.GetRange(ctx, b.work, seg.Path, start, size)
	if errs.Is(err, errs.BadInput) {
		// Missing or shorter than the block: the segment's own read says
		// which, with its hint.
		return getSegment(ctx, b.work, seg)
	} else if err != nil {
		o.read[i] = false
		return nil, err
	}
	for k := lo; k < hi; k++ {
		if k != i {
			s := o.segs[k]
			at := s.Offset - start
			o.held[s.Offset] = data[at : at+s.Length : at+s.Length]
			o.read[k] = true
		}
	}
	at := seg.Offset - start
	return data[at : at+seg.Length : at+seg.Length], nil
}
