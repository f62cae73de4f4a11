package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/bits"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/writer"
)

// sampleBudget is the share of the input's bytes a dry run may spend on its
// sample (beyond the first row group it samples, which it always reads).
const sampleBudget = 0.05

// DryRun estimates what Run would do with the same options, writing nothing
// under the output. It reads the footers, the slice-key and query-key
// columns (never feature columns), and the first rows of a few row groups
// (at most opts.SampleRows, within about 5% of the input's bytes). Counts
// (rows, slices, queries, items per query, row groups, files, read costs
// before) are exact; sizes are the real pipeline run on the sample in
// memory, scaled by those counts.
func DryRun(ctx context.Context, opts RunOptions) (rep *report.Report, err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && ctx.Err() != nil && !errs.Is(err, errs.BadInput) {
			err = errs.TransientErr(fmt.Errorf("interrupted (%v)", context.Cause(ctx)))
		}
	}()
	t0 := time.Now()
	rep = report.New("dry-run", opts.MemoryLimit, opts.Parallel, opts.TmpDir)
	rep.Estimate = true
	// The run would refuse an output holding a manifest: so does this. A
	// local output folder that does not exist yet is fine.
	if local := strings.TrimPrefix(opts.Output, "file://"); storage.IsURL(opts.Output) && !strings.HasPrefix(opts.Output, "file://") || dirExists(local) {
		out, err := storage.OpenDir(ctx, opts.Output, false)
		if err != nil {
			return nil, err
		}
		if _, err := checkOutput(ctx, out, opts.Overwrite); err != nil {
			return nil, err
		}
	}
	tr, err := newTensorRun(opts)
	if err != nil {
		return nil, err
	}
	tbl, keys, in, counts, err := openTable(ctx, &opts)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	rep.Input = report.Input{Files: len(tbl.Files), Bytes: in.Bytes, Rows: tbl.Rows, RowGroups: tbl.NumRowGroups()}
	_, rep.ConfigHash = configOf(opts, tr)

	// A limit the input's row groups cannot be read within is refused
	// before anything is read, as the run refuses it.
	if err := plan.InputFits(tbl, opts.resources()); err != nil {
		return nil, err
	}
	// The sample and its in-memory run do not depend on the key pass: run
	// them alongside it.
	type sampled struct {
		smp     *sample
		est     *report.SampleEstimate
		err     error
		seconds float64
	}
	sampleDone := make(chan sampled, 1)
	sctx, cancelSample := context.WithCancel(ctx)
	defer cancelSample()
	go func() {
		var r sampled
		defer func() { sampleDone <- r }()
		defer errs.Recover(&r.err, "dry run: sample")
		t1 := time.Now()
		if r.smp, r.err = sampleHeads(sctx, tbl, opts.SampleRows, int64(sampleBudget*float64(in.Bytes))); r.err != nil {
			return
		}
		r.est, r.err = runSample(sctx, tbl.Schema, r.smp, opts, in)
		r.seconds = time.Since(t1).Seconds()
	}()
	kp, err := plan.Scan(ctx, tbl, keys, opts.layout(tr), opts.resources())
	rep.AddStage("keys", t0)
	if err != nil {
		cancelSample()
	}
	sr := <-sampleDone // the run would report a key error first
	if sr.smp != nil {
		defer sr.smp.release()
	}
	if err != nil {
		return nil, err
	}
	if sr.err != nil {
		return nil, sr.err
	}
	smp, est := sr.smp, sr.est
	rep.Stages = append(rep.Stages, report.Stage{Name: "sample", Seconds: sr.seconds})
	hist, before, st := kp.Hist, kp.Before, kp.Stats()
	var qs *queryScan
	if kp.Extra.Queries != nil {
		qs = &queryScan{queries: st.Queries, perSlice: st.PerSliceQueries, dist: st.ItemsPerQuery}
	}
	rep.Cost.SampleRows = smp.rows
	memRowBytes := in.RowBytes
	if smp.rows > 0 {
		memRowBytes = float64(smp.bytes) / float64(smp.rows)
	}
	// The run's memory plan, with the row groups it would lower to fit.
	fitted, layout, mp, err := plan.FitMemory(tbl, hist, in.WithSamples(tbl.Rows, kp.Extra.Queries), memRowBytes, opts.layout(tr), opts.resources())
	if err != nil {
		return nil, err
	}
	if opts.takeFitted(plan.FittedOf(fitted)) {
		_, rep.ConfigHash = configOf(opts, tr)
	}

	// Scale the sample's sizes by the exact counts.
	N := float64(tbl.Rows)
	Q := N
	if qs != nil {
		Q = float64(qs.queries)
	}
	var perSliceQ []int64
	if qs != nil {
		perSliceQ = qs.perSlice
	}
	outCost, dataBytes := report.PredictOutput(hist, layout, perSliceQ, est, len(keys.Slice), len(opts.hiveColumns()), opts.PageBytes)
	nRG := outCost.NumRowGroups()
	parquetBytes := int64(dataBytes + float64(len(layout.Files))*(12+est.FooterBase) + float64(nRG)*est.PerRGOverhead)
	outRows := tbl.Rows
	if qs != nil {
		outRows = qs.queries
	}
	rep.Output = report.Output{ParquetFiles: st.Files, RowGroups: nRG, ParquetBytes: parquetBytes, Rows: outRows, Slices: st.Slices}
	if tbl.Rows == 0 {
		rep.Output.ParquetFiles, rep.Output.RowGroups, rep.Output.ParquetBytes = 0, 0, 0
	}
	var perSliceQueries []int64
	if qs != nil {
		perSliceQueries = qs.perSlice
	}
	rep.Slices = report.SlicesOf(hist, opts.SliceKeys, before, &outCost, perSliceQueries, opts.ReportSlices)

	if qs != nil {
		rep.Packing = &report.Packing{Rows: tbl.Rows, Queries: qs.queries, ItemsPerQuery: qs.dist,
			QueryColumns: est.QueryColumns, ItemColumns: est.ItemColumns, MovedToItems: est.Moved,
			BytesBefore: in.Bytes, BytesAfter: parquetBytes, ParquetBytesSaved: in.Bytes - parquetBytes}
	}
	var tensorData float64
	if est.Tensors != nil {
		scaled := make([]float64, len(est.Tensors))
		for i, t := range est.TensorSchema {
			switch {
			case t.Level == "query" && est.Queries > 0:
				scaled[i] = est.Tensors[i] / float64(est.Queries) * Q
			case est.Rows > 0:
				scaled[i] = est.Tensors[i] / float64(est.Rows) * N
			}
			tensorData += scaled[i]
		}
		// Shards end with each Parquet file: each file's share of the
		// tensor bytes (or samples, with --shard-blocks), by its rows,
		// makes its own shards.
		shards := int64(0)
		for _, f := range layout.Files {
			share := tensorData * float64(f.Rows) / max(N, 1)
			per := float64(opts.ShardBytes)
			if opts.ShardBlocks > 0 {
				share, per = float64(f.Rows)*Q/max(N, 1), float64(opts.ShardBlocks*opts.BlockSamples)
			}
			if f.Rows > 0 {
				shards += int64(share/per) + 1
			}
		}
		shards = max(shards, 1)
		rep.Output.Shards = int(shards)
		rep.Output.TensorBytes = int64(tensorData + float64(shards)*est.ShardHeader)
		rep.Transfer = report.TransferOf(est.TensorSchema, scaled, int64(Q), tbl.Rows)
	}

	// What the real run will need: its memory plan, with the budget's
	// split measured on the sample.
	decoded := N * mp.MemRowBytes
	res := report.Resources{MemoryBytes: opts.MemoryLimit}
	bins := partition.Bins(mp.Units, tbl.NumRowGroups()) // a two-pass shuffle (run)
	if len(mp.Units) <= 1 {
		f := decodedPeakFlat
		if qs != nil {
			f = decodedPeakPacked
		}
		res.MemoryBytes = min(opts.MemoryLimit, int64(plan.RuntimeReserve+f*decoded+min(tensorData, float64(opts.ShardBytes))))
	} else {
		res.TempDiskBytes = int64(decoded * spillRatio)
		if bins != nil {
			// Two passes: a bin's first-pass files are removed once it
			// is rebinned, so the folder peaks one bin above the spill.
			res.TempDiskBytes += res.TempDiskBytes / int64(partition.NumBins(bins))
		}
	}
	// Time: a throughput calibrated on the reference machine, not the
	// sample's own timing, which runs alongside the key pass and varies 2x
	// from run to run.
	work := decoded / 1e9 * coreSecondsPerDecodedGB
	if qs != nil {
		work *= packedWork
	}
	if tr != nil {
		work *= tensorWork
	}
	if len(mp.Units) > 1 {
		work *= spillWork
		if bins != nil {
			work *= rebinWork
		}
	}
	cores := float64(min(opts.Parallel, 8))
	res.Seconds = work/(parallelEfficiency*cores) + float64(rep.Output.ParquetFiles)*secondsPerFile*(fileSerial+(1-fileSerial)/cores)
	rep.Resources = res
	rep.Units = len(mp.Units)

	rowBytesOut := 0.0
	if N > 0 {
		rowBytesOut = float64(parquetBytes) / N
	}
	sq := -1
	if qs != nil {
		sq = est.MultiRowQueries
	}
	maxItems := opts.MaxItemsPerQuery
	if maxItems == 0 {
		maxItems = mp.UnitRows
	}
	if qs == nil {
		maxItems = 0
	}
	rep.Warnings = report.WarningsOf(report.WarnFacts{SliceKeys: opts.SliceKeys, Before: before, Hist: hist, Layout: layout,
		OutRowBytes: rowBytesOut, Packing: rep.Packing, MaxItems: maxItems, SampleQueries: sq})
	if err := checkFolders(hist, opts, rowBytesOut); err != nil {
		rep.Warnings = append(rep.Warnings, report.Warning{Code: "tiny_folders", Message: err.Error() + "; the run will refuse it"})
	}
	rep.Seconds = time.Since(t0).Seconds()
	rep.Cost.BytesRead, rep.Cost.Requests, rep.Cost.Seconds = counts.Bytes.Load(), counts.Requests.Load(), rep.Seconds
	rep.PeakRSSBytes = report.PeakRSS()
	return rep, nil
}

