package pipeline

import (
	"context"
	"strings"

	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// openTable lists and opens the inputs (footers only; reads counted) and
// resolves the key columns: the start of run, dry run and plan.
// It records the input's resolved Hive partitioning in opts.
func openTable(ctx context.Context, opts *RunOptions) (*source.Table, plan.Keys, plan.Sizes, *storage.Counters, error) {
	objs := opts.objects
	if objs == nil {
		var err error
		if objs, err = storage.List(ctx, opts.Inputs); err != nil {
			return nil, plan.Keys{}, plan.Sizes{}, nil, err
		}
	}
	counts := new(storage.Counters)
	tbl, err := openObjects(ctx, objs, counts, opts.HivePartitioning, opts.HiveTypes, opts.MemoryLimit)
	if err != nil {
		return nil, plan.Keys{}, plan.Sizes{}, nil, err
	}
	opts.hive = tbl.Partitioning().Spec()
	keys, err := resolveKeys(tbl, *opts)
	if err != nil {
		tbl.Close()
		return nil, plan.Keys{}, plan.Sizes{}, nil, err
	}
	return tbl, keys, plan.SizesOf(tbl), counts, nil
}

// remoteReads is how many column chunks, or key-pass row groups, of a
// table in an object store are read at once beside --parallel
// (source.Table.Readers): up to source.DefaultRemoteReads, as many of its
// largest row group's stored bytes as an eighth of memoryLimit (0: the
// default) holds, since what they decode to is held while they are read.
func remoteReads(tbl *source.Table, memoryLimit int64) int {
	if memoryLimit <= 0 {
		memoryLimit = DefaultMemoryLimit
	}
	n := memoryLimit / 8 / max(tbl.LargestRowGroupBytes(), 1<<20)
	return int(max(min(n, source.DefaultRemoteReads), 1))
}

// openObjects opens the objects as one table with the Hive partition
// columns their paths hold (mode: auto, on, off; types: declared types),
// reading objects in a store as many at once as memoryLimit allows
// (remoteReads).
func openObjects(ctx context.Context, objs []storage.Object, counts *storage.Counters, mode, types string, memoryLimit int64) (*source.Table, error) {
	m, err := hive.ParseMode(mode)
	if err != nil {
		return nil, err
	}
	declared, err := hive.ParseTypes(types)
	if err != nil {
		return nil, err
	}
	rels, urls := make([]string, len(objs)), make([]string, len(objs))
	for i, o := range objs {
		rels[i], urls[i] = o.Rel, o.URL
	}
	p, err := hive.Discover(rels, urls, m, declared)
	if err != nil {
		return nil, err
	}
	tbl, err := source.Open(ctx, objs, counts)
	if err != nil {
		return nil, err
	}
	if err := tbl.AddPartitions(p); err != nil {
		tbl.Close()
		return nil, err
	}
	tbl.RemoteReads = remoteReads(tbl, memoryLimit)
	return tbl, nil
}

// resolveKeys checks the key options against the table.
func resolveKeys(tbl *source.Table, opts RunOptions) (plan.Keys, error) {
	return plan.ResolveKeys(tbl, opts.layout(nil))
}

// configOf is the layout config recorded in the manifest, and its hash.
func configOf(opts RunOptions, tr *tensorRun) ([]byte, string) {
	return opts.layout(tr).Config()
}

// layout returns the options that fix the output; tr, when set, adds the
// tensor spec.
func (o RunOptions) layout(tr *tensorRun) plan.Options {
	lo := plan.Options{
		SliceKeys: o.SliceKeys, SortKeys: o.SortKeys, QueryKey: o.QueryKey, QueryColumns: o.QueryColumns,
		ItemOrder: o.ItemOrder, OnQueryConflict: o.OnQueryConflict, MaxItemsPerQuery: o.MaxItemsPerQuery,
		RowGroupBytes: o.RowGroupBytes, MinRowGroupBytes: o.MinRowGroupBytes, RowGroupRows: o.RowGroupRows,
		FileBytes: o.FileBytes, BoundaryKeys: o.BoundaryKeys, ZstdLevel: o.ZstdLevel, PageBytes: o.PageBytes,
		Tensors: tr.config(o), Hive: o.hive,
	}
	if o.OutputPartitioning == "hive" {
		lo.HiveKeys = o.HiveKeys
	}
	return lo
}

// resources returns what the run may use.
func (o RunOptions) resources() plan.Resources {
	return plan.Resources{MemoryLimit: o.MemoryLimit, TmpDir: o.TmpDir, Parallel: o.Parallel, UnitRows: o.UnitRows,
		FitRowGroups: o.autoRowGroupBytes, FitMinRowGroups: o.autoMinRowGroupBytes, FitFileBytes: o.autoFileBytes,
		Sample: o.sample}
}

// fitted takes the size targets the key pass laid out with (lowered to
// fit --memory-limit where the user set none).
func (o *RunOptions) fitted(ks *plan.KeyPass) {
	if ks.Fitted != (plan.Fitted{}) { // a key pass that did not fit (plan.Scan) has none
		o.takeFitted(ks.Fitted)
	}
}

// takeFitted sets the size targets the plan fitted, logging each change,
// and reports whether any changed (the config, and its hash, with it).
func (o *RunOptions) takeFitted(f plan.Fitted) bool {
	changed := false
	if f.RowGroupBytes != o.RowGroupBytes {
		o.Log.Info("row groups made smaller to fit --memory-limit", "row_group_bytes", f.RowGroupBytes,
			"default", o.RowGroupBytes, "memory_limit", o.MemoryLimit)
		o.RowGroupBytes, o.MinRowGroupBytes, changed = f.RowGroupBytes, f.MinRowGroupBytes, true
	}
	if f.FileBytes != o.FileBytes {
		o.Log.Info("files made smaller so that a footer fits --memory-limit", "file_bytes", f.FileBytes,
			"default", o.FileBytes, "memory_limit", o.MemoryLimit)
		o.FileBytes, changed = f.FileBytes, true
	}
	return changed
}

// hiveColumns are the columns that name the output's folders (nil: flat).
func (o RunOptions) hiveColumns() []string {
	if o.OutputPartitioning != "hive" {
		return nil
	}
	return o.SliceKeys[:o.HiveKeys]
}

// checkFolders refuses a Hive output of many tiny folders unless forced:
// folders are distinct values of the leading HiveKeys slice keys, their
// size estimated at outRowBytes per row.
func checkFolders(hist *partition.Histogram, o RunOptions, outRowBytes float64) error {
	n, rows := folderCount(hist, o.HiveKeys), int64(0)
	if o.OutputPartitioning != "hive" || o.ForceFolders || n <= MaxTinyFolders {
		return nil
	}
	for _, s := range hist.Slices {
		rows += s.Rows
	}
	avg := float64(rows) * outRowBytes / float64(n)
	if avg >= TinyFolderBytes {
		return nil
	}
	return errs.WithHint(errs.Usagef("--output-partitioning hive: %d folders of %s averaging %.0f KiB of output each: every reader would open a file per folder",
		n, strings.Join(o.hiveColumns(), "/"), avg/1024), "name folders by fewer keys (--hive-keys), or pass --force-folders")
}

// folderCount is the number of distinct values of the first k slice keys.
func folderCount(hist *partition.Histogram, k int) int {
	n := 0
	for i, s := range hist.Slices {
		if i == 0 || !samePrefix(hist.Slices[i-1], s, k) {
			n++
		}
	}
	return n
}

func samePrefix(a, b partition.Slice, k int) bool {
	for i := 0; i < k && i < len(a.Parts) && i < len(b.Parts); i++ {
		if string(a.Parts[i]) != string(b.Parts[i]) {
			return false
		}
	}
	return true
}
