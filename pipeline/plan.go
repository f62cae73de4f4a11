package pipeline

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// openTable lists and opens the inputs (footers only; reads counted) and
// resolves the key columns: the start of run, dry run and plan.
func openTable(ctx context.Context, opts RunOptions) (*source.Table, keyCols, inputSizes, *storage.Counters, error) {
	objs, err := storage.List(ctx, opts.Inputs)
	if err != nil {
		return nil, keyCols{}, inputSizes{}, nil, err
	}
	counts := new(storage.Counters)
	tbl, err := source.Open(ctx, objs, counts)
	if err != nil {
		return nil, keyCols{}, inputSizes{}, nil, err
	}
	keys, err := resolveKeys(tbl, opts)
	if err != nil {
		tbl.Close()
		return nil, keyCols{}, inputSizes{}, nil, err
	}
	return tbl, keys, sizesOf(tbl), counts, nil
}

// keyCols are the table columns a run orders by.
type keyCols struct {
	slice, sort, query []int
}

// resolveKeys checks the key flags against the table. Packed runs order
// each slice's rows by query key, then item order.
func resolveKeys(tbl *source.Table, opts RunOptions) (keyCols, error) {
	var k keyCols
	var err error
	if k.slice, err = partition.KeyColumns(tbl, opts.SliceKeys, "--slice-keys"); err != nil {
		return k, err
	}
	if k.sort, err = partition.KeyColumns(tbl, opts.SortKeys, "--sort-keys"); err != nil {
		return k, err
	}
	if len(opts.QueryKey) > 0 {
		if k.query, err = partition.KeyColumns(tbl, opts.QueryKey, "--query-key"); err != nil {
			return k, err
		}
		io, err := partition.KeyColumns(tbl, opts.ItemOrder, "--item-order")
		if err != nil {
			return k, err
		}
		k.sort = append(append([]int{}, k.query...), io...)
	}
	return k, nil
}

// inputSizes are the footer figures the layout and the budget start from.
type inputSizes struct {
	bytes, uncompressed int64
	// rowBytes is uncompressed bytes per row, fileRowBytes stored bytes.
	rowBytes, fileRowBytes float64
	leaves                 int64
}

func sizesOf(tbl *source.Table) inputSizes {
	s := inputSizes{rowBytes: 1, fileRowBytes: 1}
	for _, f := range tbl.Files {
		s.bytes += f.Obj.Size
		s.uncompressed += f.UncompressedBytes
	}
	if tbl.Rows > 0 {
		s.rowBytes = float64(s.uncompressed) / float64(tbl.Rows)
		s.fileRowBytes = float64(s.bytes) / float64(tbl.Rows)
	}
	s.leaves = int64(tbl.Files[0].Parquet().MetaData().Schema.NumColumns())
	return s
}

// planLayout cuts the histogram's slices into the output's row groups and
// files: it depends only on the footers, the histogram and the options.
func planLayout(hist *partition.Histogram, in inputSizes, opts RunOptions) partition.Layout {
	return partition.PlanLayout(hist.Slices, partition.LayoutOptions{
		RowGroupBytes: opts.RowGroupBytes, MinRowGroupBytes: opts.MinRowGroupBytes,
		RowGroupRows: opts.RowGroupRows, FileBytes: opts.FileBytes,
		RowBytes: in.rowBytes, FileRowBytes: in.fileRowBytes, BoundaryKeys: opts.BoundaryKeys,
	})
}

// unitHeadroom is left out of the units' share of the budget and out of
// Go's soft memory limit: heap the runtime keeps beyond the soft limit
// while a unit is concatenated.
const unitHeadroom = 16 << 20

// memoryPlan splits the memory budget.
type memoryPlan struct {
	// fixed is what writing needs whatever the unit size; unitRows the
	// rows gathered in memory at once; chunkRows the writer's batch.
	fixed, unitRows, chunkRows int64
	memRowBytes                float64
	units                      []partition.Unit
	// mapWorkers is how many in-process map tasks may run at once: each
	// holds one decoded input row group and what it routes from it.
	mapWorkers int
}