// Calibration of the resource estimate, measured on the generated
// impression log (1M rows, 2 cores; docs/report.md): peak RSS over decoded
// bytes when the table fits one unit (flat and packed); spill bytes over
// decoded bytes (run spills plain LZ4 Arrow IPC; the distributed map
// tasks' lean shuffle is about half that); CPU seconds per decoded GB for a flat run,
// the factors packing, tensors and spilling add, and the share of each
// goroutine that does useful work; the second shuffle pass (partition.Bins)
// measured on 4x and 16x the log at --memory-limit 128MiB. A faster machine runs faster than
// estimated.
const (
	decodedPeakFlat         = 2.4
	decodedPeakPacked       = 2.5
	spillRatio              = 0.4
	coreSecondsPerDecodedGB = 15
	packedWork              = 1.0
	tensorWork              = 1.1
	spillWork               = 1.45
	rebinWork               = 1.15 // the second pass of a two-pass shuffle: 15-16% of the run at 4x and 16x
	parallelEfficiency      = 0.9
	// secondsPerFile is what each output file adds at --parallel 1,
	// whatever its rows (its writers, footer, page index, manifest entry
	// and check): a Hive output of 1,739 folders from 20,000 rows took
	// 8.2-8.5 s, against 0.05 s for the rows. fileSerial is the share of it
	// that more goroutines do not shorten, now that small files are
	// written several at once (pipeline.writePartitions): 1,742 folders
	// took 6.3-6.4 s at --parallel 1 and 4.1 s at 2 (2026-12-06).
	secondsPerFile = 4.5e-3
	fileSerial     = 0.3
)

