package source

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/par"
)

func concat(ch *arrow.Chunked) (arrow.Array, error) {
	switch len(ch.Chunks()) {
	case 0:
		return array.MakeArrayOfNull(memory.DefaultAllocator, ch.DataType(), 0), nil
	case 1:
		a := ch.Chunk(0)
		a.Retain()
		return a, nil
	}
	return array.Concatenate(ch.Chunks(), memory.DefaultAllocator)
}

// RowGroupRef names one row group of one file.
type RowGroupRef struct {
	File     *File
	RowGroup int
}

// RowGroups lists every row group of the table in input order.
func (t *Table) RowGroups() []RowGroupRef {
	var out []RowGroupRef
	for _, f := range t.Files {
		for rg := range f.RowGroupRows {
			out = append(out, RowGroupRef{f, rg})
		}
	}
	return out
}

// Rows returns the row group's row count.
func (r RowGroupRef) Rows() int64 { return r.File.RowGroupRows[r.RowGroup] }

// Offset returns the global position of the row group's first row.
func (r RowGroupRef) Offset() int64 { return r.File.RowGroupOffsets[r.RowGroup] }

// Read reads the given table columns (nil: all) of the row group as a record
// whose schema is the table's schema restricted to those columns, decoding
// columns on up to `parallel` goroutines.
func (t *Table) Read(ctx context.Context, ref RowGroupRef, cols []int, parallel int) (arrow.RecordBatch, error) {
	if cols == nil {
		cols = make([]int, t.Schema.NumFields())
		for i := range cols {
			cols[i] = i
		}
	}
	arrs := make([]arrow.Array, len(cols))
	err := par.ForEach(ctx, len(cols), parallel, func(i int) error {
		var err error
		arrs[i], err = ref.File.ReadColumn(ctx, ref.RowGroup, cols[i])
		return err
	})
	if err != nil {
		for _, a := range arrs {
			if a != nil {
				a.Release()
			}
		}
		return nil, err
	}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = t.Schema.Field(c)
	}
	sc := arrow.NewSchema(fields, nil)
	rec := array.NewRecordBatch(sc, arrs, ref.Rows())
	for _, a := range arrs {
		a.Release()
	}
	return rec, nil
}

// Allocator returns the allocator used for decoded data.
func (t *Table) Allocator() memory.Allocator { return t.mem }
