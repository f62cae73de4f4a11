package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
	"github.com/relayout/relayout/verify"
	"github.com/relayout/relayout/writer"
)

// Result is what a successful run produced.
type Result struct {
	Manifest *manifests.Manifest
	Report   *report.Report
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Run re-lays the input table out under the output location. It is the
// distributed plan (docs/distributed.md) executed in one process: the same
// plan, the same map routing, detect and reduce code, in goroutines, with
// the shuffle in a local temporary folder; when the whole table fits one
// unit in memory, the shuffle is skipped and every partition is a range of
// the table sorted once.
func Run(ctx context.Context, opts RunOptions) (res *Result, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && ctx.Err() != nil && !errs.Is(err, errs.BadInput) {
			err = errs.TransientErr(fmt.Errorf("interrupted (%v); nothing was committed", context.Cause(ctx)))
		}
	}()
	rep := report.New("run", opts.MemoryLimit, opts.Parallel, opts.TmpDir)
	log := opts.Log
	t0 := time.Now()

	out, err := storage.OpenDir(ctx, opts.Output, true)
	if err != nil {
		return nil, err
	}
	// Until the manifest is committed, what this run writes under these
	// prefixes is removed on failure (claimOutput emptied them).
	claim, err := claimOutput(ctx, out, opts.Inputs, opts.Overwrite, true, "run", "parquet/", "tensors/")
	if err != nil {
		return nil, err
	}
	defer claim.release(ctx)

	tr, err := newTensorRun(opts)
	if err != nil {
		return nil, err
	}
	// The process's memory regime (holdMemory), set before the inputs are
	// opened: footers of many files are heap too.
	var mem *heldMemory
	if !opts.sample {
		mem = holdMemory(opts.MemoryLimit, opts.Parallel, true)
		defer mem.release()
	}
	tbl, keys, in, counts, err := openTable(ctx, &opts)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	if s := opts.sampleOf; s != nil {
		in.RowBytes, in.FileRowBytes = s.RowBytes, s.FileRowBytes
	}
	inBytes := in.Bytes
	rep.Input = report.Input{Files: len(tbl.Files), Bytes: inBytes, Rows: tbl.Rows, RowGroups: tbl.NumRowGroups()}
	log.Info("inputs opened", "files", len(tbl.Files), "rows", tbl.Rows, "bytes", inBytes)

	// 1. Plan: the key pass, the layout, the partitions and units.
	opts.Progress.Start("plan", int64(tbl.NumRowGroups()))
	stopAdvice := opts.adviseHeap(keyPassHeld(tbl, in.RowBytes, opts.Parallel))
	ks, err := plan.AnalyzeSized(ctx, tbl, keys, in, opts.layout(tr), opts.resources())
	stopAdvice()
	opts.Progress.Finish()
	if err != nil {
		return nil, err
	}
	opts.fitted(ks)
	defer func() {
		if ks.Sample != nil {
			ks.Sample.Release()
		}
	}()
	defer func() {
		if ks.First != nil { // not taken by the read
			ks.First.Release()
		}
	}()
	if err := checkFolders(ks.Hist, opts, in.FileRowBytes); err != nil {
		return nil, err
	}
	// In-process map tasks: one per core, over consecutive row groups.
	mapBytes := max(inBytes/int64(max(opts.Parallel, 1)), 1)
	// Run reads a unit once for every partition it holds, so small
	// partitions (a Hive output's folders) share units: a spilling run of
	// 1,200 folders would otherwise route rows to 1,200 units.
	joined := opts.resources()
	joined.JoinPartitions = true
	p, err := plan.Build(ctx, tbl, keys, ks, opts.layout(tr), joined, opts.Inputs, mapBytes)
	if err != nil {
		return nil, err
	}
	ks.Extra = nil
	if p.Packing != nil && ks.Sample != nil {
		p.Packing.Probe = probeDetection(ks.Sample, keys) // for its conflicts (withProbe)
	}
	lp := &loadedPlan{Plan: p, out: claim.target, work: out, opts: opts, hist: ks.Hist, tensors: tr.config(opts)}
	units, _ := p.Units()
	rep.Units = len(units)
	rep.ConfigHash = p.ConfigHash
	rep.AddStage("plan", t0)
	if p.Packing == nil && ks.Sample != nil {
		// A flat run writes the input's schema: its encodings are chosen
		// now, and the sample (32Ki decoded rows, 10 MB of the 1M-row
		// log) is not held through the run. At --memory-limit 128MiB it
		// was a sixth of the heap Go's soft limit leaves, and the
		// collector ran more often for it.
		if _, err := lp.encodings(ks.Sample, tbl.Schema); err != nil {
			return nil, err
		}
		ks.Sample.Release()
		ks.Sample = nil
	}
	whole := len(ks.Memory.Units) == 1 // the table fits one unit: no shuffle
	if whole {
		rep.Units = 1
	} else if mem != nil {
		// A run that spills holds a unit or a row group at a time, and the
		// soft limit bounds its heap: at GOGC 30 the collector ran 100
		// times a second. 50 measured fastest (--memory-limit 128MiB, the
		// 1M-row log: 5.7 -> 4.6 s; 4x: 23.5 -> 21.4 s; 100 was slower at
		// 4x, the heap at the limit and its pages returned and faulted
		// back) and the peak RSS grew 5 MB.
		// No floor either: the soft limit bounds the heap, and a floor
		// let it grow 8 MiB nearer the limit (--memory-limit 128MiB).
		mem.spilling()
	}
	log.Info("planned", "slices", len(ks.Hist.Slices), "files", len(ks.Layout.Files), "partitions", len(p.Partitions), "row_group_rows", ks.Layout.TargetRows,
		"units", len(units), "unit_rows", p.UnitRows, "in_memory", whole, "chunk_rows", p.ChunkRows, "row_bytes", int(in.RowBytes), "decoded_row_bytes", int(ks.Memory.MemRowBytes), "fixed_mib", ks.Memory.Fixed>>20)

	// 2. Map: route every row to its unit.
	t1 := time.Now()
	var maps []*TaskManifest
	var sorted *partition.UnitRows
	var dig *partition.RowDigest // the in-memory read's, for the detection
	if whole {
		// The whole table is decoded at once: its heap is faulted in once.
		defer opts.adviseHeap(int64(float64(tbl.Rows) * ks.Memory.MemRowBytes))()
		opts.Progress.Start("read", tbl.Rows)
		prof := tensors.NewProfile()
		observe := func(arrow.RecordBatch) {}
		if tr != nil { // list lengths fix the tensor shapes
			observe = prof.Observe
		}
		first := ks.First
		ks.First = nil
		tbl.Compact = true // every row group is held to the end
		if p.Packing != nil {
			dig = rowDigest(p.Packing.Probe, tbl.Schema, keys.Query)
		}
		recs, fp, err := partition.ReadAll(ctx, tbl, opts.Parallel, opts.Progress.Add, observe, first, dig)
		opts.Progress.Finish()
		if err != nil {
			return nil, err
		}
		maps = []*TaskManifest{{Kind: "map", Rows: fp.Rows, Hash: fp.String(), Profile: prof.Lengths()}}
		// ReadAll joins row groups of a few rows each (many small files),
		// in order, once they are checked and fingerprinted.
		if groups := tbl.NumRowGroups(); len(recs) < groups {
			log.Debug("small row groups joined", "row_groups", groups, "batches", len(recs))
		}
		rep.AddStage("read", t1)
		t1 = time.Now()
		ord, err := partition.Sort(ks.Hist, recs, keys.Slice, keys.Sort, opts.Parallel)
		if err == nil && int64(len(ord)) != tbl.Rows {
			err = fmt.Errorf("internal: read %d rows, the footers say %d", len(ord), tbl.Rows)
		}
		if err != nil {
			for _, r := range recs {
				r.Release()
			}
			return nil, err
		}
		if sorted, err = partition.NewUnitRows(tbl.Schema, recs); err != nil {
			return nil, err
		}
		sorted.Ord = ord
		defer sorted.Release()
	} else {
		dir, err := partition.NewSpillDir(opts.TmpDir)
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if lp.work, err = storage.OpenDir(ctx, dir, true); err != nil {
			return nil, err
		}
		batches, err := lp.routedBatches(tbl)
		if err != nil {
			return nil, err
		}
		lp.bins = partition.Bins(units, batches)
		// The map tasks read the files in order, a few at a time: the
		// others' footers (128 KB each on the generated log, every file
		// open after the plan) need not stay in the heap meanwhile.
		if err := tbl.Close(); err != nil {
			return nil, errs.TransientErr(err)
		}
		tbl.MaxOpen = 2 * max(ks.Memory.MapWorkers, 1)
		// A spilling run's heap sits at its soft limit, and a row group
		// routed in arrays twice its size makes the collector and the
		// scavenger work harder (16x the log at 128 MiB: map 20.5 -> 17.0 s,
		// system time 24.7 -> 20.7 s; 1x no different).
		tbl.Compact = true
		opts.Progress.Start("map", tbl.Rows)
		maps = make([]*TaskManifest, len(p.Maps))
		err = par.ForEach(ctx, len(p.Maps), ks.Memory.MapWorkers, func(i int) error {
			var err error
			maps[i], err = lp.mapRows(ctx, tbl, keys, i, max(opts.Parallel/ks.Memory.MapWorkers, 1), false)
			return err
		})
		opts.Progress.Finish()
		if err != nil {
			return nil, err
		}
		for _, d := range maps {
			for _, mp := range d.Partitions {
				rep.SpillBytes += mp.Bytes
			}
		}
		rep.AddStage("map", t1)
		// Nothing reads the input again: its files' footers (8 MB of
		// heap for the 64 files of 16M rows) go, and a file still needed
		// would be opened again.
		if err := tbl.Close(); err != nil {
			return nil, errs.TransientErr(err)
		}
		if lp.bins != nil {
			// The second pass of the shuffle, as much at once as the map.
			t1 = time.Now()
			opts.Progress.Start("rebin", tbl.Rows)
			lp.binned, err = lp.rebin(ctx, tbl.Schema, maps, ks.Memory.MapWorkers, max(opts.Parallel/ks.Memory.MapWorkers, 1), max(tbl.LargestRowGroup(), 1))
			opts.Progress.Finish()
			if err != nil {
				return nil, err
			}
			for _, s := range lp.binned {
				rep.SpillBytes += s.Bytes
			}
			rep.AddStage("rebin", t1)
		}
	}
	t1 = time.Now()
	reader := func(j int) (*partitionReader, error) {
		pr, err := lp.partitionReader(ctx, tbl, keys, j, maps)
		if err != nil {
			return nil, err
		}
		pr.Sorted = sorted
		return pr, nil
	}

	// 3. Detect (packed): which columns are query-level, over all rows.
	var det dedupe.Detection
	if p.Packing != nil {
		if sorted != nil { // every row in order at once
			var ok bool
			det, ok = detectSorted(sorted.Ord, dig, p.Packing.Probe)
			dig = nil
			log.Info("detected", "by", map[bool]string{true: "digests", false: "rows"}[ok])
			if !ok {
				d := dedupe.NewDetector(tbl.Schema, keys.Query)
				if err := detectUnit(d, sorted); err != nil {
					return nil, err
				}
				det = dedupe.DetectionOf(d)
			}
		}
		var unit sharedUnit
		for j := range p.Partitions {
			if sorted != nil {
				break
			}
			pr, err := reader(j)
			if err == nil {
				err = unit.use(ctx, pr)
			}
			if err != nil {
				unit.release()
				return nil, err
			}
			d, _, err := pr.detect(ctx)
			if err != nil {
				unit.release()
				return nil, err
			}
			det.Merge(d)
		}
		unit.release()
		det = withProbe(det, p.Packing.Probe)
		rep.AddStage("detect", t1)
		t1 = time.Now()
	}

	// 4. Reduce: each partition's files and shards, in order.
	opts.Progress.Start("write", tbl.Rows)
	reduces, err := lp.writePartitions(ctx, reader, sorted != nil, det, ks.Sample, 0, len(lp.Partitions), nil)
	if err != nil {
		return nil, err
	}
	opts.Progress.Finish()
	rep.AddStage("write", t1)

	// 5. Check what was written against the plan and the input.
	m, queries, shards, err := lp.assemble(tbl, maps, reduces, det)
	if err != nil {
		return nil, err
	}
	var costs *report.OutputCosts // the report's models of the files, made while the check has each open
	if opts.Check != CheckNone {
		t2 := time.Now()
		opts.Progress.Start("check", m.Totals.Rows)
		var each func(int, *source.Table)
		if !opts.sample {
			costs = report.NewOutputCosts(ks.Hist, m, opts.SliceKeys)
			each = costs.File
		}
		vr, err := verify.ManifestEach(ctx, claim.target, m, opts.Check == CheckFull, opts.Parallel, opts.Progress, each)
		opts.Progress.Finish()
		if err != nil {
			return nil, err
		}
		if !vr.OK {
			return nil, fmt.Errorf("output check failed, nothing committed: %s", vr.Problem)
		}
		rep.AddStage("check", t2)
	}

	// 6. Commit.
	if err := claim.commit(ctx, m); err != nil {
		return nil, err
	}
	if opts.sample {
		rep.Finish(t0, m)
		return &Result{Manifest: m, Report: rep}, nil
	}
	maxItems := int64(0)
	if p.Packing != nil {
		maxItems = p.Packing.MaxItems
	}
	rep.Cost.BytesRead, rep.Cost.Requests = counts.Bytes.Load(), counts.Requests.Load()
	t3 := time.Now()
	if err := report.FillRunWith(ctx, rep, tbl, out, m, ks.Hist, ks.Before, queries, shards, ks.Layout, maxItems, opts.SliceKeys, opts.ReportSlices, costs); err != nil {
		log.Warn("could not complete the report", "err", err)
	}
	rep.AddStage("report", t3)
	rep.Finish(t0, m)
	if rdata, err := json.MarshalIndent(rep, "", " "); err == nil {
		if err := putObject(ctx, out, report.FileName, append(rdata, '\n')); err != nil {
			log.Warn("could not write report", "err", err)
		}
	}
	log.Info("committed", "manifest", out.URL(manifests.FileName), "files", m.Totals.Files, "rows", m.Totals.Rows, "bytes", m.Totals.Bytes)
	return &Result{Manifest: m, Report: rep}, nil
}