// queryScan is the exact query counts.
type queryScan struct {
	queries  int64
	perSlice []int64
	dist     manifests.Distribution
}

// sample is the first rows of a few row groups, all columns.
type sample struct {
	recs  []arrow.RecordBatch
	rows  int64
	bytes int64 // decoded
}

func (s *sample) release() {
	for _, r := range s.recs {
		r.Release()
	}
}

// sampleHeads reads the first rows of row groups spread over the table
// (the cheapest first, then first, middle, quarters, ...) until it holds
// maxRows rows or the next row group would take its reads past budget bytes. Page-streaming reads cost
// about the row group's dictionary pages plus the pages the rows lie in.
func sampleHeads(ctx context.Context, tbl *source.Table, maxRows, budget int64) (*sample, error) {
	refs := tbl.RowGroups()
	s := &sample{}
	var spent int64
	order := spreadOrder(len(refs))
	// Start with the row group that gives the sample's rows cheapest (a
	// head read costs about the row group's dictionary pages plus the pages
	// read, whatever the rows), among those holding at least half of the
	// rows asked for (or half the largest row group).
	var largest int64
	for _, r := range refs {
		largest = max(largest, r.Rows())
	}
	need := min(maxRows, largest) / 2
	first, best := -1, 0.0
	for k, i := range order {
		r := refs[i]
		if r.Rows() == 0 || r.Rows() < need {
			continue
		}
		if c := float64(plan.RowGroupBytes(r)) / float64(min(r.Rows(), maxRows)); first < 0 || c < best {
			first, best = k, c
		}
	}
	if first > 0 {
		order = append(append([]int{order[first]}, order[:first]...), order[first+1:]...)
	}
	for _, i := range order {
		if s.rows >= maxRows {
			break
		}
		ref := refs[i]
		if ref.Rows() == 0 {
			continue
		}
		cost := plan.RowGroupBytes(ref)
		if s.rows > 0 && spent+cost > budget {
			break
		}
		before := tbl.Counts.Bytes.Load()
		rec, err := tbl.Head(ctx, ref, maxRows-s.rows)
		if err != nil {
			s.release()
			return nil, err
		}
		spent += tbl.Counts.Bytes.Load() - before
		s.recs = append(s.recs, rec)
		s.rows += rec.NumRows()
		s.bytes += partition.RecordBytes(rec)
	}
	return s, nil
}

