package partition

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/writer"
)

// UnitRows holds the rows of one unit in input order, as the record
// batches they were read in, and Ord, the order of those rows in the
// output. Rows are numbered across the batches.
type UnitRows struct {
	recs   []arrow.RecordBatch
	starts []int64 // starts[k]: batch k's first row; the last entry is the total
	// whole holds, for columns gather does not handle, the batches'
	// arrays concatenated once, on first use; shared by views.
	whole *wholeCols
	view  bool
	Ord   []int64
}

type wholeCols struct {
	once []sync.Once
	arr  []compute.Datum
	err  []error
}

// Release releases the batches, unless u is a view of another UnitRows.
func (u *UnitRows) Release() {
	if u.view {
		return
	}
	for _, r := range u.recs {
		r.Release()
	}
	if u.whole != nil {
		for _, d := range u.whole.arr {
			if d != nil {
				d.Release()
			}
		}
	}
	u.recs = nil
}

// NewUnitRows takes ownership of recs (rows in input order, all of one
// schema). Nothing is copied: Take gathers rows straight from the batches
// (measured on the 1M-row generated log: concatenating every column into
// one array first took 0.68 s of a 4.2 s run, mostly page faults on the
// fresh copy, and doubled a column's memory while it ran).
func NewUnitRows(schema *arrow.Schema, recs []arrow.RecordBatch) (*UnitRows, error) {
	u := &UnitRows{recs: recs, starts: BatchStarts(recs)}
	for k, r := range recs {
		if !r.Schema().Equal(schema) {
			u.Release()
			return nil, fmt.Errorf("internal: batch %d's schema differs from the unit's", k)
		}
	}
	nc := schema.NumFields()
	u.whole = &wholeCols{once: make([]sync.Once, nc), arr: make([]compute.Datum, nc), err: make([]error, nc)}
	return u, nil
}

// View returns rows of u in the order ord, sharing u's batches; releasing
// the view releases nothing.
func (u *UnitRows) View(ord []int64) *UnitRows {
	return &UnitRows{recs: u.recs, starts: u.starts, whole: u.whole, view: true, Ord: ord}
}

// Rows is the number of rows held.
func (u *UnitRows) Rows() int64 { return u.starts[len(u.starts)-1] }

// Batches returns the batches the rows are held in, in input order.
func (u *UnitRows) Batches() []arrow.RecordBatch { return u.recs }

// column returns column c's arrays, one per batch.
func (u *UnitRows) column(c int) []arrow.ArrayData {
	out := make([]arrow.ArrayData, len(u.recs))
	for k, r := range u.recs {
		out[k] = r.Column(c).Data()
	}
	return out
}

// concatenated returns column c as one array, made on first use.
func (u *UnitRows) concatenated(c int, schema *arrow.Schema) (compute.Datum, error) {
	w := u.whole
	w.once[c].Do(func() {
		var arr arrow.Array
		switch len(u.recs) {
		case 0:
			arr = array.MakeArrayOfNull(memory.DefaultAllocator, schema.Field(c).Type, 0)
		case 1:
			arr = u.recs[0].Column(c)
			arr.Retain()
		default:
			chunks := make([]arrow.Array, len(u.recs))
			for k, r := range u.recs {
				chunks[k] = r.Column(c)
			}
			arr, w.err[c] = array.Concatenate(chunks, memory.DefaultAllocator)
		}
		if w.err[c] == nil {
			w.arr[c] = compute.NewDatum(arr)
			arr.Release()
		}
	})
	return w.arr[c], w.err[c]
}

// Take gathers the rows numbered idx (across the batches) into a record.
func (u *UnitRows) Take(ctx context.Context, schema *arrow.Schema, idx []int64) (arrow.RecordBatch, error) {
	locs, err := spansOf(u.starts, idx, make([]span, 0, len(idx)))
	if err != nil {
		return nil, err
	}
	arrs := make([]arrow.Array, 0, schema.NumFields())
	release := func() {
		for _, a := range arrs {
			a.Release()
		}
	}
	var indD compute.Datum
	defer func() {
		if indD != nil {
			indD.Release()
		}
	}()
	for c := 0; c < schema.NumFields(); c++ {
		t := schema.Field(c).Type
		if gatherable(t) {
			d, err := gather(t, u.column(c), locs)
			if err != nil {
				release()
				return nil, fmt.Errorf("gather column %s: %w", schema.Field(c).Name, err)
			}
			arrs = append(arrs, array.MakeFromData(d))
			d.Release()
			continue
		}
		col, err := u.concatenated(c, schema)
		if err != nil {
			release()
			return nil, fmt.Errorf("gather column %s: %w", schema.Field(c).Name, err)
		}
		if indD == nil {
			b := array.NewInt64Builder(memory.DefaultAllocator)
			b.AppendValues(idx, nil)
			ind := b.NewInt64Array()
			b.Release()
			indD = compute.NewDatum(ind)
			ind.Release()
		}
		arr, err := takeDatum(ctx, col, indD)
		if err != nil {
			release()
			return nil, fmt.Errorf("gather column %s: %w", schema.Field(c).Name, err)
		}
		arrs = append(arrs, arr)
	}
	rec := array.NewRecordBatch(schema, arrs, int64(len(idx)))
	release()
	return rec, nil
}

