package verify

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
	"github.com/relayout/relayout/writer"
)

var rederiveSeq atomic.Int64

// rederiveShards is verify --deep's tensor check: it converts the Parquet
// files' rows again, file by file, with the tensor spec recorded in the
// manifest's config, and requires every shard it makes to equal the stored
// one (path, size, xxhash64). Shards that are not the conversion of the
// Parquet rows beside them (another run's, or altered consistently with
// their manifest entry) fail. The conversion is the writer's own code, so
// this checks that the two outputs agree, not the conversion itself (the
// loader tests compare shards with Parquet through NumPy). It returns ""
// and skipped when the output was written by another relayout version,
// whose conversion may differ.
func rederiveShards(ctx context.Context, out storage.Location, m *manifests.Manifest, parallel int) (problem string, skipped bool, err error) {
	if m.RelayoutVersion != version.Version {
		return "", true, nil
	}
	cfg, err := plan.DecodeConfig(m.Config)
	if err != nil || cfg.Tensors == nil {
		return "manifest: config has no tensor spec to re-derive the shards from", false, nil
	}
	if len(m.Files) == 0 {
		return "", false, nil
	}
	tbl, err := source.OpenOutput(ctx, out, m, nil, nil)
	if err != nil {
		return fmt.Sprintf("%v", err), false, nil
	}
	defer tbl.Close()
	packed := m.Packing != nil
	var lay *dedupe.Layout
	if packed {
		if lay, err = dedupe.LayoutFromPacked(tbl.Schema, m.Packing.FlatColumns, m.Packing.QueryKey); err != nil {
			return fmt.Sprintf("manifest: packing: %v", err), false, nil
		}
	}
	// The profile (list lengths) of the flat rows, as the run saw them.
	prof := tensors.NewProfile()
	for _, ref := range tbl.RowGroups() {
		rec, err := tbl.Read(ctx, ref, nil, parallel)
		if err != nil {
			return "", false, err
		}
		flat := rec
		if packed {
			if flat, err = dedupe.Unpack(ctx, lay, rec); err != nil {
				rec.Release()
				return fmt.Sprintf("%s: unpack: %v", ref.File.Obj.URL, err), false, nil
			}
			rec.Release()
		}
		prof.Observe(flat)
		flat.Release()
	}
	tp, err := tensors.NewPlan(tbl.Schema, packed, cfg.Tensors.Spec, prof)
	if err != nil {
		return fmt.Sprintf("tensors: the recorded spec does not apply to the Parquet files: %v", err), false, nil
	}
	if tp.Hash() != m.Tensors.SpecHash {
		return fmt.Sprintf("tensors: the Parquet files give spec hash %s, the manifest says %s", tp.Hash(), m.Tensors.SpecHash), false, nil
	}
	// Shards are made in a process-local bucket and dropped once compared.
	bucket := fmt.Sprintf("relayout-verify-%d-%d", os.Getpid(), rederiveSeq.Add(1))
	defer storage.DropMemBucket(bucket)
	mem, err := storage.OpenDir(ctx, "mem://"+bucket, true)
	if err != nil {
		return "", false, err
	}
	next := 0 // the next manifest shard
	var item int64
	compare := func(made []writer.Shard) string {
		for _, s := range made {
			if next >= len(m.Tensors.Shards) {
				return fmt.Sprintf("%s: the Parquet files convert to more shards than the manifest lists (%d)", out.URL(s.Path), len(m.Tensors.Shards))
			}
			want := m.Tensors.Shards[next]
			if got := s.XXHash64; s.Path != want.Path || s.Bytes != want.Bytes || got != want.XXHash64 {
				return fmt.Sprintf("%s: is not the conversion of the Parquet rows it indexes (re-derived %s: %d bytes, xxhash64 %s; stored %d bytes, %s)",
					out.URL(want.Path), s.Path, s.Bytes, got, want.Bytes, want.XXHash64)
			}
			if want.HeaderXXHash64 != "" && (s.HeaderBytes != want.HeaderBytes || s.HeaderXXHash64 != want.HeaderXXHash64) {
				return fmt.Sprintf("%s: the manifest's header entry (%d bytes, xxhash64 %s) is not the shard's (%d bytes, %s)",
					out.URL(want.Path), want.HeaderBytes, want.HeaderXXHash64, s.HeaderBytes, s.HeaderXXHash64)
			}
			_ = mem.Bucket.Delete(ctx, mem.Key(s.Path))
			next++
		}
		return ""
	}
	// Outputs written before block tables have none in their headers.
	var blockSamples int64
	if len(m.Tensors.Shards) > 0 && m.Tensors.Shards[0].HeaderXXHash64 != "" {
		blockSamples = cfg.Tensors.BlockSamples
	}
	for fi, f := range m.Files {
		sink := writer.NewTensors(ctx, mem, tp, writer.TensorOptions{
			ShardBytes: cfg.Tensors.ShardBytes, BlockSamples: blockSamples, ShardBlocks: cfg.Tensors.ShardBlocks,
			Metadata:  map[string]string{"relayout_version": m.RelayoutVersion, "config_hash": m.ConfigHash},
			FirstFile: fi, FirstRow: f.FirstRow, FirstItem: item,
		})
		seen := 0
		for _, ref := range tbl.RowGroups() {
			if ref.File.Index != fi {
				continue
			}
			rec, err := tbl.Read(ctx, ref, nil, parallel)
			if err != nil {
				return "", false, err
			}
			err = sink.Write(rec)
			rec.Release()
			if err != nil {
				return fmt.Sprintf("%s: tensors: %v", out.URL(f.Path), err), false, nil
			}
			if p := compare(sink.Shards()[seen:]); p != "" {
				return p, false, nil
			}
			seen = len(sink.Shards())
		}
		made, err := sink.Finish()
		if err != nil {
			return "", false, err
		}
		if p := compare(made.Shards[seen:]); p != "" {
			return p, false, nil
		}
		for _, s := range made.Shards {
			item += s.Items
		}
	}
	if next != len(m.Tensors.Shards) {
		return fmt.Sprintf("tensors: the Parquet files convert to %d shards, the manifest lists %d", next, len(m.Tensors.Shards)), false, nil
	}
	return "", false, nil
}