// checkOutput refuses an output that holds a manifest unless overwrite is
// set, and says whether it holds one.
func checkOutput(ctx context.Context, out storage.Location, overwrite bool) (bool, error) {
	exists, err := out.Bucket.Exists(ctx, out.Key(manifests.FileName))
	if err != nil {
		return false, storage.Classify(fmt.Errorf("check %s: %w", out.URL(manifests.FileName), err))
	}
	if exists && !overwrite {
		return true, errs.Preconditionf("pass --overwrite to replace it", "output %s already holds a manifest", out.Name)
	}
	return exists, nil
}

// putObject writes a JSON object atomically (storage.Put).
func putObject(ctx context.Context, out storage.Location, rel string, data []byte) error {
	return storage.Put(ctx, out, rel, data, storage.PutOptions{})
}

func buildManifest(tbl *source.Table, schema *arrow.Schema, slices []partition.Slice, files []manifests.File, cfg []byte, cfgHash string, opts RunOptions, fp fingerprint.Sum) *manifests.Manifest {
	m := &manifests.Manifest{
		Format: manifests.Format, FormatVersion: manifests.FormatVersion,
		RelayoutVersion: version.Version, Config: cfg, ConfigHash: cfgHash,
		SliceKeys: nonNil(opts.SliceKeys), SortKeys: nonNil(opts.SortKeys),
		Fingerprint: manifests.Fingerprint{Algorithm: fingerprint.Algorithm, Rows: fp.Rows, Hash: fp.String()},
	}
	for _, f := range schema.Fields() {
		m.Schema = append(m.Schema, manifests.Column{Name: f.Name, Type: f.Type.String(), Nullable: f.Nullable})
	}
	for _, f := range tbl.Files {
		m.Inputs = append(m.Inputs, manifests.Input{Path: f.Obj.URL, Bytes: f.Obj.Size, ETag: f.Obj.ETag, MTime: f.Obj.MTime, Rows: f.Rows})
	}
	spans := make([]manifests.SliceSpan, len(slices))
	for i, s := range slices {
		spans[i] = manifests.SliceSpan{Key: manifests.KeyValues{}, Start: s.Start, Rows: s.Rows}
		for k, name := range opts.SliceKeys {
			spans[i].Key = append(spans[i].Key, manifests.KV{Name: name, Value: s.Values[k]})
		}
	}
	if keys := opts.hiveColumns(); keys != nil {
		m.Partitioning = &manifests.Partitioning{Style: "hive", Keys: keys}
		for _, k := range keys {
			f, _ := schema.FieldsByName(k)
			typ := "string"
			if len(f) > 0 {
				typ = writer.HiveTypeName(f[0].Type)
			}
			m.Partitioning.Types = append(m.Partitioning.Types, typ)
		}
	}
	m.SetFiles(files, spans)
	return m
}