// takeDatum is arrow's Take of one column.
func takeDatum(ctx context.Context, col, ind compute.Datum) (arrow.Array, error) {
	res, err := compute.Take(ctx, *compute.DefaultTakeOptions(), col, ind)
	if err != nil {
		return nil, err
	}
	defer res.Release()
	switch r := res.(type) {
	case *compute.ArrayDatum:
		return r.MakeArray(), nil
	case *compute.ChunkedDatum:
		ch := r.Value
		if len(ch.Chunks()) == 1 {
			arr := ch.Chunk(0)
			arr.Retain()
			return arr, nil
		}
		return array.Concatenate(ch.Chunks(), memory.DefaultAllocator)
	}
	return nil, fmt.Errorf("unexpected take result %T", res)
}

// WriteUnit gathers the unit's rows in output order on `workers` goroutines
// and writes them to sink in order, one chunk (a planned row group, or a
// part of one) per Write. At most workers+1 chunks are in flight. When fp
// is set, each chunk's content fingerprint is added to it, computed on the
// gathering goroutines. The caller finishes or aborts the sink.
func WriteUnit(ctx context.Context, schema *arrow.Schema, src *UnitRows, unit Unit, workers int, fp *fingerprint.Sum, sink writer.Sink) error {
	chunks := unit.Chunks
	type result struct {
		rec arrow.RecordBatch
		fp  fingerprint.Sum
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// outs[i] receives chunk i's result exactly once (buffered: never blocks).
	outs := make([]chan result, len(chunks))
	for i := range outs {
		outs[i] = make(chan result, 1)
	}
	jobs := make(chan int)
	// slots bounds look-ahead: the producer takes a slot before dispatching a
	// chunk; the writer frees it after consuming that chunk.
	slots := make(chan struct{}, workers+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // producer
		defer wg.Done()
		defer close(jobs)
		for i := range chunks {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				ch := chunks[i]
				lo := ch.Start - unit.Start
				rec, err := src.Take(ctx, schema, src.Ord[lo:lo+ch.Rows])
				var sum fingerprint.Sum
				if err == nil && fp != nil {
					sum, err = RecordSum(rec, "")
				}
				outs[i] <- result{rec, sum, err}
			}
		}()
	}
	var firstErr error
	consumed := 0
	for i := range chunks {
		var r result
		select {
		case r = <-outs[i]:
		case <-ctx.Done():
			firstErr = ctx.Err()
		}
		if firstErr != nil {
			break
		}
		consumed = i + 1
		<-slots // chunk i was dispatched, so its slot is held
		if r.err != nil {
			firstErr = r.err
			break
		}
		if fp != nil {
			fp.Add(r.fp)
		}
		err := sink.Write(r.rec)
		r.rec.Release()
		if err != nil {
			firstErr = err
			break
		}
	}
	cancel()
	wg.Wait() // the producer sees the cancel and closes jobs; workers drain it
	for _, o := range outs[consumed:] {
		select {
		case r := <-o:
			if r.rec != nil {
				r.rec.Release()
			}
		default:
		}
	}
	return firstErr
}

// RowDigest asks ReadAll for per-row hashes of groups of columns, taken in
// the fingerprint's pass over the values (fingerprint.RowHashesWith), so
// that no column is hashed twice.
type RowDigest struct {
	// Group holds, per column of the table, the group it is hashed into
	// (-1: none).
	Group []int
	// Exact, per group (nil or shorter: none), asks for the group's
	// exact hashes (fingerprint.ExactRowHashes), which tell a -0 from a 0.
	Exact []bool
	// Hashes is filled by ReadAll: per group, a hash per row of the table,
	// in row order.
	Hashes [][]uint64
}