// planMemory sizes the units. Fixed costs: the Go runtime and binary; every
// leaf column's pending page (uncompressed, up to --page-bytes); the largest
// row group's compressed pages, buffered until it is closed; gathered chunks
// in flight; with tensors, one shard. What is left holds one unit of decoded
// rows, the same rows concatenated per column (one column at a time) and GC
// headroom. memRowBytes is decoded bytes per row, measured on a sample.
func planMemory(tbl *source.Table, in inputSizes, layout partition.Layout, memRowBytes float64, tensors bool, opts RunOptions) (memoryPlan, error) {
	memRowBytes = max(in.rowBytes, memRowBytes)
	compRatio := 1.0
	if in.uncompressed > 0 {
		compRatio = min(max(float64(in.bytes)/float64(in.uncompressed), 0.05), 1)
	}
	chunkRows := min(max(int64((4<<20)/max(in.rowBytes, 1)), 1024), 64<<10)
	chunkBytes := int64(float64(chunkRows) * memRowBytes)
	rowGroupBytes := int64(float64(min(layout.TargetRows, max(tbl.Rows, 1))) * in.rowBytes)
	pending := min(in.leaves*opts.PageBytes, rowGroupBytes) // pages not yet cut
	fixed := int64(runtimeReserve) + pending + int64(float64(rowGroupBytes)*compRatio) + int64(max(opts.Parallel, 2)+1)*chunkBytes
	if tensors { // one shard's tensors are buffered until it is written
		fixed += min(opts.ShardBytes, int64(float64(tbl.Rows)*memRowBytes)) + chunkBytes
	}
	avail := opts.MemoryLimit - fixed
	if avail < 8<<20 {
		return memoryPlan{}, errs.Usagef("--memory-limit %d MiB is too small for this table: writing alone needs about %d MiB (%d columns x %d KiB pages, a %d-row row group, chunks in flight, a tensor shard); raise --memory-limit or lower --row-group-bytes, --page-bytes or --shard-bytes",
			opts.MemoryLimit>>20, (fixed+8<<20)>>20, in.leaves, opts.PageBytes>>10, layout.TargetRows)
	}
	// A unit's rows are held twice while a column is concatenated and once
	// more as gathered chunks, plus GC headroom that must hold up when the
	// CPU is contended: a fifth of what is left after a further 16 MiB,
	// which the run also keeps out of Go's soft memory limit (measured:
	// under a 128 MiB limit the peak RSS went from 148-159 MiB to 140-142
	// MiB).
	unitRows := int64(float64(max(avail-unitHeadroom, 8<<20)/5) / max(memRowBytes, 1))
	if opts.UnitRows > 0 {
		unitRows = opts.UnitRows
	}
	// The map phase runs before the units are gathered: its budget is the
	// limit less the runtime, the kept encoding sample and headroom.
	var maxRG int64
	for _, f := range tbl.Files {
		for _, n := range f.RowGroupRows {
			maxRG = max(maxRG, n)
		}
	}
	perMap := int64(2*float64(maxRG)*memRowBytes) + 4<<20
	sampleBytes := int64(float64(min(tbl.Rows, 32<<10)) * memRowBytes)
	mapWorkers := int(min(max((opts.MemoryLimit-runtimeReserve-unitHeadroom-sampleBytes)/max(perMap, 1), 1), int64(max(opts.Parallel, 1))))
	return memoryPlan{fixed: fixed, unitRows: unitRows, chunkRows: chunkRows, memRowBytes: memRowBytes, mapWorkers: mapWorkers,
		units: partition.GroupUnits(partition.Chunks(layout, chunkRows), unitRows)}, nil
}

// configOf is the layout config recorded in the manifest, and its hash.
func configOf(opts RunOptions, tr *tensorRun) ([]byte, string) {
	cfg := layoutConfig{
		SliceKeys: nonNil(opts.SliceKeys), SortKeys: nonNil(opts.SortKeys),
		RowGroupBytes: opts.RowGroupBytes, MinRowGroupBytes: opts.MinRowGroupBytes,
		RowGroupRows: opts.RowGroupRows, FileBytes: opts.FileBytes, BoundaryKeys: opts.BoundaryKeys,
		ZstdLevel: opts.ZstdLevel, PageBytes: opts.PageBytes, Tensors: tr.config(opts),
	}
	if len(opts.QueryKey) > 0 {
		cfg.QueryKey, cfg.QueryColumns, cfg.ItemOrder, cfg.OnQueryConflict = opts.QueryKey, nonNil(opts.QueryColumns), nonNil(opts.ItemOrder), opts.OnQueryConflict
	}
	cfgJSON, _ := json.Marshal(cfg)
	return cfgJSON, fmt.Sprintf("%016x", xxhash.Sum64(cfgJSON))
}