// fileMargin is what a run holds beyond Go's soft limit and the binary's
// resident pages (memlimit.Start): the runtime's own mappings and the
// collector's lag under a competing load (measured at 128 MiB beside two
// spinning processes: up to 7 MiB over the sampled anonymous and file-backed
// memory).
const fileMargin = 12 << 20

// gcFloor is the heap growth below which a run does not collect, until a
// spilling run sets GOGC 50 without one: an eighth of the memory limit, at
// most 64 MiB (the default 2 GiB limit's floor; 16 MiB at --memory-limit
// 128MiB). See internal/gcfloor.
func gcFloor(limit int64) int64 { return min(limit/8, 64<<20) }

// smallShare: a small partition holds at most 1/(smallShare x --parallel)
// of a row group (writePartitions).
const smallShare = 4

// writePartitions writes the plan's partitions [first, end) (a file
// each) in order and returns their task manifests in order, handing each
// to after (when set) as it completes, in order: a reduce task checks
// each partition's files and writes its manifest there.
//
// Small partitions are written several at once. A Hive output of many
// folders is a partition per folder, each a small file whose writing is
// mostly per-file costs (opening the blob, setting up column writers,
// compressing small pages, the footer); written one at a time, such a run
// kept about one core busy. A partition is small when its rows are at most
// a quarter of a row group's (the writer memory the plan budgets; when the
// run spills, of a unit's if fewer, as its rows are read back into memory)
// divided by --parallel. At most --parallel of them run at once, their
// rows together within a quarter of that row group, each writer on one
// goroutine (and one gathering). A larger partition waits for those in
// flight and runs alone on every goroutine, as before (measured:
// partitions of 150,000 rows, a sixth of the 1M-row log each, wrote no
// faster two at a time, with 40 MB more peak RSS).
//
// Each partition's files depend only on its rows, so the output is the
// same bytes whatever runs at once. Results are taken in partition order:
// the first error in that order is the one returned (the partitions still
// in flight are cancelled and abort their sinks), and --fail-after-files
// counts files in that order.
func (lp *loadedPlan) writePartitions(ctx context.Context, reader func(int) (*partitionReader, error), inMemory bool, det dedupe.Detection, sample arrow.RecordBatch, first, end int, after func(j int, d *TaskManifest) error) ([]*TaskManifest, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	k := max(lp.opts.Parallel, 1)
	most := lp.Layout.TargetRows
	if !inMemory {
		most = min(most, lp.UnitRows) // a spilled partition's units are read into memory
	}
	small := func(pp plan.Partition) bool {
		return k > 1 && pp.Rows <= most/int64(smallShare*k)
	}
	type result struct {
		j    int
		d    *TaskManifest
		err  error
		done chan struct{}
	}
	var (
		window  []*result // started, not yet taken, in order
		reduces []*TaskManifest
		files   int
	)
	take := func() error { // the oldest in flight
		r := window[0]
		window = window[1:]
		<-r.done
		if r.err != nil {
			return r.err
		}
		if after != nil {
			if err := after(r.j, r.d); err != nil {
				return err
			}
		}
		reduces = append(reduces, r.d)
		if files += len(r.d.Files); lp.opts.FailAfterFiles > 0 && files >= lp.opts.FailAfterFiles && r.j < end-1 {
			return errs.TransientErr(fmt.Errorf("injected failure after %d files", files))
		}
		return nil
	}
	fail := func(err error) ([]*TaskManifest, error) {
		cancel()
		for _, r := range window {
			<-r.done // each aborts its own sink
		}
		return nil, err
	}
	var unit sharedUnit // read once for the partitions in flight that share it
	defer unit.release()
	for j := first; j < end; j++ {
		pp := lp.Partitions[j]
		var pr *partitionReader
		if lp.Packing == nil || len(pp.Files) > 0 {
			var err error // else a query covers the whole range: no file
			if pr, err = reader(j); err != nil {
				return fail(err)
			}
		}
		alone := pr == nil || !small(pp)
		for len(window) > 0 && (alone || len(window) >= k || !unit.holds(pr)) {
			if err := take(); err != nil {
				return fail(err)
			}
		}
		if err := unit.use(ctx, pr); err != nil {
			return fail(err)
		}
		r := &result{j: j, done: make(chan struct{})}
		window = append(window, r)
		if lp.opts.onPartition != nil {
			var rows int64
			for _, w := range window {
				rows += lp.Partitions[w.j].Rows
			}
			lp.opts.onPartition(j, len(window), rows, most/smallShare)
		}
		if alone {
			r.d, r.err = lp.writePartition(ctx, pr, det, sample)
			close(r.done)
			if err := take(); err != nil {
				return fail(err)
			}
			continue
		}
		pr.Parallel = 1 // its segment reads and its writer
		go func() {
			defer close(r.done)
			r.d, r.err = lp.writePartition(ctx, pr, det, sample)
		}()
	}
	for len(window) > 0 {
		if err := take(); err != nil {
			return fail(err)
		}
	}
	return reduces, nil
}

// sharedUnit is the unit of several partitions (plan.Resources.JoinPartitions)
// that run has read and sorted: once, for all of them.
type sharedUnit struct {
	id   int
	rows *partition.UnitRows
}

// holds reports whether pr needs nothing read, or only the unit held: a
// partition of another unit may not start before those using it are done.
func (s *sharedUnit) holds(pr *partitionReader) bool {
	return s.rows == nil || pr != nil && pr.Sorted == nil && pr.shared == s.id
}

// use hands pr its rows when they are in a shared unit: the one held, or
// (releasing that) the one read now. Nothing else may use the one held.
func (s *sharedUnit) use(ctx context.Context, pr *partitionReader) error {
	if pr == nil || pr.Sorted != nil || pr.shared < 0 {
		s.release()
		return nil
	}
	if s.rows == nil || s.id != pr.shared {
		s.release()
		rows, err := pr.Load(ctx, 0) // its one unit
		if err != nil {
			return err
		}
		s.id, s.rows = pr.shared, rows
	}
	pr.Sorted, pr.SortedStart = s.rows, pr.Units[0].Start
	return nil
}

// release releases the unit held, if any.
func (s *sharedUnit) release() {
	if s.rows != nil {
		s.rows.Release()
		s.rows = nil
	}
}
