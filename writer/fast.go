package writer

import (
	"context"
	"encoding/base64"
	"fmt"
	"sync"

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
	field        int  // top-level field
	child        int  // struct child inside a packed items list, or -1
	list         bool // the leaf's field is a list of scalars
	nullable     bool // the leaf's field
	elemNullable bool // its list element
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

// fastPlan returns how to write each leaf column, or false when some field
// needs the sequential writer. Besides scalars and lists of scalars it takes
// a packed items column: a required list of required structs whose fields
// are scalars or lists of scalars.
func fastPlan(s *arrow.Schema) ([]fastCol, bool) {
	var plan []fastCol
	leaf := func(field, child int, f arrow.Field) bool {
		if lt, ok := f.Type.(*arrow.ListType); ok {
			if !scalarWritable(lt.Elem()) {
				return false
			}
			plan = append(plan, fastCol{field: field, child: child, list: true, nullable: f.Nullable, elemNullable: lt.ElemField().Nullable})
			return true
		}
		if !scalarWritable(f.Type) {
			return false
		}
		plan = append(plan, fastCol{field: field, child: child, nullable: f.Nullable})
		return true
	}
	for i, f := range s.Fields() {
		if lt, ok := f.Type.(*arrow.ListType); ok && !f.Nullable && !lt.ElemField().Nullable {
			if st, ok := lt.Elem().(*arrow.StructType); ok {
				for c, cf := range st.Fields() {
					if !leaf(i, c, cf) {
						return nil, false
					}
				}
				continue
			}
		}
		if !leaf(i, -1, f) {
			return nil, false
		}
	}
	return plan, true
}

// arrowSchemaMetadata returns the base64 ARROW:schema value pqarrow stores,
// with list elements named "element" as in the Parquet schema.
func arrowSchemaMetadata(s *arrow.Schema) string {
	fields := make([]arrow.Field, s.NumFields())
	for i, f := range s.Fields() {
		fields[i] = normaliseField(f)
	}
	md := s.Metadata()
	norm := arrow.NewSchema(fields, &md)
	return base64.StdEncoding.EncodeToString(flight.SerializeSchema(norm, memory.DefaultAllocator))
}

func normaliseField(f arrow.Field) arrow.Field {
	switch t := f.Type.(type) {
	case *arrow.ListType:
		elem := normaliseField(t.ElemField())
		elem.Name = "element"
		return arrow.Field{Name: f.Name, Type: arrow.ListOfField(elem), Nullable: f.Nullable, Metadata: f.Metadata}
	case *arrow.StructType:
		fs := make([]arrow.Field, t.NumFields())
		for i := range fs {
			fs[i] = normaliseField(t.Field(i))
		}
		return arrow.Field{Name: f.Name, Type: arrow.StructOf(fs...), Nullable: f.Nullable, Metadata: f.Metadata}
	}
	return f
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
	// The items' required scalar columns share one pair of level arrays
	// per items field: computed once, read by every such column.
	shared := map[int]*itemLevels{}
	for _, p := range plan {
		if p.child >= 0 && !p.list && !p.nullable && shared[p.field] == nil {
			shared[p.field] = &itemLevels{}
		}
	}
	return par.ForEach(ctx, len(plan), workers, func(i int) error {
		p := plan[i]
		var err error
		if p.child < 0 {
			err = writeFastColumn(ctxs[i], rgw, i, rec.Column(p.field), p)
		} else {
			err = writeItemColumn(ctxs[i], rgw, i, rec.Column(p.field).(*array.List), p, shared[p.field])
		}
		if err != nil {
			return fmt.Errorf("column %s: %w", rec.ColumnName(p.field), err)
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
	// A row has one level per value, or one if it has none: at most n plus
	// the values its offsets span. Sized once, not grown by appending
	// (growing them was a tenth of a reduce task's zeroing and copying).
	var first, last int64
	if n > 0 {
		first, _ = list.ValueOffsets(0)
		_, last = list.ValueOffsets(n - 1)
	}
	def, rep := make([]int16, 0, n+int(last-first)), make([]int16, 0, n+int(last-first))
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
	FlushCurrentPage() error
}

// flushPages encodes and compresses each column's pending page in parallel
// before the row group is closed: closing is serial (columns are copied to
// the file in order), so this moves the compression of the last pages off
// the critical path. Whether a page has values is read from its page
// statistics (reset whenever a page is cut): the encoder's size estimate is
// not zero for an empty dictionary page, and flushing a page without levels
// panics in arrow-go. Pages the statistics cannot vouch for (only empty
// lists) are left to Close.
func flushPages(rgw file.BufferedRowGroupWriter, ncols, workers int) error {
	return par.ForEach(context.Background(), ncols, workers, func(i int) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("flush column %d: encoder panicked: %v", i, r)
			}
		}()
		cw, err := rgw.Column(i)
		if err != nil {
			return err
		}
		st := cw.PageStatistics()
		if st == nil || st.NumValues()+st.NullCount() == 0 {
			return nil
		}
		if f, ok := cw.(pageFlusher); ok {
			return f.FlushCurrentPage()
		}
		return nil
	})
}

// itemLevels are the levels of a required scalar item column, the same
// for every such column of one items list: computed by the first column
// that needs them.
type itemLevels struct {
	once     sync.Once
	def, rep []int16
	err      error
}

// levelsOf returns the definition and repetition levels of the items'
// child values (a required list of required structs; nullable says the
// child is optional, and which of its values are valid then decides the
// definition level).
func levelsOf(items *array.List, child arrow.Array, nullable bool) (def, rep []int16, err error) {
	n := items.Len()
	first, _ := items.ValueOffsets(0)
	_, last := items.ValueOffsets(n - 1)
	def = make([]int16, 0, last-first)
	rep = make([]int16, 0, last-first)
	for q := 0; q < n; q++ {
		s, e := items.ValueOffsets(q)
		if s == e || items.IsNull(q) {
			return nil, nil, fmt.Errorf("a packed row has no items")
		}
		for k := s; k < e; k++ {
			r := int16(1)
			if k == s {
				r = 0
			}
			d := int16(1)
			if nullable && child.IsValid(int(k)) {
				d = 2
			}
			def, rep = append(def, d), append(rep, r)
		}
	}
	return def, rep, nil
}

// writeItemColumn writes struct child p.child of a packed items list: a
// required list (every query has at least one item) of required structs.
// Levels: the first item of a query repeats at 0, later items at 1; a list
// field inside the item adds repetition level 2 for its later elements.
// shared, when not nil, holds the levels of the items' required scalar
// columns.
func writeItemColumn(ctx context.Context, rgw file.BufferedRowGroupWriter, i int, items *array.List, p fastCol, shared *itemLevels) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("encoder panicked: %v", r)
		}
	}()
	cw, err := rgw.Column(i)
	if err != nil {
		return err
	}
	n := items.Len()
	if n == 0 {
		return nil
	}
	first, _ := items.ValueOffsets(0)
	_, last := items.ValueOffsets(n - 1)
	child := items.ListValues().(*array.Struct).Field(p.child)
	var def, rep []int16
	if !p.list {
		if shared != nil && !p.nullable { // shared holds the required columns' levels
			shared.once.Do(func() { shared.def, shared.rep, shared.err = levelsOf(items, child, false) })
			def, rep, err = shared.def, shared.rep, shared.err
		} else {
			def, rep, err = levelsOf(items, child, p.nullable)
		}
		if err != nil {
			return err
		}
		leaf := array.NewSlice(child, first, last)
		defer leaf.Release()
		return pqarrow.WriteArrowToColumn(ctx, cw, leaf, def, rep, p.nullable)
	}
	inner := child.(*array.List)
	vals := inner.ListValues()
	listDef := int16(1) // items present
	if p.nullable {
		listDef++ // the item's list present
	}
	var lo, hi int64 = -1, -1
	for q := 0; q < n; q++ {
		s, e := items.ValueOffsets(q)
		if s == e || items.IsNull(q) {
			return fmt.Errorf("a packed row has no items")
		}
		for k := s; k < e; k++ {
			r := int16(1)
			if k == s {
				r = 0
			}
			if inner.IsNull(int(k)) {
				if ls, le := inner.ValueOffsets(int(k)); ls != le {
					return fmt.Errorf("a null list spans values")
				}
				def, rep = append(def, 1), append(rep, r)
				continue
			}
			ls, le := inner.ValueOffsets(int(k))
			if lo < 0 {
				lo = ls
			}
			hi = le
			if ls == le {
				def, rep = append(def, listDef), append(rep, r)
				continue
			}
			for v := ls; v < le; v++ {
				rr := int16(2)
				if v == ls {
					rr = r
				}
				d := listDef + 1
				if p.elemNullable && vals.IsValid(int(v)) {
					d++
				}
				def, rep = append(def, d), append(rep, rr)
			}
		}
	}
	if lo < 0 {
		lo, hi = 0, 0
	}
	leaf := array.NewSlice(vals, lo, hi)
	defer leaf.Release()
	return pqarrow.WriteArrowToColumn(ctx, cw, leaf, def, rep, p.elemNullable)
}