// ReadAll decodes every row group (all columns) and fingerprints it,
// handing each to observe and its row count to progress as it is read. It
// returns the rows in input order, runs of small row groups joined into
// one batch each (Coalesce).
// first, when not nil, is the first non-empty row group already decoded
// (the plan's sample): ReadAll takes it over instead of decoding it again.
// dig, when not nil, gets the per-row hashes it asks for.
func ReadAll(ctx context.Context, t *source.Table, parallel int, progress func(rows int64), observe func(arrow.RecordBatch), first arrow.RecordBatch, dig *RowDigest) ([]arrow.RecordBatch, fingerprint.Sum, error) {
	refs := t.RowGroups()
	recs := make([]arrow.RecordBatch, len(refs))
	sums := make([]fingerprint.Sum, len(refs))
	starts := make([]int64, len(refs)+1)
	for i, ref := range refs {
		starts[i+1] = starts[i] + ref.Rows()
	}
	groups := 0
	if dig != nil {
		if len(dig.Group) != t.Schema.NumFields() {
			return nil, fingerprint.Sum{}, fmt.Errorf("internal: %d column groups for %d columns", len(dig.Group), t.Schema.NumFields())
		}
		for _, g := range dig.Group {
			groups = max(groups, g+1)
		}
		dig.Hashes = make([][]uint64, groups)
		for g := range dig.Hashes {
			dig.Hashes[g] = make([]uint64, starts[len(refs)])
		}
	}
	if first != nil {
		for i, ref := range refs {
			if ref.Rows() > 0 {
				if first.NumRows() == ref.Rows() && first.Schema().Equal(t.Schema) {
					recs[i], first = first, nil
				}
				break
			}
		}
		if first != nil {
			first.Release()
		}
	}
	// Row groups are read, fingerprinted and joined (Coalesce) a window
	// of runs at a time, so that a table of many small row groups holds
	// the arrays of one window's, not of all of them, until they are
	// joined: the collector scans every live array at each cycle.
	runs := Runs(source.RowsOf(refs), CoalesceRows, nil)
	window := max(parallel, 2)
	var out []arrow.RecordBatch
	var total fingerprint.Sum
	var err error
	for w := 0; w+1 < len(runs) && err == nil; w += window {
		from, to := runs[w], runs[min(w+window, len(runs)-1)]
		var todo []source.RowGroupRef
		var at []int
		for i := from; i < to; i++ {
			if recs[i] == nil {
				todo, at = append(todo, refs[i]), append(at, i)
			}
		}
		var read []arrow.RecordBatch
		read, err = t.ReadRowGroups(ctx, todo, nil, parallel)
		if err != nil {
			break
		}
		for k, i := range at {
			recs[i] = read[k]
		}
		err = par.ForEach(ctx, to-from, parallel, func(k int) error {
			i := from + k
			observe(recs[i])
			if err := checkRows(recs[i], refs[i]); err != nil {
				return err
			}
			var group []int
			var exact []bool
			extra := make([][]uint64, groups)
			if dig != nil {
				group, exact = dig.Group, dig.Exact
				for g := range extra {
					extra[g] = dig.Hashes[g][starts[i]:starts[i+1]]
				}
			}
			var err error
			if sums[i], err = recordSumWith(recs[i], refs[i].File.Obj.URL, group, extra, exact); err != nil {
				return errs.BadInputf("%s: %v", refs[i].File.Obj.URL, err)
			}
			progress(refs[i].Rows())
			return nil
		})
		if err != nil {
			break
		}
		var joined []arrow.RecordBatch
		if joined, err = Coalesce(ctx, recs[from:to], CoalesceRows, parallel, memory.DefaultAllocator); err != nil {
			break
		}
		out = append(out, joined...) // first: joined may share recs' array
		for i := from; i < to; i++ {
			recs[i] = nil // released by Coalesce, or handed on in out
		}
	}
	if err != nil {
		for _, r := range append(out, recs...) {
			if r != nil {
				r.Release()
			}
		}
		return nil, total, err
	}
	for _, s := range sums {
		total.Add(s)
	}
	return out, total, nil
}

// RouteRecord fingerprints one input row group (rec, read from ref), hands
// it to observe (may be nil), and passes each unit's rows of it, in input
// order, to emit. Row groups must be routed in input order (the Router
// counts the rows of split slices). The fingerprint and observe run
// alongside the routing, since both only read rec, and up to parallel units
// are taken and emitted at once: emit must be safe to call concurrently for
// different units. With rt.Bins set, emit gets each bin's rows instead,
// with UnitColumn appended.
func RouteRecord(ctx context.Context, rec arrow.RecordBatch, ref source.RowGroupRef, rt *Router, sliceCols []int, parallel int,
	observe func(arrow.RecordBatch), emit func(u int, part arrow.RecordBatch) error) (fingerprint.Sum, error) {
	return RouteSlices(ctx, []arrow.RecordBatch{rec}, ref, rt, sliceCols, parallel, observe, emit)
}