// spreadOrder lists 0..n-1 so that every prefix is spread over the range:
// the bit-reversal permutation.
func spreadOrder(n int) []int {
	if n == 0 {
		return nil
	}
	b := bits.Len(uint(n - 1))
	out := make([]int, 0, n)
	for i := 0; i < 1<<b; i++ {
		r := int(bits.Reverse(uint(i)) >> (bits.UintSize - b))
		if b == 0 {
			r = 0
		}
		if r < n {
			out = append(out, r)
		}
	}
	return out
}

var dryRunSeq atomic.Int64

// runSample runs the real pipeline on the sample, in memory.
func runSample(ctx context.Context, schema *arrow.Schema, smp *sample, opts RunOptions, in plan.Sizes) (*report.SampleEstimate, error) {
	bucket := fmt.Sprintf("relayout-dry-run-%d-%d", os.Getpid(), dryRunSeq.Add(1))
	defer storage.DropMemBucket(bucket)
	root := "mem://" + bucket
	inLoc, err := storage.OpenDir(ctx, root+"/in", false)
	if err != nil {
		return nil, err
	}
	recs := smp.recs
	if cols := opts.hiveColumns(); len(cols) > 0 {
		kept, err := someFolders(ctx, smp.recs, schema, cols, sampleFolders)
		if err != nil {
			return nil, fmt.Errorf("dry run: sample: %w", err)
		}
		if kept != nil {
			defer func() {
				for _, r := range kept {
					r.Release()
				}
			}()
			recs = kept
		}
	}
	var buf bytes.Buffer
	w, err := pqarrow.NewFileWriter(schema, &buf,
		// Plain, uncompressed, no statistics: the cheapest file to write
		// and read back; only its values matter.
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Uncompressed), parquet.WithStats(false),
			parquet.WithDictionaryDefault(false), parquet.WithMaxRowGroupLength(max(smp.rows, 1))),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return nil, writer.Unwritable(schema, err)
	}
	for _, r := range recs {
		if err := w.WriteBuffered(r); err != nil {
			return nil, fmt.Errorf("dry run: sample: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("dry run: sample: %w", err)
	}
	if err := putObject(ctx, inLoc, "sample.parquet", buf.Bytes()); err != nil {
		return nil, err
	}
	sub := opts
	sub.Inputs, sub.Output = []string{root + "/in/sample.parquet"}, root+"/out"
	sub.Check, sub.Overwrite, sub.Log, sub.Progress = CheckNone, true, nil, nil
	sub.HivePartitioning, sub.HiveTypes = string(hive.Off), "" // the sample holds the partition columns
	sub.ForceFolders = true                                    // the dry run warns instead
	sub.FailAfterFiles, sub.UnitRows, sub.ReportSlices, sub.sample, sub.sampleOf = 0, 0, 0, true, &in
	// One row group: its dictionary pages tell which columns keep a
	// dictionary of about the same size whatever a row group's rows (few
	// distinct values: a cost per row group) from those whose dictionary
	// grows with the rows (a cost per row).
	sub.RowGroupBytes, sub.MinRowGroupBytes, sub.RowGroupRows, sub.FileBytes, sub.BoundaryKeys = 1<<50, 1<<50, 1<<40, 1<<50, -1
	res, err := Run(ctx, sub)
	if err != nil {
		return nil, err
	}
	m := res.Manifest
	est := &report.SampleEstimate{Rows: m.Fingerprint.Rows, Queries: m.Totals.Rows, MultiRowQueries: -1}
	outLoc, err := storage.OpenDir(ctx, root+"/out", false)
	if err != nil {
		return nil, err
	}
	var objs []storage.Object
	for _, f := range m.Files {
		objs = append(objs, storage.Object{Loc: outLoc, Key: outLoc.Key(f.Path), URL: outLoc.URL(f.Path), Size: f.Bytes})
	}
	var rgs int
	var overhead float64
	var rgRows []float64    // the sample's row groups' rows (output rows: queries when packed)
	var rgBytes [][]float64 // per leaf, each row group's compressed bytes
	if len(objs) > 0 {
		otbl, err := source.Open(ctx, objs, nil)
		if err != nil {
			return nil, err
		}
		defer otbl.Close()
		for _, f := range otbl.Files {
			md, err := f.Metadata()
			if err != nil {
				return nil, err
			}
			var data int64
			for g := 0; g < md.NumRowGroups(); g++ {
				rg := md.RowGroup(g)
				if est.Leaves == nil {
					est.Leaves = make([]report.LeafEst, rg.NumColumns())
					rgBytes = make([][]float64, rg.NumColumns())
				}
				rgRows = append(rgRows, float64(rg.NumRows()))
				for c := 0; c < rg.NumColumns() && c < len(est.Leaves); c++ {
					cc, err := rg.ColumnChunk(c)
					if err != nil {
						continue
					}
					data += cc.TotalCompressedSize()
					rgBytes[c] = append(rgBytes[c], float64(cc.TotalCompressedSize()))
					path := cc.PathInSchema()
					l := &est.Leaves[c]
					l.Comp += float64(cc.TotalCompressedSize())
					l.Uncomp += float64(cc.TotalUncompressedSize())
					l.Values += cc.NumValues()
					if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DataPageOffset() > cc.DictionaryPageOffset() {
						l.Dict += float64(cc.DataPageOffset() - cc.DictionaryPageOffset())
						_ = f.WithParquet(func(pq *file.Reader) error {
							if pr, err := pq.RowGroup(g).GetColumnPageReader(c); err == nil {
								if dp, err := pr.GetDictionaryPage(); err == nil && dp != nil {
									l.DictValues += int64(dp.NumValues())
								}
								pr.Close()
							}
							return nil
						})
					}
					l.Query = m.Packing != nil && path[0] != "items"
					l.Key = len(path) == 1 && slices.Contains(opts.SliceKeys, path[0])
				}
			}
			base := float64(md.Size())
			if sub, err := md.Subset([]int{}); err == nil {
				if ser, err := sub.Serialize(ctx); err == nil {
					base = float64(len(ser))
				}
			}
			est.FooterBase = base
			if n := md.NumRowGroups(); n > 0 {
				est.FooterPerRG = (float64(md.Size()) - base) / float64(n)
			}
			rgs += md.NumRowGroups()
			overhead += float64(f.Obj.Size-data) - 12 - base
		}
	}
	est.RowGroups = rgs
	if rgs > 0 {
		est.PerRGOverhead = overhead / float64(rgs)
	}
	for i := range est.Leaves {
		l := &est.Leaves[i]
		if rgs == 1 && l.Dict > 0 && l.DictValues*10 < l.Values {
			l.Fixed = l.Dict
		}
		if rgs >= minFitRowGroups && i < len(rgBytes) && len(rgBytes[i]) == len(rgRows) && !l.Query {
			// A sample of many small row groups (a Hive output's folders,
			// a few sample rows each, where the run writes many): what
			// every row group pays whatever its rows (page and dictionary
			// headers, small dictionaries) must not be scaled by rows.
			// The 1,200-folder output of the 1M-row log was estimated at
			// 143 MiB where 66 MiB were written.
			if a, _, ok := fitLine(rgRows, rgBytes[i]); ok {
				l.Fixed = a
			}
		}
	}
	if p := m.Packing; p != nil {
		est.QueryColumns, est.ItemColumns, est.Moved = nonNil(p.QueryColumns), nonNil(p.ItemColumns), nonNil(p.MovedToItems)
		est.MultiRowQueries = multiRowQueries(smp, schema, opts.QueryKey)
	} else {
		est.Queries = est.Rows
	}
	if mt := m.Tensors; mt != nil {
		est.TensorSchema = mt.Schema
		est.Tensors = make([]float64, len(mt.Schema))
		idx := map[string]int{}
		for i, t := range mt.Schema {
			idx[t.Name] = i
		}
		var hdr float64
		for _, s := range mt.Shards {
			obj := storage.Object{Loc: outLoc, Key: outLoc.Key(s.Path), URL: outLoc.URL(s.Path), Size: s.Bytes}
			ra, err := storage.NewReaderAt(ctx, obj, nil)
			if err != nil {
				return nil, err
			}
			h, err := loader.ReadHeader(ra, s.Bytes)
			ra.Close()
			if err != nil {
				return nil, fmt.Errorf("dry run: sample shard: %w", err)
			}
			var data int64
			for _, t := range h.Tensors {
				n := t.End - t.Begin
				data += n
				if i, ok := idx[t.Name]; ok {
					est.Tensors[i] += float64(n)
				}
			}
			hdr += float64(s.Bytes - data)
		}
		if len(mt.Shards) > 0 {
			est.ShardHeader = hdr / float64(len(mt.Shards))
		}
	}
	return est, nil
}

// minFitRowGroups is the fewest sample row groups whose bytes are fitted
// against their rows (fitLine).
const minFitRowGroups = 8

// fitLine fits y = a + b·x by least squares and returns a and b, both at
// least 0 (b refitted through the origin when a would be negative); ok is
// false when the x do not vary.
func fitLine(x, y []float64) (a, b float64, ok bool) {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if len(x) < 2 || d <= 0 {
		return 0, 0, false
	}
	b = (n*sxy - sx*sy) / d
	a = (sy - b*sx) / n
	if a < 0 || b < 0 {
		if sxx == 0 {
			return 0, 0, false
		}
		a, b = 0, max(sxy/sxx, 0)
	}
	return a, b, true
}

// sampleFolders is the most Hive folders a dry run's sample run writes. A
// table sliced by a key of about one row each (item_id) made a folder, and
// a file, per sample row: 16,000 files, 73 s of a 100,000-row table's dry
// run, and a 6,000-row test's 20 s (many minutes under the race detector).
const sampleFolders = 256

// someFolders returns the sample's rows of max of its Hive folders (the
// distinct values of cols), chosen by their keys' hash, whole: the costs
// the sample run measures per row, file and row group are then those of
// whole folders. nil when the sample has no more folders than that.
func someFolders(ctx context.Context, recs []arrow.RecordBatch, schema *arrow.Schema, cols []string, max int) ([]arrow.RecordBatch, error) {
	idx := make([]int, len(cols))
	for i, c := range cols {
		f := schema.FieldIndices(c)
		if len(f) == 0 {
			return nil, nil
		}
		idx[i] = f[0]
	}
	hashes := make([][]uint64, len(recs))
	distinct := map[uint64]bool{}
	var key []byte
	for r, rec := range recs {
		hs := make([]uint64, rec.NumRows())
		for i := range hs {
			key = key[:0]
			for _, c := range idx {
				key = partition.AppendKey(key, rec.Column(c), i)
			}
			hs[i] = xxhash.Sum64(key)
			distinct[hs[i]] = true
		}
		hashes[r] = hs
	}
	if len(distinct) <= max {
		return nil, nil
	}
	all := slices.Sorted(maps.Keys(distinct))
	last := all[max-1] // the max smallest hashes' folders
	out := make([]arrow.RecordBatch, 0, len(recs))
	for r, rec := range recs {
		b := array.NewBooleanBuilder(memory.DefaultAllocator)
		for _, h := range hashes[r] {
			b.Append(h <= last)
		}
		mask := b.NewBooleanArray()
		b.Release()
		f, err := compute.FilterRecordBatch(ctx, rec, mask, compute.DefaultFilterOptions())
		mask.Release()
		if err != nil {
			for _, o := range out {
				o.Release()
			}
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// multiRowQueries counts the sample's queries with two or more rows: the
// evidence the query-level decision rests on.
func multiRowQueries(smp *sample, schema *arrow.Schema, queryKey []string) int {
	var cols []int
	for _, k := range queryKey {
		if idx := schema.FieldIndices(k); len(idx) > 0 {
			cols = append(cols, idx[0])
		}
	}
	seen := map[uint64]int{}
	var qk []byte
	for _, rec := range smp.recs {
		for r := 0; r < int(rec.NumRows()); r++ {
			qk = qk[:0]
			for _, c := range cols {
				qk = partition.AppendKey(qk, rec.Column(c), r)
			}
			seen[xxhash.Sum64(qk)]++
		}
	}
	n := 0
	for _, c := range seen {
		if c >= 2 {
			n++
		}
	}
	return n
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
