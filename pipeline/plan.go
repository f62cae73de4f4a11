package pipeline

import (
	"context"

	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// openTable lists and opens the inputs (footers only; reads counted) and
// resolves the key columns: the start of run, dry run and plan.
func openTable(ctx context.Context, opts RunOptions) (*source.Table, plan.Keys, plan.Sizes, *storage.Counters, error) {
	objs, err := storage.List(ctx, opts.Inputs)
	if err != nil {
		return nil, plan.Keys{}, plan.Sizes{}, nil, err
	}
	counts := new(storage.Counters)
	tbl, err := source.Open(ctx, objs, counts)
	if err != nil {
		return nil, plan.Keys{}, plan.Sizes{}, nil, err
	}
	keys, err := resolveKeys(tbl, opts)
	if err != nil {
		tbl.Close()
		return nil, plan.Keys{}, plan.Sizes{}, nil, err
	}
	return tbl, keys, plan.SizesOf(tbl), counts, nil
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
		Tensors: tr.config(o),
	}
	return lo
}

// resources returns what the run may use.
func (o RunOptions) resources() plan.Resources {
	return plan.Resources{MemoryLimit: o.MemoryLimit, TmpDir: o.TmpDir, Parallel: o.Parallel, UnitRows: o.UnitRows}
}