// RouteSlices is RouteRecord for one input row group read in slices
// (recs, consecutive, in order; one for the whole row group): each is
// fingerprinted, observed and routed in turn, the fingerprint and observe
// alongside the routing.
func RouteSlices(ctx context.Context, recs []arrow.RecordBatch, ref source.RowGroupRef, rt *Router, sliceCols []int, parallel int,
	observe func(arrow.RecordBatch), emit func(u int, part arrow.RecordBatch) error) (fingerprint.Sum, error) {
	var sum fingerprint.Sum
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	if err := checkRowCount(rows, ref); err != nil {
		return sum, err
	}
	off := ref.Offset()
	for _, rec := range recs {
		var s fingerprint.Sum
		var sumErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			s, sumErr = RecordSum(rec, refName(ref))
			if sumErr == nil && observe != nil {
				observe(rec)
			}
		}()
		err := routeRows(ctx, rec, off, rt, sliceCols, parallel, emit)
		<-done
		if sumErr != nil { // damaged values: say so before any routing error they caused
			return sum, sumErr
		}
		if err != nil {
			return sum, err
		}
		sum.Add(s)
		off += rec.NumRows()
	}
	return sum, nil
}

// RouteRecords is RouteRecord for consecutive row groups of one map task
// (refs, in input order, each read into recs, each one's rows following on
// the one's before) routed as one batch: each is
// fingerprinted and observed on its own, as RouteRecord does, and their
// rows are joined and routed at once, so that small row groups (many small
// files) do not cut every unit's rows into pieces of a few rows. mem
// allocates the joined batch.
func RouteRecords(ctx context.Context, recs []arrow.RecordBatch, refs []source.RowGroupRef, rt *Router, sliceCols []int, parallel int,
	observe func(arrow.RecordBatch), emit func(u int, part arrow.RecordBatch) error, mem memory.Allocator) (fingerprint.Sum, error) {
	if len(recs) == 1 {
		return RouteRecord(ctx, recs[0], refs[0], rt, sliceCols, parallel, observe, emit)
	}
	var sum fingerprint.Sum
	for i := 1; i < len(refs); i++ {
		if !refs[i].Follows(refs[i-1]) {
			return sum, fmt.Errorf("internal: row group %d of %s does not follow on the one routed before it", refs[i].RowGroup, refs[i].File.Obj.URL)
		}
	}
	for i, rec := range recs {
		s, err := RecordSum(rec, refName(refs[i]))
		if err != nil {
			return sum, err
		}
		if err := checkRows(rec, refs[i]); err != nil {
			return sum, err
		}
		if observe != nil {
			observe(rec)
		}
		sum.Add(s)
	}
	joined, err := JoinBatches(recs, mem)
	if err != nil {
		return sum, err
	}
	defer joined.Release()
	return sum, routeRows(ctx, joined, refs[0].Offset(), rt, sliceCols, parallel, emit)
}

// refName names a row group in messages.
func refName(ref source.RowGroupRef) string {
	return fmt.Sprintf("%s: row group %d", ref.File.Obj.URL, ref.RowGroup)
}

// checkRows refuses a decoded row group whose rows are not its footer's.
func checkRows(rec arrow.RecordBatch, ref source.RowGroupRef) error {
	return checkRowCount(rec.NumRows(), ref)
}

// checkRowCount refuses n decoded rows of a row group whose footer says
// otherwise.
func checkRowCount(n int64, ref source.RowGroupRef) error {
	if n != ref.Rows() {
		return errs.BadInputf("%s holds %d rows, its footer says %d", refName(ref), n, ref.Rows())
	}
	return nil
}

