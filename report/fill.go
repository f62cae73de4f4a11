package report

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/writer"
)

// itemOffsetsTensor is the packed layout's CSR offsets tensor.
const itemOffsetsTensor = "query.item_offsets"

// TransferOf sums tensor data bytes per epoch from each tensor's total bytes
// (schema order). Packed runs also give what a flat layout would move: the
// query-level tensors once per item instead of once per query.
func TransferOf(schema []manifests.Tensor, bytes []float64, queries, items int64) *Transfer {
	var packed, unpacked float64
	for i, t := range schema {
		b := bytes[i]
		packed += b
		switch {
		case t.Name == itemOffsetsTensor:
		case t.Level == "query" && queries > 0:
			unpacked += b / float64(queries) * float64(items)
		default:
			unpacked += b
		}
	}
	tr := &Transfer{UnpackedBytes: int64(unpacked), PackedBytes: int64(packed)}
	if packed > 0 {
		tr.Ratio = unpacked / packed
	}
	return tr
}

func PackingOf(p *manifests.Packing) *Packing {
	return &Packing{
		Rows: p.Items, Queries: p.Queries, ItemsPerQuery: p.ItemsPerQuery,
		QueryColumns: nonNil(p.QueryColumns), ItemColumns: nonNil(p.ItemColumns), MovedToItems: nonNil(p.MovedToItems),
		BytesBefore: p.BytesBefore, BytesAfter: p.BytesAfter, ParquetBytesSaved: p.BytesBefore - p.BytesAfter,
	}
}

// WarnFacts are what the warnings are decided from; a dry run and a real
// run fill them from the same exact figures where they can.
// WarnFacts are what the report's warnings are decided from.
type WarnFacts struct {
	SliceKeys []string
	Before    Before
	Hist      *partition.Histogram
	Layout    partition.Layout
	// OutRowBytes is output bytes per input row.
	OutRowBytes float64
	Packing     *Packing
	MaxItems    int64
	// SampleQueries is how many queries with two or more rows the dry run's
	// sample held (-1: not a dry run, or not packing).
	SampleQueries int
}

const (
	tinySliceCount = 1000
	tinySliceBytes = 1 << 20
	hugeQueryRatio = 100
)

func WarningsOf(f WarnFacts) []Warning {
	w := []Warning{}
	add := func(code, format string, a ...any) {
		w = append(w, Warning{Code: code, Message: fmt.Sprintf(format, a...)})
	}
	if len(f.SliceKeys) > 0 && f.Before.NoStats > 0 {
		add("no_statistics", "%d of %d input row groups have no min/max statistics for a slice key (%s): readers cannot skip them before the re-layout",
			f.Before.NoStats, f.Before.RowGroups, strings.Join(f.SliceKeys, ","))
	}
	if f.Hist != nil && len(f.SliceKeys) > 0 {
		var big []string
		tiny := 0
		for _, s := range f.Hist.Slices {
			if s.Rows > f.Layout.FileRows && f.Layout.FileRows > 0 {
				if len(big) < 3 {
					big = append(big, fmt.Sprint(s.Values))
				}
			}
			if float64(s.Rows)*f.OutRowBytes < tinySliceBytes {
				tiny++
			}
		}
		if len(big) > 0 {
			add("slice_larger_than_file", "slices larger than one output file (%d rows at --file-bytes), e.g. %s: each spans several files; raise --file-bytes to keep a slice in one file",
				f.Layout.FileRows, strings.Join(big, ", "))
		}
		if len(f.Hist.Slices) >= tinySliceCount && tiny*2 >= len(f.Hist.Slices) {
			add("tiny_slices", "%d slices, %d of them under %d KiB of output: row groups are shared by many slices; consider fewer slice keys",
				len(f.Hist.Slices), tiny, tinySliceBytes>>10)
		}
	}
	if p := f.Packing; p != nil {
		d := p.ItemsPerQuery
		if f.MaxItems > 0 && d.Max > f.MaxItems {
			add("huge_query", "a query has %d items, more than the %d one query may hold in memory: the run will fail; raise --max-items-per-query or --memory-limit", d.Max, f.MaxItems)
		} else if d.P50 > 0 && d.Max > hugeQueryRatio*d.P50 {
			add("huge_query", "the largest query has %d items, %dx the median (%d): its row is large and its loader batch uneven", d.Max, d.Max/d.P50, d.P50)
		}
		if len(p.MovedToItems) > 0 {
			add("columns_not_packed", "declared query columns vary within a query and stay per item: %s", strings.Join(p.MovedToItems, ","))
		}
		if len(p.QueryColumns) <= len(f.SliceKeys)+1 {
			add("columns_not_packed", "no feature column is constant within every query: packing saves little")
		}
		if f.SampleQueries >= 0 && f.SampleQueries < 100 {
			add("sample_few_queries", "the sample holds only %d queries with two or more rows, so which columns are query-level is uncertain; raise --sample-rows", f.SampleQueries)
		}
	}
	return w
}

// FillRun completes a real run's report with measured figures: the
// slices' read costs on the input and on the written output, packing,
// transfer and warnings.
func FillRun(ctx context.Context, rep *Report, tbl *source.Table, out storage.Location, m *manifests.Manifest,
	hist *partition.Histogram, before Before, queries []int64, shards []writer.Shard, layout partition.Layout, maxItems int64, sliceKeys []string, listSlices int) error {
	return FillRunWith(ctx, rep, tbl, out, m, hist, before, queries, shards, layout, maxItems, sliceKeys, listSlices, nil)
}

