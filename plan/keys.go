package plan

import (
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
)

// Keys are the table columns a run orders by: slice keys, sort keys (in
// packed runs the query key, then the item order) and the query key.
type Keys struct {
	Slice, Sort, Query []int
}

// ResolveKeys checks the key options against the table.
func ResolveKeys(tbl *source.Table, o Options) (Keys, error) {
	var k Keys
	var err error
	if k.Slice, err = partition.KeyColumns(tbl, o.SliceKeys, "--slice-keys"); err != nil {
		return k, err
	}
	if k.Sort, err = partition.KeyColumns(tbl, o.SortKeys, "--sort-keys"); err != nil {
		return k, err
	}
	if len(o.QueryKey) > 0 {
		if k.Query, err = partition.KeyColumns(tbl, o.QueryKey, "--query-key"); err != nil {
			return k, err
		}
		io, err := partition.KeyColumns(tbl, o.ItemOrder, "--item-order")
		if err != nil {
			return k, err
		}
		k.Sort = append(append([]int{}, k.Query...), io...)
	}
	return k, nil
}

// Sizes are the footer figures the layout and the budget start from.
type Sizes struct {
	Bytes, Uncompressed int64
	// RowBytes is uncompressed bytes per row, FileRowBytes stored bytes.
	RowBytes, FileRowBytes float64
	// Leaves is the input schema's leaf columns.
	Leaves int64
	// RowsPerSample is the input rows in one tensor sample: a query's
	// items, on average, when packing (WithSamples); 0 reads as 1.
	RowsPerSample float64
}

// WithSamples is s with RowsPerSample set from the key pass's query counts
// (nil or none: a sample is a row).
func (s Sizes) WithSamples(rows int64, qc *partition.QueryCounts) Sizes {
	s.RowsPerSample = 1
	if qc != nil && qc.Queries > 0 {
		s.RowsPerSample = float64(rows) / float64(qc.Queries)
	}
	return s
}

// SizesOf reads a table's sizes from its footers.
func SizesOf(tbl *source.Table) Sizes {
	s := Sizes{RowBytes: 1, FileRowBytes: 1}
	for _, f := range tbl.Files {
		s.Bytes += f.Obj.Size
		s.Uncompressed += f.UncompressedBytes
	}
	if tbl.Rows > 0 {
		s.RowBytes = float64(s.Uncompressed) / float64(tbl.Rows)
		s.FileRowBytes = float64(s.Bytes) / float64(tbl.Rows)
	}
	s.Leaves = tbl.Files[0].Leaves
	return s
}

// Layout cuts the histogram's slices into the output's row groups and
// files: it depends only on the footers, the histogram and the options.
func Layout(hist *partition.Histogram, in Sizes, o Options) partition.Layout {
	return partition.PlanLayout(hist.Slices, partition.LayoutOptions{
		RowGroupBytes: o.RowGroupBytes, MinRowGroupBytes: o.MinRowGroupBytes,
		RowGroupRows: o.RowGroupRows, FileBytes: o.FileBytes,
		RowBytes: in.RowBytes, FileRowBytes: in.FileRowBytes, BoundaryKeys: o.BoundaryKeys, FileKeys: o.HiveKeys,
	})
}