// routeRows routes rec's rows, the first at input position off.
func routeRows(ctx context.Context, rec arrow.RecordBatch, off int64, rt *Router, sliceCols []int, parallel int, emit func(u int, part arrow.RecordBatch) error) error {
	byUnit := map[int][]int64{} // by bin, when rt.Bins is set
	var unitsOf map[int][]int32 // by bin: each row's unit
	var binSchema *arrow.Schema
	if rt.Bins != nil {
		unitsOf = map[int][]int32{}
		binSchema = BinSchema(rec.Schema())
	}
	var buf []byte
	for i := 0; i < int(rec.NumRows()); i++ {
		buf = buf[:0]
		for _, c := range sliceCols {
			buf = AppendKey(buf, rec.Column(c), i)
		}
		u, err := rt.UnitOfRow(buf, rec, i, off+int64(i))
		if err != nil {
			return err
		}
		if unitsOf != nil {
			b := rt.Bins[u]
			unitsOf[b] = append(unitsOf[b], int32(u))
			u = b
		}
		byUnit[u] = append(byUnit[u], int64(i))
	}
	rec.Retain()
	return takeGroups(ctx, rec.Schema(), rec.Schema(), []arrow.RecordBatch{rec}, byUnit, parallel, pieceRowsOf(RecordBytes(rec), rec.NumRows()), func(u, first int, part arrow.RecordBatch) error {
		if unitsOf != nil {
			part = withUnits(binSchema, part, unitsOf[u][first:first+int(part.NumRows())])
		}
		defer part.Release()
		return emit(u, part)
	})
}

// routePieceBytes bounds the decoded bytes of one piece routeRows takes
// for a unit at once (minPieceRows rows at least): a wide row group routed
// to few units was taken whole per unit, and each piece encoded whole into
// the shuffle's scratch buffers (2,001 float columns, one 160 MB row group,
// two units: 650 MiB of heap and a peak RSS of 882 MiB under
// --memory-limit 768MiB; 538 MiB with pieces of 8 MiB, fewer with 2).
// Rows of a MiB or more (images, audio) make pieces of minPieceRows.
const (
	routePieceBytes = 2 << 20
	minPieceRows    = 16
)

// pieceRowsOf is the rows of the pieces rows rows of bytes decoded bytes
// are taken in (0 for none).
func pieceRowsOf(bytes, rows int64) int {
	if rows <= 0 {
		return 0
	}
	return int(max(routePieceBytes/max(bytes/rows, 1), minPieceRows))
}

// takeGroups takes each group's rows (positions in recs, which it owns and
// releases) as batches of schema, groups in ascending order and up to
// parallel at once, and hands them to emit, which owns them: a group's
// rows in order, pieceRows at a time (0: all at once), first the position
// in the group's list of the piece's first row. recs are of inSchema.
func takeGroups(ctx context.Context, inSchema, schema *arrow.Schema, recs []arrow.RecordBatch, groups map[int][]int64, parallel, pieceRows int, emit func(g, first int, part arrow.RecordBatch) error) error {
	src, err := NewUnitRows(inSchema, recs)
	if err != nil {
		return err
	}
	defer src.Release()
	keys := make([]int, 0, len(groups))
	for g := range groups {
		keys = append(keys, g)
	}
	slices.Sort(keys)
	return par.ForEach(ctx, len(keys), parallel, func(k int) error {
		idx := groups[keys[k]]
		step := len(idx)
		if pieceRows > 0 {
			step = min(step, pieceRows)
		}
		for first := 0; first < len(idx); first += step {
			part, err := src.Take(ctx, schema, idx[first:min(first+step, len(idx))])
			if err != nil {
				return err
			}
			if err := emit(keys[k], first, part); err != nil {
				return err
			}
		}
		return nil
	})
}

// NewRecord makes a record from arrays it takes ownership of.
func NewRecord(schema *arrow.Schema, arrs []arrow.Array, n int64) arrow.RecordBatch {
	rec := array.NewRecordBatch(schema, arrs, n)
	for _, a := range arrs {
		a.Release()
	}
	return rec
}

// RecordSum fingerprints a decoded record. Values the decoder produced from
// damaged pages can make the hashing index out of range: that is bad input
// (exit 3) naming what was read, not a crash.
func RecordSum(rec arrow.RecordBatch, what string) (sum fingerprint.Sum, err error) {
	return recordSumWith(rec, what, nil, nil, nil)
}

// recordSumWith is RecordSum, filling extra as fingerprint.RecordWith does.
func recordSumWith(rec arrow.RecordBatch, what string, group []int, extra [][]uint64, exact []bool) (sum fingerprint.Sum, err error) {
	if what == "" {
		what = "fingerprint"
	}
	defer errs.Recover(&err, what)
	sum, err = fingerprint.RecordWith(rec, group, extra, exact)
	if err != nil && errs.ClassOf(err) == errs.Internal {
		err = errs.BadInputf("%s: %v", what, err)
	}
	return sum, err
}