// FillRunWith is FillRun with the output's files modelled already (oc,
// from the run's check; nil or incomplete: the files it lacks are opened
// again, each alone, 16 at once, and modelled while open).
//
// Opened as one table, each file of a large output was opened twice: for
// its footer, then for its page index once the table (64 files open at
// most) had closed it again; on a store that is a GET each time, 2,400
// for a 1,200-folder output's commit. A file that fails to open or model
// alone is left to that table, which reports why.
func FillRunWith(ctx context.Context, rep *Report, tbl *source.Table, out storage.Location, m *manifests.Manifest,
	hist *partition.Histogram, before Before, queries []int64, shards []writer.Shard, layout partition.Layout, maxItems int64, sliceKeys []string, listSlices int, oc *OutputCosts) error {
	if oc == nil {
		oc = NewOutputCosts(hist, m, sliceKeys)
	}
	par.ForEach(ctx, len(m.Files), modelParallel, func(fi int) error {
		if oc.done[fi] {
			return nil
		}
		if ftbl, err := source.OpenOutput(ctx, out, m, []int{fi}, nil); err == nil {
			oc.File(fi, ftbl)
			ftbl.Close()
		}
		return nil
	})
	after, modelled := oc.table()
	if len(m.Files) > 0 && !modelled {
		otbl, err := source.OpenOutput(ctx, out, m, nil, nil)
		if err != nil {
			return err
		}
		after, err = costOfTable(otbl, sliceKeys, outputVectors(hist, m))
		otbl.Close()
		if err != nil {
			return err
		}
	}
	rep.Slices = SlicesOf(hist, sliceKeys, before, &after, queries, listSlices)
	if m.Packing != nil {
		rep.Packing = PackingOf(m.Packing)
	}
	if m.Tensors != nil {
		per := make([]float64, len(m.Tensors.Schema))
		for _, s := range shards {
			for i, b := range s.TensorBytes {
				per[i] += float64(b)
			}
		}
		q, items := m.Totals.Rows, m.Totals.Rows
		if m.Packing != nil {
			q, items = m.Packing.Queries, m.Packing.Items
		}
		rep.Transfer = TransferOf(m.Tensors.Schema, per, q, items)
	}
	outRowBytes := 0.0
	if tbl.Rows > 0 {
		outRowBytes = float64(m.Totals.Bytes) / float64(tbl.Rows)
	}
	rep.Warnings = WarningsOf(WarnFacts{SliceKeys: sliceKeys, Before: before, Hist: hist, Layout: layout,
		OutRowBytes: outRowBytes, Packing: rep.Packing, MaxItems: maxItems, SampleQueries: -1})
	return nil
}

// modelParallel is how many files FillRunWith opens at once to model
// them: a store's latency, not its bandwidth, bounds each.
const modelParallel = 16

// OutputCosts models a written output's files one at a time while
// something else has each open (the run's check, verify.ManifestEach), so
// that FillRunWith need not open and parse every footer again: a Hive
// output of 1,200 folders spent 0.4 s of 5 on that.
type OutputCosts struct {
	sliceKeys []string
	vectors   []*partition.RowGroupSlices
	base      []int // each file's first row group in the output
	rowGroups int
	parts     []TableCost
	done      []bool
}

// NewOutputCosts returns the models to fill for m's files.
func NewOutputCosts(hist *partition.Histogram, m *manifests.Manifest, sliceKeys []string) *OutputCosts {
	oc := &OutputCosts{sliceKeys: sliceKeys, vectors: outputVectors(hist, m), parts: make([]TableCost, len(m.Files)), done: make([]bool, len(m.Files))}
	for _, f := range m.Files {
		oc.base = append(oc.base, oc.rowGroups)
		oc.rowGroups += len(f.RowGroups)
	}
	return oc
}

// File models file fi from tbl, a table of that file alone. Files may be
// modelled at once, from several goroutines; one that fails is left to
// FillRunWith to open again.
func (oc *OutputCosts) File(fi int, tbl *source.Table) {
	part, err := costOfFile(tbl, tbl.Files[0], oc.base[fi], oc.sliceKeys, oc.vectors, costScope{end: -1, pages: true}, oc.rowGroups)
	if err == nil {
		oc.parts[fi], oc.done[fi] = part, true
	}
}

// table is the output's model, the files' in order, and whether every
// file was modelled.
func (oc *OutputCosts) table() (tc TableCost, ok bool) {
	if oc == nil || len(oc.parts) == 0 || slices.Contains(oc.done, false) {
		return tc, false
	}
	for k := range oc.parts {
		tc.addFile(&oc.parts[k])
	}
	return tc, true
}

// outputVectors says where each slice's rows lie in the written row groups,
// from the manifest's slice index.
func outputVectors(hist *partition.Histogram, m *manifests.Manifest) []*partition.RowGroupSlices {
	var base []int // index of each file's first row group
	n := 0
	for _, f := range m.Files {
		base = append(base, n)
		n += len(f.RowGroups)
	}
	out := make([]*partition.RowGroupSlices, n)
	for i := range out {
		out[i] = &partition.RowGroupSlices{}
	}
	j := 0 // manifest slices are the histogram's non-empty slices, in order
	for rank, hs := range hist.Slices {
		if hs.Rows == 0 {
			continue
		}
		if j >= len(m.Slices) {
			break
		}
		for _, seg := range m.Slices[j].Segments {
			rg := m.Files[seg.File].RowGroups[seg.RowGroup]
			lo := seg.FirstRow - rg.FirstRow
			v := vectorsOf(rg.Rows, lo, lo+seg.Rows)
			out[base[seg.File]+seg.RowGroup].AddVectors(int32(rank), v) // ranks ascend
		}
		j++
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
