package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
	"github.com/relayout/relayout/writer"
)

// UnpackOptions configures Unpack.
type UnpackOptions struct {
	Input     string // a packed output (with manifest.json)
	Output    string
	Overwrite bool
	Parallel  int
}

// Unpack restores one row per item from a packed output: the original
// columns (names, types, order) with each query's columns repeated on its
// items, in the packed order. Files and row groups mirror the packed ones;
// the output gets its own manifest, whose fingerprint must equal the packed
// manifest's (the fingerprint of the flat rows).
func Unpack(ctx context.Context, o UnpackOptions) (*Result, error) {
	in, err := storage.OpenDir(ctx, o.Input, false)
	if err != nil {
		return nil, err
	}
	data, err := storage.Get(ctx, in, manifests.FileName)
	if err != nil {
		return nil, storage.Classify(fmt.Errorf("read %s: %w (unpack needs a packed relayout output)", in.URL(manifests.FileName), err))
	}
	pm, err := manifests.Decode(data)
	if err != nil {
		return nil, errs.BadInputf("%s: %v", in.URL(manifests.FileName), err)
	}
	if pm.Packing == nil {
		return nil, errs.BadInputf("%s is not packed (it was not written with --query-key)", o.Input)
	}
	out, err := storage.OpenDir(ctx, o.Output, true)
	if err != nil {
		return nil, err
	}
	claim, err := claimOutput(ctx, out, []string{o.Input}, o.Overwrite, true, "unpack", "parquet/")
	if err != nil {
		return nil, err
	}
	defer claim.release(ctx)
	t0 := time.Now()
	rep := report.New("unpack", 0, max(o.Parallel, 1), "")
	tbl, err := source.OpenOutput(ctx, in, pm, nil, nil)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	l, err := dedupe.LayoutFromPacked(tbl.Schema, pm.Packing.FlatColumns, pm.Packing.QueryKey)
	if err != nil {
		return nil, errs.BadInputf("%s: %v", o.Input, err)
	}
	cfg, _ := json.Marshal(map[string]any{"unpack_of": pm.ConfigHash, "slice_keys": nonNil(pm.SliceKeys), "sort_keys": nonNil(pm.Packing.QueryKey)})
	cfgHash := fmt.Sprintf("%016x", xxhash.Sum64(cfg))
	unpackRG := func(ref source.RowGroupRef) (arrow.RecordBatch, error) {
		rec, err := tbl.Read(ctx, ref, nil, max(o.Parallel, 1))
		if err != nil {
			return nil, err
		}
		flat, err := dedupe.Unpack(ctx, l, rec)
		rec.Release()
		if err != nil {
			return nil, errs.Or(errs.BadInput, fmt.Errorf("%s: row group %d: %w", ref.File.Obj.URL, ref.RowGroup, err))
		}
		return flat, nil
	}
	// The first row group's flat rows choose the encodings, as a run's
	// sample does (arrow-go's defaults wrote a dictionary for every column
	// and abandoned it at 1 MiB: 29% larger files on the generated log).
	refs := tbl.RowGroups()
	var first arrow.RecordBatch
	if len(refs) > 0 {
		if first, err = unpackRG(refs[0]); err != nil {
			return nil, err
		}
	}
	defer func() {
		if first != nil {
			first.Release()
		}
	}()
	sample, err := writer.TrimSample(first, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	w, err := writer.NewParquet(ctx, claim.target, l.Flat, nil, writer.ParquetOptions{
		Parallel: o.Parallel, SortingColumns: append(append([]string{}, pm.SliceKeys...), pm.Packing.QueryKey...),
		Metadata:  [][2]string{{"relayout.version", version.Version}, {"relayout.config_hash", cfgHash}},
		CreatedBy: "relayout version " + version.Version,
		Sample:    sample,
	})
	if sample != nil {
		sample.Release()
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if !claim.committed {
			w.Abort()
		}
	}()
	var fp fingerprint.Sum
	for i, ref := range refs {
		var flat arrow.RecordBatch
		if i == 0 {
			flat, first = first, nil
		} else if flat, err = unpackRG(ref); err != nil {
			return nil, err
		}
		s, err := fingerprint.Record(flat)
		if err == nil {
			fp.Add(s)
			err = w.Write(flat)
		}
		flat.Release()
		if err != nil {
			return nil, err
		}
		if err := w.EndRowGroup(); err != nil {
			return nil, err
		}
		if ref.RowGroup == len(ref.File.RowGroupRows)-1 {
			if err := w.EndFile(); err != nil {
				return nil, err
			}
		}
	}
	written, err := w.Finish()
	if err != nil {
		return nil, err
	}
	files := written.Files
	if fp.String() != pm.Fingerprint.Hash || fp.Rows != pm.Fingerprint.Rows {
		return nil, errs.BadInputf("unpacked rows have fingerprint %s over %d rows, the packed manifest says %s over %d: the packed output is damaged", fp, fp.Rows, pm.Fingerprint.Hash, pm.Fingerprint.Rows)
	}
	// Slices in flat rows, from the packed slice index.
	var slices []partition.Slice
	var start int64
	for _, s := range pm.Slices {
		slices = append(slices, partition.Slice{Values: kvValues(s.Key), Rows: s.Items, Start: start})
		start += s.Items
	}
	opts := RunOptions{SliceKeys: pm.SliceKeys, SortKeys: pm.Packing.QueryKey}
	m := buildManifest(tbl, l.Flat, slices, files, cfg, cfgHash, opts, fp)
	if res, err := verify.Manifest(ctx, claim.target, m, false, max(o.Parallel, 1), nopProgress{}); err != nil {
		return nil, err
	} else if !res.OK {
		return nil, fmt.Errorf("unpacked output check failed, nothing committed: %s", res.Problem)
	}
	if err := claim.commit(ctx, m); err != nil {
		return nil, err
	}
	rep.Finish(t0, m)
	return &Result{Manifest: m, Report: rep}, nil
}

func kvValues(k manifests.KeyValues) []any {
	out := make([]any, len(k))
	for i, kv := range k {
		out[i] = kv.Value
	}
	return out
}
