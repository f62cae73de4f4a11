package writer

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/relayout/relayout/internal/par"
)

// The fast path encodes the columns of a row group in parallel. pqarrow's
// FileWriter encodes one column after another; its per-column writer is not
// exported, so for the column shapes of training logs (top-level scalars and
// lists of scalars) relayout computes definition and repetition levels itself
// and hands each column to pqarrow.WriteArrowToColumn on its own goroutine,
// writing into one buffered row group whose column writers are independent.
// Other shapes (structs, maps, nested lists, dictionaries, extensions) use
// the sequential FileWriter. Either way the bytes depend only on the data.

type fastCol struct {
	list         bool
	nullable     bool // the top-level field
	elemNullable bool // the list element
}

func scalarWritable(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.BOOL, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64, arrow.DATE32, arrow.TIME32, arrow.TIME64,
		arrow.TIMESTAMP, arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY,
		arrow.FIXED_SIZE_BINARY, arrow.DECIMAL128, arrow.DECIMAL256:
		return true
	}
	return false
}

// fastPlan returns how to write each field, or false when some field needs
// the sequential writer.
func fastPlan(s *arrow.Schema) ([]fastCol, bool) {
	plan := make([]fastCol, s.NumFields())
	for i, f := range s.Fields() {
		switch t := f.Type.(type) {
		case *arrow.ListType:
			if !scalarWritable(t.Elem()) {
				return nil, false
			}
			plan[i] = fastCol{list: true, nullable: f.Nullable, elemNullable: t.ElemField().Nullable}
		default:
			if !scalarWritable(f.Type) {
				return nil, false
			}
			plan[i] = fastCol{nullable: f.Nullable}
		}
	}
	return plan, true
}

// arrowSchemaMetadata returns the base64 ARROW:schema value pqarrow stores,
// with list elements named "element" as in the Parquet schema.
func arrowSchemaMetadata(s *arrow.Schema) string {
	fields := make([]arrow.Field, s.NumFields())
	for i, f := range s.Fields() {
		if lt, ok := f.Type.(*arrow.ListType); ok {
			elem := lt.ElemField()
			elem.Name = "element"
			f = arrow.Field{Name: f.Name, Type: arrow.ListOfField(elem), Nullable: f.Nullable, Metadata: f.Metadata}
		}
		fields[i] = f
	}
	md := s.Metadata()
	norm := arrow.NewSchema(fields, &md)
	return base64.StdEncoding.EncodeToString(flight.SerializeSchema(norm, memory.DefaultAllocator))
}

// writeFast writes rec into the buffered row group, one goroutine per column
// up to workers at a time.
func writeFast(ctx context.Context, rgw file.BufferedRowGroupWriter, rec arrow.RecordBatch, plan []fastCol, props *pqarrow.ArrowWriterProperties, workers int) error {
	if rec.NumRows() == 0 {
		return nil
	}
	ctxs := make([]context.Context, len(plan))
	for i := range ctxs {
		ctxs[i] = pqarrow.NewArrowWriteContext(ctx, props) // one buffer per column: not shared
	}
	return par.ForEach(ctx, len(plan), workers, func(i int) error {
		if err := writeFastColumn(ctxs[i], rgw, i, rec.Column(i), plan[i]); err != nil {
			return fmt.Errorf("column %s: %w", rec.ColumnName(i), err)
		}
		return nil
	})
}

func writeFastColumn(ctx context.Context, rgw file.BufferedRowGroupWriter, i int, arr arrow.Array, p fastCol) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("encoder panicked: %v", r)
		}
	}()
	cw, err := rgw.Column(i)
	if err != nil {
		return err
	}
	n := arr.Len()
	if !p.list {
		var def []int16
		if p.nullable {
			def = make([]int16, n)
			for j := 0; j < n; j++ {
				if arr.IsValid(j) {
					def[j] = 1
				}
			}
		}
		return pqarrow.WriteArrowToColumn(ctx, cw, arr, def, nil, p.nullable)
	}
	list := arr.(*array.List)
	base := int16(0)
	if p.nullable {
		base = 1
	}
	var def, rep []int16
	canonical := true
	for j := 0; j < n; j++ {
		s, e := list.ValueOffsets(j)
		if list.IsNull(j) {
			def = append(def, 0)
			rep = append(rep, 0)
			if e != s {
				canonical = false
			}
			continue
		}
		if s == e {
			def = append(def, base)
			rep = append(rep, 0)
			continue
		}
		vals := list.ListValues()
		for k := s; k < e; k++ {
			r := int16(1)
			if k == s {
				r = 0
			}
			d := base + 1
			if p.elemNullable && vals.IsValid(int(k)) {
				d++
			}
			def = append(def, d)
			rep = append(rep, r)
		}
	}
	var leaf arrow.Array
	if canonical {
		first, _ := list.ValueOffsets(0)
		_, last := list.ValueOffsets(n - 1)
		leaf = array.NewSlice(list.ListValues(), first, last)
	} else {
		// A null list that still spans values: gather only the values of
		// valid lists.
		b := array.NewInt64Builder(memory.DefaultAllocator)
		for j := 0; j < n; j++ {
			if list.IsValid(j) {
				s, e := list.ValueOffsets(j)
				for k := s; k < e; k++ {
					b.Append(k)
				}
			}
		}
		idx := b.NewInt64Array()
		b.Release()
		leaf, err = compute.TakeArray(ctx, list.ListValues(), idx)
		idx.Release()
		if err != nil {
			return err
		}
	}
	defer leaf.Release()
	return pqarrow.WriteArrowToColumn(ctx, cw, leaf, def, rep, p.elemNullable)
}

// pageFlusher is implemented by arrow-go's concrete column writers.
type pageFlusher interface {
	EstimatedBufferedValueBytes() int64
	FlushCurrentPage() error
}

// flushPages encodes and compresses each column's pending page in parallel
// before the row group is closed: closing is serial (columns are copied to
// the file in order), so this moves the compression of the last pages off
// the critical path. Columns without buffered values are left to Close, so
// no empty pages are written.
func flushPages(rgw file.BufferedRowGroupWriter, ncols, workers int) error {
	return par.ForEach(context.Background(), ncols, workers, func(i int) error {
		cw, err := rgw.Column(i)
		if err != nil {
			return err
		}
		if f, ok := cw.(pageFlusher); ok && f.EstimatedBufferedValueBytes() > 0 {
			return f.FlushCurrentPage()
		}
		return nil
	})
}
