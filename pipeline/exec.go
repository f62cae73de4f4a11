package pipeline

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
	"github.com/relayout/relayout/writer"
)

// The plan's tasks, as both the distributed steps and run execute them:
// mapRows routes a map task's row groups to the units; a partitionReader
// hands a partition's units, sorted, to detect and writePartition; assemble
// checks the tasks' results and builds the manifest.

// mapRows is map task `task`: it reads the task's row groups once and
// writes their rows, routed to the plan's units, as one Arrow IPC segment
// per unit under the work prefix, then its task manifest. A distributed
// map task (alone in its process, its shuffle bound for the store) reads
// ahead and writes the lean shuffle; run's map workers share the budget
// and spill plain (less CPU; the bytes stay on local disk).
func (lp *loadedPlan) mapRows(ctx context.Context, tbl *source.Table, keys plan.Keys, task, parallel int, distributed bool) (*TaskManifest, error) {
	t0 := time.Now()
	pm := lp.Maps[task]
	units, part := lp.Units()
	rt := partition.NewRouter(lp.hist, units)
	if lp.bins != nil && !distributed {
		rt.Bins = lp.bins
		part = make([]int, partition.NumBins(lp.bins)) // segments are bins' here
	}
	if lp.Cuts != nil {
		var err error
		if rt.Cuts, err = lp.SplitCuts(); err != nil {
			return nil, err
		}
		rt.CutCols = keys.Sort
	}
	for k, v := range pm.Counters {
		rk, err := strconv.Atoi(k)
		if err != nil || rk < 0 || rk >= len(rt.Counter) {
			return nil, errs.BadInputf("plan: map %d: bad counter slice %q", task, k)
		}
		rt.Counter[rk] = v
	}
	attempt := newAttempt()
	prefix := mapAttemptPrefix(task, attempt)
	sw, err := partition.NewShuffleWriter(lp.work, prefix, lp.opts.TmpDir, distributed)
	if err != nil {
		return nil, err
	}
	defer sw.Abort()
	var fp fingerprint.Sum
	var observe func(arrow.RecordBatch)
	var prof *tensors.Profile
	if lp.tensors != nil { // list lengths fix the tensor shapes: profile every row
		prof = tensors.NewProfile()
		observe = prof.Observe
	}
	refs, err := mapRefs(tbl, pm, task)
	if err != nil {
		return nil, err
	}
	var largest, extra int64
	for _, r := range refs {
		largest = max(largest, r.Rows())
		extra = max(extra, plan.WholeDecodeExtra(r))
	}
	if distributed {
		// A task is a fresh process: every page of its heap is faulted
		// in. It decodes up to parallel of its row groups at once, and
		// its shuffle holds frames and batches up to what holdShuffle
		// gives it, which live as long as the task (twice them, for the
		// collector's headroom, where decoded rows are counted four
		// times: adviseHeap). Counted without the shuffle, a map task of
		// the 1M-row log asked for 87 MB and its heap grew to 220.
		shuffle := lp.holdShuffle(sw, largest, extra, parallel)
		defer lp.opts.adviseHeap(rowGroupsHeld(largest, lp.RowBytes, parallel) + shuffle/2)()
	}
	// A map task alone in its process reads the next row group while it
	// routes this one, when two row groups fit the memory a unit is given
	// (a unit is at least as large as a row group, with headroom for
	// holding it several times over), with what decoding one whole holds
	// besides its values; run's map workers share the budget and read one
	// each.
	extraRows := int64(float64(extra) / max(lp.RowBytes*decodedPerInput, 1))
	ahead := distributed && lp.opts.Parallel > 1 && largest+extraRows <= lp.UnitRows
	emit := sw.Write
	var dg *digester
	if distributed && lp.Packing != nil && lp.Packing.Probe != nil {
		cand, err := candidates(lp.Packing.Probe, tbl.Schema, keys.Query)
		if err != nil {
			return nil, err
		}
		dg = newDigester(keys.Query, cand, part, len(lp.Partitions), lp.opts.MemoryLimit)
		emit = func(u int, rec arrow.RecordBatch) error {
			if err := dg.add(u, rec); err != nil {
				return err
			}
			return sw.Write(u, rec)
		}
	}
	// Small row groups are routed a run at a time (partition.Runs), so
	// that each unit gets pieces of a useful size.
	runs := lp.runs(refs)
	run := 0
	var held []arrow.RecordBatch
	defer func() {
		for _, r := range held {
			r.Release()
		}
	}()
	err = eachRowGroup(ctx, tbl, refs, parallel, ahead, plan.SliceRowsOf, func(ref source.RowGroupRef, recs []arrow.RecordBatch) error {
		if len(recs) > 1 { // a large row group, read in slices: alone in its run
			s, err := partition.RouteSlices(ctx, recs, ref, rt, keys.Slice, parallel, observe, emit)
			if err != nil {
				return err
			}
			fp.Add(s)
			lp.opts.Progress.Add(ref.Rows())
			run++
			return nil
		}
		rec := recs[0]
		rec.Retain()
		held = append(held, rec)
		from, to := runs[run], runs[run+1]
		if from+len(held) < to {
			return nil
		}
		s, err := partition.RouteRecords(ctx, held, refs[from:to], rt, keys.Slice, parallel, observe, emit, memory.DefaultAllocator)
		for _, r := range held {
			r.Release()
		}
		held, run = held[:0], run+1
		if err != nil {
			return err
		}
		fp.Add(s)
		for _, r := range refs[from:to] {
			lp.opts.Progress.Add(r.Rows())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if fp.Rows != pm.Rows {
		return nil, fmt.Errorf("internal: map %d read %d rows, the plan says %d", task, fp.Rows, pm.Rows)
	}
	if len(runs)-1 < len(refs) {
		lp.opts.Log.Debug("small row groups routed together", "map", task, "row_groups", len(refs), "batches", len(runs)-1)
	}
	segs, err := sw.Publish(ctx, part)
	if err != nil {
		return nil, err
	}
	d := &TaskManifest{Kind: "map", Task: task, Attempt: attempt, ConfigHash: lp.ConfigHash, Rows: fp.Rows, Hash: fp.String(), Partitions: segs}
	if d.Index, err = lp.putSegmentIndex(ctx, prefix, task, segs, len(part)); err != nil {
		return nil, err
	}
	if dg != nil {
		if d.Digest, err = dg.finish(ctx, lp.work, prefix, task); err != nil {
			return nil, err
		}
	}
	if prof != nil {
		d.Profile = prof.Lengths()
	}
	d.Seconds = time.Since(t0).Seconds()
	// Stored without its segments (the index has them); run keeps them.
	stored := *d
	stored.Partitions = nil
	if err := writeDone(ctx, lp.work, prefix+"_task.json", mapDoneName(task), &stored); err != nil {
		return nil, err
	}
	d.Checksum = stored.Checksum
	return d, nil
}

// putSegmentIndex stores a map attempt's segments as its index, a record
// per unit (units of them), and returns its description.
func (lp *loadedPlan) putSegmentIndex(ctx context.Context, prefix string, task int, segs []partition.Segment, units int) (*SegmentIndex, error) {
	ix := &SegmentIndex{Units: units, Segments: len(segs), OneObject: len(segs) > 0 && segs[0].Path == partition.SegmentPath(prefix, true, 0)}
	for _, s := range segs {
		if s.Path != partition.SegmentPath(prefix, ix.OneObject, s.Unit) {
			return nil, fmt.Errorf("internal: map segment of unit %d at %s, not where its index says", s.Unit, s.Path)
		}
		ix.Rows += s.Rows
		ix.Bytes += s.Bytes
	}
	data, err := partition.EncodeIndex(segs, units, partition.IndexSeed(segmentIndexKind, task))
	if err != nil {
		return nil, err
	}
	return ix, putObject(ctx, lp.work, prefix+segmentIndexName, data)
}

// shuffleHoldMost caps what a map task holds of its units' compressed
// frames in memory (partition.ShuffleWriter.Hold), and of their small
// batches (Join); joinPerUnit is the least share of the latter per unit
// for joining them to pay.
const (
	shuffleHoldMost = 64 << 20
	joinPerUnit     = 32 << 10
)

// segmentsOf returns the segments of units [lo, hi) from every map task,
// in map order (input order): from a manifest in memory (run), from the
// task's records read once for all its partitions (preloadSegments), or
// read by range from each map task's segment index, several at once.
func (lp *loadedPlan) segmentsOf(ctx context.Context, dones []*TaskManifest, lo, hi int) ([]partition.Segment, error) {
	per := lp.taskSegs
	if per == nil || lo < per.lo || hi > per.hi || len(per.per) != len(dones) {
		var err error
		if per, err = lp.segmentLists(ctx, dones, lo, hi); err != nil {
			return nil, err
		}
	}
	var out []partition.Segment
	for _, l := range per.per {
		out = append(out, unitRange(l, lo, hi)...)
	}
	return out, nil
}

// unitRange is the segments of units [lo, hi) in l (in rising unit order:
// a stored index's records, or a listing checkSegments accepted): a
// search, not a pass over every unit for each partition.
func unitRange(l []partition.Segment, lo, hi int) []partition.Segment {
	i, _ := slices.BinarySearchFunc(l, lo, func(s partition.Segment, u int) int { return s.Unit - u })
	j := i
	for j < len(l) && l[j].Unit < hi {
		j++
	}
	return l[i:j]
}

// taskSegments is each map task's segments (in unit order) of units [lo,
// hi), and, for a task of several partitions, the blocks that read them.
type taskSegments struct {
	lo, hi int
	per    [][]partition.Segment
	blocks *partition.SegmentBlocks
}

// segmentBlockBytes is what a task of several partitions may hold of the
// segments it read ahead (partition.SegmentBlocks): a 32nd of
// --memory-limit, 16 MiB at most.
func (lp *loadedPlan) segmentBlockBytes() int64 {
	return min(lp.opts.MemoryLimit/32, 16<<20)
}

// preloadSegments reads the segment records of a detect or reduce task's
// partitions [first, end) once, a ranged read per map task, for
// segmentsOf to slice: a task of many small partitions (a Hive folder
// each) read them once per partition and map task, the requests growing
// as partitions x map tasks. The segments themselves are then read by
// blocks of adjacent ones (partition.SegmentBlocks). A task of one
// partition reads as it did.
func (lp *loadedPlan) preloadSegments(ctx context.Context, dones []*TaskManifest, first, end int) error {
	if end-first < 2 || lp.binned != nil {
		return nil
	}
	lo, _ := lp.PartitionUnits(first)
	_, hi := lp.PartitionUnits(end - 1)
	per, err := lp.segmentLists(ctx, dones, lo, hi)
	if err != nil {
		return err
	}
	per.blocks = partition.NewSegmentBlocks(lp.work, slices.Concat(per.per...), lp.segmentBlockBytes())
	lp.taskSegs = per
	return nil
}

// segmentLists reads each map task's segments of units [lo, hi): a
// listing in memory (run's) as it is, a stored index by range.
func (lp *loadedPlan) segmentLists(ctx context.Context, dones []*TaskManifest, lo, hi int) (*taskSegments, error) {
	_, part := lp.Units()
	ts := &taskSegments{lo: lo, hi: hi, per: make([][]partition.Segment, len(dones))}
	var stored []int // the map tasks whose segments are read from their index
	for m, d := range dones {
		if d.Index != nil && d.Partitions == nil {
			stored = append(stored, m)
			continue
		}
		ts.per[m] = d.Partitions // in rising unit order (checkSegments)
	}
	err := par.ForEach(ctx, len(stored), min(len(stored), 16), func(k int) error {
		m := stored[k]
		d := dones[m]
		prefix := mapAttemptPrefix(m, d.Attempt)
		name := prefix + segmentIndexName
		hint := fmt.Sprintf("run map task %d again (under this plan)", m)
		if !validAttempt(d.Attempt) || d.Index.Units != len(part) {
			return errs.WithHint(errs.BadInputf("%s: attempt %q with an index of %d units; the plan has %d", lp.work.URL(mapDoneName(m)), d.Attempt, d.Index.Units, len(part)), hint)
		}
		if hi <= lo {
			return nil
		}
		data, err := storage.GetRange(ctx, lp.work, name, int64(lo)*partition.IndexRecord, int64(hi-lo)*partition.IndexRecord)
		if err != nil {
			if errs.Is(err, errs.BadInput) { // missing or cut short
				err = errs.WithHint(err, hint)
			}
			return err
		}
		ents, err := partition.DecodeIndex(data, lo, partition.IndexSeed(segmentIndexKind, m))
		if err != nil {
			return errs.WithHint(errs.BadInputf("%s: %v", lp.work.URL(name), err), hint)
		}
		for i := range ents {
			ents[i].Partition, ents[i].Path = part[ents[i].Unit], partition.SegmentPath(prefix, d.Index.OneObject, ents[i].Unit)
		}
		ts.per[m] = ents
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ts, nil
}

// unitStreamBytes is what a map task holds per unit it writes, whatever
// its rows: the unit's IPC writer and the schemas of its streams (heap
// profile of a map task of the 1,200-folder output: about 16 MB).
const unitStreamBytes = 16 << 10

// holdShuffle gives a distributed map task's shuffle writer what its
// memory leaves (partition.ShuffleWriter's Hold and Join), and returns
// the bytes it gave. The task's own
// memory is the runtime's reserve and headroom, and a decoded row group
// with the pieces routed from it (twice the largest row group, as the
// plan counts a map worker), and extra, what decoding one whole holds
// besides (source.File.DecodeExtra). Small units' frames stay in memory,
// up to a sixteenth of the limit, 64 MiB at most, and half of what is left, and
// the attempt writes one object. As much again of small batches is held
// to be encoded joined where every unit can hold 32 KiB of them (below
// that, joining only adds work: measured at --memory-limit 128MiB with
// 1,200 units) and what is left holds four times that: the held batches,
// their joined copy and its frames. At --memory-limit 128MiB a map task
// of the 1M-row log that joined took 3.5-3.8 s under Go's soft limit
// against 1.7-1.8 s without it (its live heap near the limit), and one
// that did not hold the soft limit peaked at 212-223 MB.
func (lp *loadedPlan) holdShuffle(sw *partition.ShuffleWriter, largestRows, extra int64, parallel int) (given int64) {
	units, _ := lp.Units()
	own := plan.RuntimeReserve + plan.UnitHeadroom + plan.MapWorkerBytes(largestRows, lp.RowBytes*decodedPerInput) + extra + int64(len(units))*unitStreamBytes
	left := max(lp.opts.MemoryLimit-own, 0)
	budget := min(lp.opts.MemoryLimit/16, shuffleHoldMost, left/2)
	sw.Hold(budget, parallel)
	given = budget
	if budget >= int64(len(units))*joinPerUnit && left >= 4*budget {
		sw.Join(budget)
		given += budget
	}
	return given
}

// eachRowGroup reads refs in order and hands each to fn, decoded: as one
// record, or a large one (slice(ref) > 0) as records of that many rows
// (source.Table.ReadSliced). With ahead, the next is read while fn
// handles this one.
func eachRowGroup(ctx context.Context, tbl *source.Table, refs []source.RowGroupRef, parallel int, ahead bool, slice func(source.RowGroupRef) int64,
	fn func(source.RowGroupRef, []arrow.RecordBatch) error) error {
	readOne := func(ref source.RowGroupRef) ([]arrow.RecordBatch, error) {
		if n := slice(ref); n > 0 {
			return tbl.ReadSliced(ctx, ref, nil, parallel, n)
		}
		rec, err := tbl.Read(ctx, ref, nil, parallel)
		if err != nil {
			return nil, err
		}
		return []arrow.RecordBatch{rec}, nil
	}
	release := func(recs []arrow.RecordBatch) {
		for _, r := range recs {
			r.Release()
		}
	}
	if !ahead {
		for _, ref := range refs {
			recs, err := readOne(ref)
			if err != nil {
				return err
			}
			err = fn(ref, recs)
			release(recs)
			if err != nil {
				return err
			}
		}
		return nil
	}
	type read struct {
		recs []arrow.RecordBatch
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan read) // unbuffered: one row group read ahead at most
	go func() {
		defer close(next)
		for _, ref := range refs {
			recs, err := readOne(ref)
			select {
			case next <- read{recs, err}:
			case <-ctx.Done():
				release(recs)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for _, ref := range refs {
		r, ok := <-next
		if !ok {
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		err := fn(ref, r.recs)
		release(r.recs)
		if err != nil {
			return err
		}
	}
	return nil
}

// mapDones reads every map task's manifest; a missing one is an error
// (with hint: what to do).
func (lp *loadedPlan) mapDones(ctx context.Context, hint string) ([]*TaskManifest, error) {
	out, err := lp.readDones(ctx, len(lp.Maps), mapDoneName)
	if err != nil {
		return nil, err
	}
	for m, d := range out {
		if d == nil {
			return nil, errs.Preconditionf(hint, "map task %d has not completed (no %s)", m, lp.work.URL(mapDoneName(m)))
		}
	}
	return out, nil
}

// checkSegments refuses a map task manifest whose segments are not the
// plan's: a partition or unit it does not have, units out of rising
// order (segmentsOf searches them), or a negative range or count (a
// manifest is sealed, but one sealed by hand is read too).
func (lp *loadedPlan) checkSegments(d *TaskManifest) error {
	units, _ := lp.Units()
	for i, s := range d.Partitions {
		switch {
		case s.Partition < 0 || s.Partition >= len(lp.Partitions):
			return fmt.Errorf("segment %d is for partition %d, the plan has %d", i, s.Partition, len(lp.Partitions))
		case s.Unit < 0 || s.Unit >= len(units):
			return fmt.Errorf("segment %d is for unit %d, the plan has %d", i, s.Unit, len(units))
		case i > 0 && s.Unit <= d.Partitions[i-1].Unit:
			return fmt.Errorf("segment %d is for unit %d, after unit %d", i, s.Unit, d.Partitions[i-1].Unit)
		case s.Offset < 0 || s.Length < 0 || s.Rows < 0 || s.Bytes < 0:
			return fmt.Errorf("segment %d: bytes [%d, +%d) holding %d rows", i, s.Offset, s.Length, s.Rows)
		}
	}
	return nil
}

// partitionReader hands a detect or reduce task its partition one unit at
// a time: a unit's rows from every map task, in map order (input order),
// sorted as run sorts a unit. Memory holds one unit.
type partitionReader struct {
	*partition.Reader
	tbl  *source.Table
	own  bool // tbl is closed with the reader
	keys plan.Keys
	task int
	prof *tensors.Profile // the map tasks' merged profile: every input row
	// shared is the unit that holds this partition's rows with other
	// partitions' (run joins small ones), or -1.
	shared int
}

// checkUnitMemory refuses a detect or reduce task given less memory than
// the plan sized its units for.
func (lp *loadedPlan) checkUnitMemory(task int, step string) error {
	if lp.opts.MemoryLimit < lp.MemoryLimit {
		return errs.Usagef("%s task %d: the plan sized its units for --memory-limit %d MiB, more than this task's %d MiB; raise --memory-limit, or plan again with --memory-limit %d MiB",
			step, task, lp.MemoryLimit>>20, lp.opts.MemoryLimit>>20, lp.opts.MemoryLimit>>20)
	}
	return nil
}

// mapsAndSchema reads every map task's manifest (each must have completed)
// and the plan's schema: the shuffle holds the rows, so the schema is all
// a detect or reduce task needs of the input (no footers, no listing).
func (lp *loadedPlan) mapsAndSchema(ctx context.Context) ([]*TaskManifest, *arrow.Schema, error) {
	dones, err := lp.mapDones(ctx, "run every map task first")
	if err != nil {
		return nil, nil, err
	}
	for m, d := range dones {
		if err := lp.checkSegments(d); err != nil {
			return nil, nil, errs.WithHint(errs.BadInputf("%s: %v", lp.work.URL(mapDoneName(m)), err), "run the map task again (under this plan)")
		}
	}
	schema, err := lp.schema(ctx)
	return dones, schema, err
}

// openPartitionOf opens partition task's reader over the map tasks'
// objects, given their manifests and the plan's schema (mapsAndSchema;
// the task checked its memory first: checkUnitMemory).
func (lp *loadedPlan) openPartitionOf(ctx context.Context, task int, dones []*TaskManifest, schema *arrow.Schema) (*partitionReader, error) {
	tbl := source.SchemaOnly(schema)
	keys, err := resolveKeys(tbl, lp.opts)
	if err != nil {
		return nil, err
	}
	pr, err := lp.partitionReader(ctx, tbl, keys, task, dones)
	if err != nil {
		return nil, err
	}
	pr.own = true
	return pr, nil
}

// partitionReader reads partition task from the map tasks' objects.
func (lp *loadedPlan) partitionReader(ctx context.Context, tbl *source.Table, keys plan.Keys, task int, dones []*TaskManifest) (*partitionReader, error) {
	pp := lp.Partitions[task]
	r := &partition.Reader{Work: lp.work, Hist: lp.hist, Schema: tbl.Schema, SliceCols: keys.Slice, SortCols: keys.Sort,
		Start: pp.Start, Rows: pp.Rows, Segs: map[int][]partition.Segment{}, Parallel: lp.opts.Parallel}
	pr := &partitionReader{Reader: r, tbl: tbl, keys: keys, task: task, prof: tensors.NewProfile(), shared: -1}
	units, _ := lp.Units()
	lo, hi := lp.PartitionUnits(task)
	for u := lo; u < hi; u++ {
		r.Units, r.IDs = append(r.Units, units[u]), append(r.IDs, u)
		if first, end := lp.UnitPartitions(u); end-first > 1 {
			pr.shared = u
		}
	}
	segs := lp.binned // a two-pass shuffle's units are in its second pass
	for _, d := range dones {
		pr.prof.Merge(d.Profile)
	}
	if lp.binned == nil {
		var err error
		if segs, err = lp.segmentsOf(ctx, dones, lo, hi); err != nil {
			return nil, err
		}
		if lp.taskSegs != nil { // segments it does not know it reads alone
			r.Blocks = lp.taskSegs.blocks
		}
	}
	for _, mp := range segs { // in map order
		if lo <= mp.Unit && mp.Unit < hi {
			r.Segs[mp.Unit] = append(r.Segs[mp.Unit], mp)
		}
	}
	return pr, nil
}

// rebin is the second pass of run's two-pass shuffle (partition.Bins): each
// bin's rows, as the map tasks routed them (segments in map order, which
// is input order), routed to their units, batchRows at a time, on workers
// bins at once. It returns the units' segments; the first pass's files
// are removed as each bin is done.
func (lp *loadedPlan) rebin(ctx context.Context, schema *arrow.Schema, maps []*TaskManifest, workers, parallel int, batchRows int64) ([]partition.Segment, error) {
	_, part := lp.Units()
	nb := partition.NumBins(lp.bins)
	in := make([][]partition.Segment, nb)
	for _, d := range maps {
		for _, s := range d.Partitions {
			if s.Unit < 0 || s.Unit >= nb {
				return nil, fmt.Errorf("internal: map %d wrote bin %d of %d", d.Task, s.Unit, nb)
			}
			in[s.Unit] = append(in[s.Unit], s)
		}
	}
	out := make([][]partition.Segment, nb)
	err := par.ForEach(ctx, nb, workers, func(b int) error {
		var want int64
		for _, s := range in[b] {
			want += s.Rows
		}
		sw, err := partition.NewShuffleWriter(lp.work, fmt.Sprintf("%sbin/b-%05d/", plan.WorkPrefix, b), lp.opts.TmpDir, false)
		if err != nil {
			return err
		}
		defer sw.Abort()
		rows, err := partition.Rebin(ctx, lp.work, in[b], schema, batchRows, parallel, func(u int, rec arrow.RecordBatch) error {
			if err := sw.Write(u, rec); err != nil {
				return err
			}
			lp.opts.Progress.Add(rec.NumRows())
			return nil
		})
		if err != nil {
			return err
		}
		if rows != want {
			return fmt.Errorf("internal: bin %d: read %d rows of the shuffle, the map tasks wrote %d", b, rows, want)
		}
		if out[b], err = sw.Publish(ctx, part); err != nil {
			return err
		}
		for _, s := range in[b] { // read: only disk now
			_ = lp.work.Bucket.Delete(ctx, lp.work.Key(s.Path))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(out...), nil
}

func (pr *partitionReader) close() {
	if pr.own {
		pr.tbl.Close()
	}
}

// detect finds the columns that vary inside a query in the partition.
func (pr *partitionReader) detect(ctx context.Context) (dedupe.Detection, int64, error) {
	det := dedupe.NewDetector(pr.tbl.Schema, pr.keys.Query)
	var rows int64
	err := pr.Each(ctx, func(src *partition.UnitRows, _ partition.Unit) error {
		rows += int64(len(src.Ord))
		return detectUnit(det, src)
	})
	return dedupe.DetectionOf(det), rows, err
}

// writePartition is reduce task j: it writes the partition's Parquet
// files and tensor shards from its sorted units (packing them with the
// query-level columns det decided). pr is nil for an empty packed
// partition, which writes nothing. The manifest it returns is not written.
func (lp *loadedPlan) writePartition(ctx context.Context, pr *partitionReader, det dedupe.Detection, sample arrow.RecordBatch) (*TaskManifest, error) {
	d := &TaskManifest{Kind: "reduce", ConfigHash: lp.ConfigHash, Hash: fingerprint.Sum{}.String(), Files: []manifests.File{}}
	if pr == nil {
		return d, nil
	}
	task, tbl, keys := pr.task, pr.tbl, pr.keys
	pp := lp.Partitions[task]
	parallel := pr.Parallel // --parallel, or 1 for one of several small partitions at once (writePartitions)
	wopts := writer.ParquetOptions{
		Sample: sample, Parallel: parallel, ZstdLevel: lp.opts.ZstdLevel, PageBytes: lp.opts.PageBytes,
		SortingColumns: append(append([]string{}, lp.opts.SliceKeys...), lp.opts.SortKeys...),
		Metadata:       [][2]string{{"relayout.version", version.Version}, {"relayout.config_hash", lp.ConfigHash}},
		CreatedBy:      "relayout version " + version.Version,
		FirstFile:      pp.Files[0],
		HiveColumns:    lp.opts.hiveColumns(),
	}
	tr := lp.tensorRun(pr.prof)
	if tr != nil {
		// The partition's shards are numbered from its file and samples.
		tr.first.file = pp.Files[0]
		if lp.Packing == nil {
			tr.first.row = pp.Start
		} else {
			tr.first.row, tr.first.item = lp.firstQuery(task), pp.Start
		}
	}
	// The sinks: Parquet, and tensors when asked for, behind the packer
	// when packed.
	outSchema, layout := tbl.Schema, fileLayouts(lp.Layout, pp.Files)
	var dec *dedupe.Decision
	var packer *dedupe.Packer
	var err error
	if lp.Packing != nil {
		if dec, err = decidePacking(tbl, keys, det, lp.opts); err != nil {
			return nil, err
		}
		outSchema, layout = dec.Layout.Packed, nil // packing cuts at query boundaries
		wopts.SortingColumns = append(append([]string{}, lp.opts.SliceKeys...), lp.opts.QueryKey...)
	}
	if wopts.Encodings, err = lp.encodings(sample, outSchema); err != nil {
		return nil, err
	}
	pw, err := writer.NewParquet(ctx, lp.out, outSchema, layout, wopts)
	if err != nil {
		return nil, err
	}
	var sink writer.Sink = pw
	if tr != nil {
		ts, err := tr.open(ctx, lp.out, outSchema, lp.Packing != nil, lp.opts, lp.ConfigHash)
		if err != nil {
			return nil, err
		}
		sink = writer.Tee{pw, ts}
	}
	if dec != nil {
		packer = dedupe.NewPacker(dec.Layout)
		packer.MaxItems = lp.Packing.MaxItems
		sink = dedupe.NewPackSink(ctx, sink, packer, lp.dedupeCuts(task))
	}
	var fp fingerprint.Sum
	if err := pr.Each(ctx, func(src *partition.UnitRows, un partition.Unit) error {
		return partition.WriteUnit(ctx, tbl.Schema, src, un, max(parallel-1, 1), &fp, progressSink{sink, lp.opts.Progress})
	}); err != nil {
		sink.Abort()
		return nil, err
	}
	w, err := sink.Finish()
	if err != nil {
		return nil, err
	}
	d.Rows, d.Hash, d.Files, d.Shards = fp.Rows, fp.String(), w.Files, w.Shards
	d.outSchema = outSchema
	if tr != nil {
		d.tensors = tr.plan
	}
	if packer != nil {
		d.Queries = packer.Queries
		if d.Queries != pp.Queries {
			return nil, fmt.Errorf("internal: reduce %d packed %d queries, the plan counted %d", task, d.Queries, pp.Queries)
		}
	}
	return d, nil
}

// progressSink counts the rows written to its sink as progress.
type progressSink struct {
	writer.Sink
	prog Progress
}

func (p progressSink) Write(rec arrow.RecordBatch) error {
	if err := p.Sink.Write(rec); err != nil {
		return err
	}
	p.prog.Add(rec.NumRows())
	return nil
}

// encodings returns the column encodings for sinks of schema sc, chosen
// from the sample once per run (every partition shares them).
func (lp *loadedPlan) encodings(sample arrow.RecordBatch, sc *arrow.Schema) (*writer.Encodings, error) {
	lp.encMu.Lock()
	defer lp.encMu.Unlock()
	key := sc.String()
	if e, ok := lp.enc[key]; ok {
		return e, nil
	}
	var shared any
	if lp.sampleKey != 0 { // a task's sample (sample): shared by the process's tasks
		shared = fmt.Sprint(lp.sampleKey, "\x00", key, "\x00", lp.opts.hiveColumns())
		if e, ok := sampleEncodings.Load(shared); ok {
			return e.(*writer.Encodings), nil
		}
	}
	e, err := writer.NewEncodings(sample, sc, lp.opts.hiveColumns())
	if err != nil {
		return nil, err
	}
	if shared != nil {
		sampleEncodings.Store(shared, e)
	}
	if lost := writer.LostUTCTimes(sc); len(lost) > 0 { // once per output schema
		lp.opts.Log.Warn("TIME columns the input declares isAdjustedToUTC=true are written as local time (inside a map, where relayout cannot declare UTC)",
			"columns", strings.Join(lost, ","))
	}
	if lp.enc == nil {
		lp.enc = map[string]*writer.Encodings{}
	}
	lp.enc[key] = e
	return e, nil
}

// fileLayouts returns the writer's layout of the given files of l.
func fileLayouts(l partition.Layout, files []int) []writer.FileLayout {
	out := make([]writer.FileLayout, len(files))
	for i, f := range files {
		lf := l.Files[f]
		out[i].Start = lf.Start
		for _, g := range lf.RowGroups {
			out[i].RowGroups = append(out[i].RowGroups, g.Rows)
		}
	}
	return out
}

// dedupeCuts are partition j's packing cuts: it starts at the partition's
// first item, cuts row groups where run cuts them inside the partition's
// file, and ends at the partition's end.
func (lp *loadedPlan) dedupeCuts(j int) dedupe.Cuts {
	pp := lp.Partitions[j]
	c := dedupe.Cuts{Start: pp.Start, End: pp.Start + pp.Rows}
	f := lp.Layout.Files[j]
	for _, g := range f.RowGroups {
		if end := g.Start + g.Rows; end > f.Start && end < f.Start+f.Rows {
			c.RowGroupEnds = append(c.RowGroupEnds, end)
		}
	}
	for _, s := range lp.hist.Slices {
		if s.Rows > 0 {
			c.SliceStarts = append(c.SliceStarts, s.Start)
		}
	}
	return c
}

// assemble checks the map and reduce tasks' results against the plan and
// each other (files, rows, fingerprints) and builds the manifest as run
// builds it. It returns the manifest, the queries per slice (packed) and
// the shards.
func (lp *loadedPlan) assemble(tbl *source.Table, maps, reduces []*TaskManifest, det dedupe.Detection) (*manifests.Manifest, []int64, []writer.Shard, error) {
	var inFP, outFP fingerprint.Sum
	prof := tensors.NewProfile()
	for m, d := range maps {
		s, err := d.sum()
		if err != nil {
			return nil, nil, nil, errs.BadInputf("%s: fingerprint: %v", lp.work.URL(mapDoneName(m)), err)
		}
		inFP.Add(s)
		prof.Merge(d.Profile)
	}
	var files []manifests.File
	var shards []writer.Shard
	for j, d := range reduces {
		pp := lp.Partitions[j]
		if len(d.Files) != len(pp.Files) {
			return nil, nil, nil, errs.Preconditionf("re-run the task", "reduce task %d wrote %d files, the plan has %d", j, len(d.Files), len(pp.Files))
		}
		for k, f := range d.Files {
			want := pp.Queries // a packed file's rows are its queries
			if lp.Packing == nil {
				want = lp.Layout.Files[pp.Files[k]].Rows
			}
			if path.Base(f.Path) != path.Base(writer.FileName(pp.Files[k])) || !strings.HasPrefix(f.Path, "parquet/") || f.Rows != want {
				return nil, nil, nil, errs.Preconditionf("re-run the task", "reduce task %d wrote %s with %d rows, the plan has %s with %d",
					j, f.Path, f.Rows, writer.FileName(pp.Files[k]), want)
			}
		}
		if lp.tensors != nil {
			if err := checkShards(d.Shards, pp, lp.Packing != nil); err != nil {
				return nil, nil, nil, errs.Preconditionf("re-run the task", "reduce task %d: %s: %v", j, lp.work.URL(reduceDoneName(j)), err)
			}
		}
		s, err := d.sum()
		if err != nil {
			return nil, nil, nil, errs.BadInputf("%s: fingerprint: %v", lp.work.URL(reduceDoneName(j)), err)
		}
		outFP.Add(s)
		files = append(files, d.Files...)
		shards = append(shards, d.Shards...)
	}
	if lp.Packing != nil {
		// A reduce numbers its packed rows from 0: the global first rows
		// are prefix sums of the files' queries.
		var next int64
		for k := range files {
			files[k].FirstRow = next
			next += files[k].Rows
		}
	}
	if inFP.Rows != lp.Rows {
		// The plan does not describe what its maps read: plan.json was
		// edited or damaged, or the maps ran against other inputs.
		return nil, nil, nil, errs.WithHint(errs.BadInputf("%s plans %d rows, its map tasks read %d; nothing committed", lp.work.URL(plan.FileName), lp.Rows, inFP.Rows),
			"plan again (relayout plan) and rerun the tasks")
	}
	if outFP != inFP {
		// The task manifests are intact (sealDone), so the tasks disagree:
		// rows were lost or changed on the way.
		return nil, nil, nil, fmt.Errorf("row check failed: the rows written (fingerprint %s, %d rows) differ from the rows read (%s, %d rows; the plan has %d); nothing committed", outFP, outFP.Rows, inFP, inFP.Rows, lp.Rows)
	}
	m := buildManifest(tbl, tbl.Schema, lp.hist.Slices, files, lp.Config, lp.ConfigHash, lp.opts, inFP)
	var queries []int64
	outSchema, packed := tbl.Schema, false
	if pg := lp.Packing; pg != nil {
		// The packed layout as every reduce decided it, and the packing
		// figures from the plan's key pass (the reduces' query counts
		// were checked against it).
		keys, err := resolveKeys(tbl, lp.opts)
		if err != nil {
			return nil, nil, nil, err
		}
		dec, err := decidePacking(tbl, keys, det, lp.opts)
		if err != nil {
			return nil, nil, nil, err
		}
		queries = slices.Clone(pg.PerSlice)
		m = packedManifest(tbl, dec, &dedupe.Packer{}, lp.hist, queries, files, lp.Config, lp.ConfigHash, lp.opts, inFP, plan.SizesOf(tbl).Bytes)
		outSchema, packed = dec.Layout.Packed, true
		m.Packing.Queries, m.Packing.Items, m.Packing.ItemsPerQuery = pg.Queries, pg.Items, pg.ItemsPerQuery
		if m.Totals.Rows != pg.Queries || m.Packing.Items != tbl.Rows {
			return nil, nil, nil, fmt.Errorf("the files hold %d queries, the plan counted %d; nothing committed", m.Totals.Rows, pg.Queries)
		}
	}
	if tr := lp.tensorRun(prof); tr != nil {
		// The tensor schema as every reduce fixed it, from the merged
		// profile of the map tasks.
		if err := tr.fix(outSchema, packed, lp.opts); err != nil {
			return nil, nil, nil, err
		}
		// A task manifest is a file anyone may edit (its checksum guards
		// against damage, not edits): a shard's byte counts are one per
		// tensor, or the report would index past the schema (found by
		// FuzzPlanAndTaskManifests: a panic in commit).
		for _, s := range shards {
			if n := len(tr.plan.Tensors()); len(s.TensorBytes) != n {
				return nil, nil, nil, errs.Preconditionf("re-run the reduce task that wrote it", "shard %s lists %d tensors' bytes, the plan has %d tensors", s.Path, len(s.TensorBytes), n)
			}
		}
		m.Tensors = tr.manifest(m, shards, lp.opts)
		if m.Tensors.Totals.Rows != m.Totals.Rows || (m.Packing != nil && m.Tensors.Totals.Items != m.Packing.Items) {
			return nil, nil, nil, fmt.Errorf("the shards hold %d samples and %d items, the Parquet files %d; nothing committed", m.Tensors.Totals.Rows, m.Tensors.Totals.Items, m.Totals.Rows)
		}
	}
	return m, queries, shards, nil
}

// checkShards checks what a reduce task's manifest says of its tensor
// shards against its partition: shards that follow one another, none
// empty, holding the partition's samples (its queries and items, packed)
// and no more. A damaged or edited manifest (the fuzzer's: a shard's "rows" key
// renamed, so it read as 0) would otherwise surface at the end as a count
// mismatch taken for a bug.
func checkShards(shards []writer.Shard, pp plan.Partition, packed bool) error {
	want := pp.Rows
	if packed {
		want = pp.Queries
	}
	var rows, items int64
	for i, sh := range shards {
		if sh.Rows <= 0 {
			return fmt.Errorf("shard %s holds %d samples", sh.Path, sh.Rows)
		}
		if i > 0 {
			prev := shards[i-1]
			if sh.FirstRow != prev.FirstRow+prev.Rows || (packed && sh.FirstItem != prev.FirstItem+prev.Items) {
				return fmt.Errorf("shard %s starts at sample %d (item %d), not where %s ends", sh.Path, sh.FirstRow, sh.FirstItem, prev.Path)
			}
		}
		rows += sh.Rows
		items += sh.Items
	}
	if rows != want {
		return fmt.Errorf("its shards hold %d samples, the partition %d", rows, want)
	}
	if packed && items != pp.Rows {
		return fmt.Errorf("its shards hold %d items, the partition %d", items, pp.Rows)
	}
	return nil
}

// mapRefs returns the row groups map task task of the plan reads, from
// tbl (the whole input, or a map task's own files).
func mapRefs(tbl *source.Table, pm plan.Map, task int) ([]source.RowGroupRef, error) {
	byIndex := make(map[int]*source.File, len(tbl.Files))
	for _, f := range tbl.Files {
		byIndex[f.Index] = f
	}
	refs := make([]source.RowGroupRef, len(pm.RowGroups))
	for i, rgi := range pm.RowGroups {
		f := byIndex[rgi[0]]
		if f == nil || rgi[1] < 0 || rgi[1] >= len(f.RowGroupRows) {
			return nil, errs.BadInputf("plan: map %d names row group %v, which the input lacks", task, rgi)
		}
		refs[i] = source.RowGroupRef{File: f, RowGroup: rgi[1]}
	}
	return refs, nil
}

// runs splits a map task's row groups into the batches it routes
// (partition.Runs): small ones joined where their rows follow on, since a
// joined batch's input positions are counted from its first row.
func (lp *loadedPlan) runs(refs []source.RowGroupRef) []int {
	rows := source.RowsOf(refs)
	for i, r := range refs {
		if plan.SliceRowsOf(r) > 0 { // routed alone, in slices
			rows[i] = partition.SmallRows
		}
	}
	return partition.Runs(rows, lp.joinRows(), func(i int) bool {
		return refs[i].Follows(refs[i-1]) && plan.SliceRowsOf(refs[i-1]) == 0
	})
}

// joinRows is how many rows of small input row groups a map routes at
// once (partition.Runs): partition.CoalesceRows, or half a unit where
// units are smaller (the plan gives a unit room for holding a row group
// several times over).
func (lp *loadedPlan) joinRows() int64 {
	return max(min(partition.CoalesceRows, lp.UnitRows/2), 1)
}

// routedBatches is how many batches the map tasks route: their row groups,
// with runs of small ones counted once (joinRows).
func (lp *loadedPlan) routedBatches(tbl *source.Table) (int, error) {
	n := 0
	for task, pm := range lp.Maps {
		refs, err := mapRefs(tbl, pm, task)
		if err != nil {
			return 0, err
		}
		n += len(lp.runs(refs)) - 1
	}
	return n, nil
}
