package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"gocloud.dev/blob"

	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/writer"
)

// runtimeReserve is the memory budgeted for the Go runtime and the
// binary's resident text, outside the data.
const runtimeReserve = 48 << 20

// Result is what a successful run produced.
type Result struct {
	Manifest *manifests.Manifest
	Report   *Report
}

// layoutConfig is the part of the configuration that decides the output; it
// is recorded in the manifest and hashed.
type layoutConfig struct {
	SliceKeys        []string      `json:"slice_keys"`
	SortKeys         []string      `json:"sort_keys"`
	RowGroupBytes    int64         `json:"row_group_bytes"`
	MinRowGroupBytes int64         `json:"min_row_group_bytes"`
	RowGroupRows     int64         `json:"row_group_rows"`
	FileBytes        int64         `json:"file_bytes"`
	BoundaryKeys     int           `json:"boundary_keys"`
	QueryKey         []string      `json:"query_key,omitempty"`
	QueryColumns     []string      `json:"query_columns,omitempty"`
	ItemOrder        []string      `json:"item_order,omitempty"`
	OnQueryConflict  string        `json:"on_query_conflict,omitempty"`
	ZstdLevel        int           `json:"zstd_level"`
	PageBytes        int64         `json:"page_bytes"`
	Tensors          *tensorConfig `json:"tensors,omitempty"`
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Run re-lays the input table out under the output location.
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
	rep := newReport("run", opts)
	log := opts.Log
	t0 := time.Now()

	out, err := storage.OpenDir(ctx, opts.Output, true)
	if err != nil {
		return nil, err
	}
	if err := prepareOutput(ctx, out, opts.Overwrite); err != nil {
		return nil, err
	}

	tr, err := newTensorRun(opts)
	if err != nil {
		return nil, err
	}
	tbl, keys, in, counts, err := openTable(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	if s := opts.sampleOf; s != nil {
		in.rowBytes, in.fileRowBytes = s.rowBytes, s.fileRowBytes
	}
	sliceCols, sortCols, qkCols := keys.slice, keys.sort, keys.query
	inBytes := in.bytes
	rep.Input = ReportInput{Files: len(tbl.Files), Bytes: inBytes, Rows: tbl.Rows, RowGroups: tbl.NumRowGroups()}
	log.Info("inputs opened", "files", len(tbl.Files), "rows", tbl.Rows, "bytes", inBytes)

	// A soft memory limit plus a low GC target: decoded columns are large
	// and short-lived, and collecting early keeps peak RSS near the live data
	// (measured: GOGC 30 was both faster and 40% smaller than 100 here).
	// Go's limit covers the heap and runtime, not the binary's resident
	// text, so leave room for it: the limit applies to the whole process.
	if !opts.sample {
		prevLimit := debug.SetMemoryLimit(max(opts.MemoryLimit-runtimeReserve-unitHeadroom, opts.MemoryLimit/2))
		defer debug.SetMemoryLimit(prevLimit)
		if os.Getenv("GOGC") == "" {
			defer debug.SetGCPercent(debug.SetGCPercent(30))
		}
	}

	// 1. Plan.
	opts.Progress.Start("plan", int64(tbl.NumRowGroups()))
	hist, ex, err := partition.BuildWith(ctx, tbl, sliceCols, partition.BuildOptions{Vectors: len(sliceCols) > 0}, opts.Parallel)
	opts.Progress.Finish()
	if err != nil {
		return nil, err
	}
	// What reading each slice costs on the input, for the report; the
	// per-row-group vectors are dropped here, before the rows are read.
	before, err := costsBefore(tbl, opts.SliceKeys, hist, ex.Vectors)
	if err != nil {
		return nil, err
	}
	ex = nil
	rep.stage("plan", t0)
	layout := planLayout(hist, in, opts)
	// The sample from which column encodings are chosen.
	sample, err := readSample(ctx, tbl)
	if err != nil {
		return nil, err
	}
	// Decoded Arrow data is larger than Parquet's uncompressed size when
	// columns are dictionary-encoded; budget with the sample's real size.
	memRowBytes := in.rowBytes
	if sample != nil && sample.NumRows() > 0 {
		memRowBytes = float64(recordBytes(sample)) / float64(sample.NumRows())
	}
	mp, err := planMemory(tbl, in, layout, memRowBytes, tr != nil, opts)
	if err != nil {
		if sample != nil {
			sample.Release()
		}
		return nil, err
	}
	if qkCols != nil && len(splitBySlice(hist, layout)) > 0 {
		// Packed files start at query boundaries; where a file cut falls
		// inside a slice, chunks are cut at the query boundary too, so the
		// packer sees the records a distributed reduce sees.
		pc, err := computePackCuts(ctx, tbl, hist, layout, sliceCols, qkCols, opts.Parallel)
		if err != nil {
			if sample != nil {
				sample.Release()
			}
			return nil, err
		}
		mp.units = partition.GroupUnits(cutChunks(partition.Chunks(layout, mp.chunkRows), pc.starts), mp.unitRows)
	}
	maxUnitRows, units := mp.unitRows, mp.units
	rep.Units = len(units)
	log.Info("planned", "slices", len(hist.Slices), "files", len(layout.Files), "row_group_rows", layout.TargetRows, "units", len(units), "unit_rows", maxUnitRows, "chunk_rows", mp.chunkRows, "row_bytes", int(in.rowBytes), "decoded_row_bytes", int(mp.memRowBytes), "fixed_mib", mp.fixed>>20)

	cfgJSON, cfgHash := configOf(opts, tr)
	rep.ConfigHash = cfgHash

	var w *writer.Parquet
	defer func() {
		if sample != nil {
			sample.Release()
		}
	}()
	// openWriter creates the sink: flat runs write the table's schema cut
	// as planned; packed runs write the packed schema, cut by packRun.
	openWriter := func(schema *arrow.Schema, lay partition.Layout, sorting []string) error {
		var err error
		w, err = writer.NewParquet(ctx, out, schema, lay, writer.ParquetOptions{
			Sample:    sample,
			Parallel:  opts.Parallel,
			ZstdLevel: opts.ZstdLevel, PageBytes: opts.PageBytes,
			SortingColumns: sorting,
			Metadata: [][2]string{
				{"relayout.version", version.Version},
				{"relayout.config_hash", cfgHash},
			},
			CreatedBy: "relayout version " + version.Version,
		})
		return err
	}
	var pk *packRun
	if qkCols != nil {
		pk = newPackRun(tbl, qkCols, sliceCols, hist, layout)
		if opts.MaxItemsPerQuery > 0 {
			pk.maxItems = opts.MaxItemsPerQuery
		} else {
			pk.maxItems = maxUnitRows
		}
	} else if err := openWriter(tbl.Schema, layout, append(append([]string{}, opts.SliceKeys...), opts.SortKeys...)); err != nil {
		return nil, err
	}
	openPacked := func() error {
		if err := pk.decide(tbl, opts, sliceCols); err != nil {
			return err
		}
		pk.packer.MaxItems = pk.maxItems
		if err := tr.open(ctx, out, pk.layout.Packed, true, opts, cfgHash); err != nil {
			return err
		}
		pk.onPacked, pk.onFileEnd = tr.write, tr.endFile
		return openWriter(pk.layout.Packed, partition.Layout{}, append(append([]string{}, opts.SliceKeys...), opts.QueryKey...))
	}
	committed := false
	defer func() {
		if !committed && w != nil {
			w.Abort()
			writer.Remove(ctx, out, w.Files())
		}
		if !committed {
			tr.remove(ctx, out)
		}
	}()

	// 2-3. Gather and write.
	t1 := time.Now()
	written := 0
	var outFP fingerprint.Sum // of the rows handed to the encoder
	fpOut := &outFP
	if opts.Check == CheckFull {
		fpOut = nil // the full check fingerprints the written files instead
	}
	// Tensor shards end with each Parquet file (chunks never span two).
	fileEnds := map[int64]bool{}
	for _, f := range layout.Files {
		fileEnds[f.Start+f.Rows] = true
	}
	var pos int64
	write := func(rec arrow.RecordBatch) error {
		if pk != nil {
			if err := pk.write(ctx, w, hist, rec); err != nil {
				return err
			}
		} else {
			if err := w.Write(rec); err != nil {
				return err
			}
			if err := tr.write(rec); err != nil {
				return err
			}
			if pos += rec.NumRows(); fileEnds[pos] {
				if err := tr.endFile(); err != nil {
					return err
				}
			}
		}
		opts.Progress.Add(rec.NumRows())
		if opts.FailAfterFiles > 0 && len(w.Files()) >= opts.FailAfterFiles && len(w.Files()) > written {
			return errs.TransientErr(fmt.Errorf("injected failure after %d files", len(w.Files())))
		}
		written = len(w.Files())
		return nil
	}
	workers := max(opts.Parallel-1, 1)
	var inFP fingerprint.Sum
	sortUnit := func(recs []arrow.RecordBatch, un partition.Unit) (*unitSource, error) {
		ord, err := partition.Sort(hist, recs, sliceCols, sortCols)
		if err == nil && int64(len(ord)) != un.Rows {
			err = fmt.Errorf("internal: unit at row %d holds %d rows, the plan says %d", un.Start, len(ord), un.Rows)
		}
		if err != nil {
			for _, r := range recs {
				r.Release()
			}
			return nil, err
		}
		src, err := newUnitSource(tbl.Schema, recs)
		if err != nil {
			return nil, err
		}
		src.ord = ord
		return src, nil // recs are now owned by src
	}
	if len(units) == 1 {
		opts.Progress.Start("read", tbl.Rows)
		recs, fp, err := readAll(ctx, tbl, opts.Parallel, opts.Progress, tr.observe)
		opts.Progress.Finish()
		if err != nil {
			return nil, err
		}
		inFP = fp
		rep.stage("read", t1)
		t1 = time.Now()
		src, err := sortUnit(recs, units[0])
		if err != nil {
			return nil, err
		}
		if pk == nil {
			if err := tr.open(ctx, out, tbl.Schema, false, opts, cfgHash); err != nil {
				src.release()
				return nil, err
			}
		}
		if pk != nil {
			if err := pk.detect(src, tbl.Schema); err != nil {
				src.release()
				return nil, err
			}
			if err := openPacked(); err != nil {
				src.release()
				return nil, err
			}
			rep.stage("detect", t1)
			t1 = time.Now()
		}
		opts.Progress.Start("write", tbl.Rows)
		err = writeUnit(ctx, tbl.Schema, src, units[0], workers, fpOut, write)
		opts.Progress.Finish()
		src.release()
		if err != nil {
			return nil, err
		}
	} else {
		dir, err := newSpillDir(opts.TmpDir)
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		rt := newRouter(hist, units)
		if err := rt.rankSplitSlices(ctx, tbl, sliceCols, sortCols); err != nil {
			return nil, err
		}
		opts.Progress.Start("spill", tbl.Rows)
		paths, fp, spilled, err := spill(ctx, tbl, rt, sliceCols, dir, opts.Parallel, opts.Progress, tr.observe)
		opts.Progress.Finish()
		if err != nil {
			return nil, err
		}
		inFP = fp
		rep.SpillBytes = spilled
		rep.stage("spill", t1)
		t1 = time.Now()
		if pk == nil {
			if err := tr.open(ctx, out, tbl.Schema, false, opts, cfgHash); err != nil {
				return nil, err
			}
		}
		if pk != nil {
			// Query-level columns are decided over all rows: a pass over
			// the sorted units before anything is written.
			for u, un := range units {
				recs, err := loadUnit(paths[u], tbl.Schema)
				if err != nil {
					return nil, err
				}
				src, err := sortUnit(recs, un)
				if err != nil {
					return nil, err
				}
				err = pk.detect(src, tbl.Schema)
				src.release()
				if err != nil {
					return nil, err
				}
			}
			if err := openPacked(); err != nil {
				return nil, err
			}
			rep.stage("detect", t1)
			t1 = time.Now()
		}
		opts.Progress.Start("write", tbl.Rows)
		for u, un := range units {
			recs, err := loadUnit(paths[u], tbl.Schema)
			if err != nil {
				return nil, err
			}
			if paths[u] != "" {
				os.Remove(paths[u])
			}
			src, err := sortUnit(recs, un)
			if err != nil {
				return nil, err
			}
			err = writeUnit(ctx, tbl.Schema, src, un, workers, fpOut, write)
			src.release()
			if err != nil {
				return nil, err
			}
		}
		opts.Progress.Finish()
	}
	if pk != nil {
		if err := pk.finish(ctx, w, hist); err != nil {
			return nil, err
		}
	}
	files, err := w.Close()
	if err != nil {
		return nil, err
	}
	shards, err := tr.close()
	if err != nil {
		return nil, err
	}
	rep.stage("write", t1)
	if inFP.Rows != tbl.Rows {
		return nil, fmt.Errorf("internal: read %d rows, footers say %d", inFP.Rows, tbl.Rows)
	}

	var m *manifests.Manifest
	if pk != nil {
		m = pk.buildManifest(tbl, hist, files, cfgJSON, cfgHash, opts, inFP, inBytes)
		if m.Packing.Items != tbl.Rows {
			return nil, fmt.Errorf("internal: packed %d items, the input has %d rows", m.Packing.Items, tbl.Rows)
		}
	} else {
		m = buildManifest(tbl, tbl.Schema, hist.Slices, files, cfgJSON, cfgHash, opts, inFP)
	}

	if tr != nil {
		m.Tensors = tr.manifest(m, shards, opts)
		want := m.Totals.Rows
		if m.Tensors.Totals.Rows != want || (m.Packing != nil && m.Tensors.Totals.Items != m.Packing.Items) {
			return nil, fmt.Errorf("internal: shards hold %d samples and %d items, the Parquet files %d", m.Tensors.Totals.Rows, m.Tensors.Totals.Items, want)
		}
	}

	// 4. Check what was written against the manifest and the input.
	if opts.Check != CheckFull && (outFP.Rows != inFP.Rows || outFP.Hash != inFP.Hash) {
		return nil, fmt.Errorf("internal: the rows written (fingerprint %s, %d rows) differ from the input (%s, %d rows); nothing committed", outFP, outFP.Rows, inFP, inFP.Rows)
	}
	if opts.Check != CheckNone {
		t2 := time.Now()
		opts.Progress.Start("check", m.Totals.Rows)
		vr, err := verifyLocation(ctx, out, m, opts.Check == CheckFull, opts.Parallel, opts.Progress)
		opts.Progress.Finish()
		if err != nil {
			return nil, err
		}
		if !vr.OK {
			return nil, fmt.Errorf("output check failed, nothing committed: %s", vr.Problem)
		}
		rep.stage("check", t2)
	}

	// 5. Commit.
	if err := commitManifest(ctx, out, m); err != nil {
		return nil, err
	}
	committed = true
	if opts.sample {
		rep.finish(t0, m)
		return &Result{Manifest: m, Report: rep}, nil
	}
	var queries []int64
	maxItems := int64(0)
	if pk != nil {
		queries, maxItems = pk.queries, pk.maxItems
	}
	rep.Cost.BytesRead, rep.Cost.Requests = counts.Bytes.Load(), counts.Requests.Load()
	t3 := time.Now()
	if err := fillRunReport(ctx, rep, tbl, out, m, hist, before, queries, shards, layout, maxItems, opts); err != nil {
		log.Warn("could not complete the report", "err", err)
	}
	rep.stage("report", t3)
	rep.finish(t0, m)
	if rdata, err := json.MarshalIndent(rep, "", " "); err == nil {
		if err := putObject(ctx, out, ReportFileName, append(rdata, '\n')); err != nil {
			log.Warn("could not write report", "err", err)
		}
	}
	log.Info("committed", "manifest", out.URL(manifests.FileName), "files", len(files), "rows", m.Totals.Rows, "bytes", m.Totals.Bytes)
	return &Result{Manifest: m, Report: rep}, nil
}

// prepareOutput refuses to replace an existing output unless overwrite is
// set; then it removes the old manifest first (so no reader trusts it while
// files change). Whatever is under parquet/ without a manifest is debris of
// a failed or killed run, never committed data, so it is removed too, with
// the old report and, in local outputs, writers' stray *.tmp files.
func prepareOutput(ctx context.Context, out storage.Location, overwrite bool) error {
	key := out.Key(manifests.FileName)
	exists, err := checkOutput(ctx, out, overwrite)
	if err != nil {
		return err
	}
	if exists {
		if err := out.Bucket.Delete(ctx, key); err != nil {
			return storage.Classify(fmt.Errorf("remove old %s: %w", out.URL(manifests.FileName), err))
		}
	}
	if out.Local != "" {
		tmps, _ := filepath.Glob(filepath.Join(out.Local, "parquet", "*.tmp"))
		shardTmps, _ := filepath.Glob(filepath.Join(out.Local, "tensors", "*.tmp"))
		for _, p := range append(tmps, shardTmps...) {
			os.Remove(p)
		}
	}
	for _, prefix := range []string{"parquet/", "tensors/"} {
		if err := removePrefix(ctx, out, prefix); err != nil {
			return err
		}
	}
	_ = out.Bucket.Delete(ctx, out.Key(ReportFileName))
	return nil
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

// commitManifest writes manifest.json: the last write of a run and its only
// commit point.
func commitManifest(ctx context.Context, out storage.Location, m *manifests.Manifest) error {
	data, err := manifests.Marshal(m)
	if err != nil {
		return err
	}
	return putObject(ctx, out, manifests.FileName, data)
}

func putObject(ctx context.Context, out storage.Location, rel string, data []byte) error {
	if err := out.Bucket.WriteAll(ctx, out.Key(rel), data, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return storage.Classify(fmt.Errorf("write %s: %w", out.URL(rel), err))
	}
	return nil
}

func buildManifest(tbl *source.Table, schema *arrow.Schema, slices []partition.Slice, files []writer.FileInfo, cfg []byte, cfgHash string, opts RunOptions, fp fingerprint.Sum) *manifests.Manifest {
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
	type rgRef struct {
		file, rg     int
		start, rows  int64 // global
		first        int64 // within file
		offset, size int64
	}
	var rgs []rgRef
	for i, f := range files {
		mf := manifests.File{Path: f.Path, Bytes: f.Bytes, Rows: f.Rows, FirstRow: f.Start, XXHash64: fmt.Sprintf("%016x", f.XXHash64), RowGroups: []manifests.RowGroup{}}
		for j, g := range f.RowGroups {
			mf.RowGroups = append(mf.RowGroups, manifests.RowGroup{Rows: g.Rows, FirstRow: g.FirstRow, Offset: g.Offset, Length: g.Length})
			rgs = append(rgs, rgRef{file: i, rg: j, start: f.Start + g.FirstRow, rows: g.Rows, first: g.FirstRow, offset: g.Offset, size: g.Length})
		}
		m.Files = append(m.Files, mf)
		m.Totals.Bytes += f.Bytes
		m.Totals.Rows += f.Rows
		m.Totals.RowGroups += len(f.RowGroups)
	}
	m.Totals.Files = len(files)
	k := 0
	for _, s := range slices {
		if s.Rows == 0 {
			continue
		}
		ms := manifests.Slice{Key: manifests.KeyValues{}, Rows: s.Rows, FirstRow: s.Start}
		for i, name := range opts.SliceKeys {
			ms.Key = append(ms.Key, manifests.KV{Name: name, Value: s.Values[i]})
		}
		end := s.Start + s.Rows
		for k < len(rgs) && rgs[k].start+rgs[k].rows <= s.Start {
			k++
		}
		for j := k; j < len(rgs) && rgs[j].start < end; j++ {
			g := rgs[j]
			lo, hi := max(g.start, s.Start), min(g.start+g.rows, end)
			ms.Segments = append(ms.Segments, manifests.Segment{
				File: g.file, RowGroup: g.rg, FirstRow: g.first + (lo - g.start), Rows: hi - lo,
				Offset: g.offset, Length: g.size,
			})
		}
		m.Slices = append(m.Slices, ms)
	}
	if m.Slices == nil {
		m.Slices = []manifests.Slice{}
	}
	if m.Files == nil {
		m.Files = []manifests.File{}
	}
	m.Totals.Slices = len(m.Slices)
	return m
}

// readSample decodes the first non-empty input row group: the sample from
// which column encodings are chosen.
func readSample(ctx context.Context, tbl *source.Table) (arrow.RecordBatch, error) {
	for _, ref := range tbl.RowGroups() {
		if ref.Rows() > 0 {
			return tbl.Read(ctx, ref, nil, 2)
		}
	}
	return nil, nil
}

// recordBytes sums the sizes of a record's buffers (its decoded size).
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		if dict := d.Dictionary(); dict != nil && dict.(*array.Data) != nil {
			n += dataBytes(dict)
		}
	}
	return n
}
