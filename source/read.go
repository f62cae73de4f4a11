package source

import (
	"context"
	"fmt"
	"io"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/relayout/relayout/internal/errs"

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
	if n, ok := overflows(ch.Chunks()); ok {
		return nil, errTooLarge{n}
	}
	return array.Concatenate(ch.Chunks(), memory.DefaultAllocator)
}

// errTooLarge is a row group's column too large for one array with 32-bit
// offsets: n values (bytes of strings, or elements of lists).
type errTooLarge struct{ n int64 }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("unsupported: %d values (string bytes, list elements) in one row group's column; "+
		"relayout holds a row group's column as one Arrow array, whose 32-bit offsets reach %d", e.n, math.MaxInt32)
}

// overflows reports whether chunks of a type with 32-bit offsets (strings,
// binary, lists, at any depth, as hasInt32Offsets finds them) hold more
// values than one array of it can:
// arrow-go's Concatenate wraps the offsets around instead of failing. n is
// the count that does not fit.
func overflows(chunks []arrow.Array) (int64, bool) {
	if len(chunks) < 2 {
		return 0, false
	}
	var total int64
	var kids []arrow.Array
	switch chunks[0].DataType().ID() {
	case arrow.STRING, arrow.BINARY:
		for _, c := range chunks {
			if c.Len() > 0 {
				o := c.Data().Buffers()[1]
				offs := arrow.Int32Traits.CastFromBytes(o.Bytes())[c.Data().Offset():]
				total += int64(offs[c.Len()]) - int64(offs[0])
			}
		}
	case arrow.LIST, arrow.MAP, arrow.LARGE_LIST, arrow.FIXED_SIZE_LIST:
		// Only LIST and MAP offsets are 32-bit; the elements of any list
		// are checked below them.
		narrow := chunks[0].DataType().ID() == arrow.LIST || chunks[0].DataType().ID() == arrow.MAP
		for _, c := range chunks {
			l := c.(array.ListLike)
			if c.Len() > 0 {
				start, _ := l.ValueOffsets(0)
				_, end := l.ValueOffsets(c.Len() - 1)
				if narrow {
					total += end - start
				}
				kids = append(kids, array.NewSlice(l.ListValues(), start, end))
			}
		}
		defer func() {
			for _, k := range kids {
				k.Release()
			}
		}()
	case arrow.STRUCT:
		for i := range chunks[0].(*array.Struct).NumField() {
			var fs []arrow.Array
			for _, c := range chunks {
				fs = append(fs, c.(*array.Struct).Field(i))
			}
			if n, ok := overflows(fs); ok {
				return n, true
			}
		}
		return 0, false
	default:
		return 0, false
	}
	if total > math.MaxInt32 {
		return total, true
	}
	if kids != nil {
		return overflows(kids)
	}
	return 0, false
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

// Follows reports whether r's rows come right after prev's in the input.
func (r RowGroupRef) Follows(prev RowGroupRef) bool { return r.Offset() == prev.Offset()+prev.Rows() }

// RowsOf returns each row group's rows.
func RowsOf(refs []RowGroupRef) []int64 {
	rows := make([]int64, len(refs))
	for i, r := range refs {
		rows[i] = r.Rows()
	}
	return rows
}

// Read reads the given table columns (nil: all) of the row group as a record
// whose schema is the table's schema restricted to those columns, decoding
// columns on up to `parallel` goroutines.
func (t *Table) Read(ctx context.Context, ref RowGroupRef, cols []int, parallel int) (arrow.RecordBatch, error) {
	recs, err := t.ReadRowGroups(ctx, []RowGroupRef{ref}, cols, parallel)
	if err != nil {
		return nil, err
	}
	return recs[0], nil
}

// ReadRowGroups reads the given columns (nil: all) of each row group, as
// Read does, with every column chunk a task for up to `parallel`
// goroutines (Readers(parallel) where files are in an object store): a
// few large row groups keep every goroutine busy (four row groups of
// 250,000 rows on two cores left one idle when row groups were the tasks).
// On error nothing is returned and nothing is held.
func (t *Table) ReadRowGroups(ctx context.Context, refs []RowGroupRef, cols []int, parallel int) ([]arrow.RecordBatch, error) {
	if cols == nil {
		cols = make([]int, t.Schema.NumFields())
		for i := range cols {
			cols[i] = i
		}
	}
	arrs := make([]arrow.Array, len(refs)*len(cols))
	readers := t.Readers(parallel)
	var err error
	for from := 0; from < len(refs) && err == nil; {
		to, files := len(refs), []*File(nil)
		if t.remote {
			to, files = spanFiles(refs, from, readers)
		}
		err = t.readSpan(ctx, refs, cols, from, to, files, readers, arrs)
		from = to
	}
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
	recs := make([]arrow.RecordBatch, len(refs))
	for i, ref := range refs {
		rg := arrs[i*len(cols) : (i+1)*len(cols)]
		recs[i] = array.NewRecordBatch(sc, rg, ref.Rows())
		for _, a := range rg {
			a.Release()
		}
	}
	return recs, nil
}

// ReadSliced reads the given columns (nil: all) of one row group as
// consecutive records of sliceRows rows each, the last holding the rest,
// columns decoded on up to parallel goroutines (File.ReadColumnSlices): a
// large row group held in slices takes its decoded bytes, not the slack of
// one array per column. On error nothing is returned and nothing is held.
func (t *Table) ReadSliced(ctx context.Context, ref RowGroupRef, cols []int, parallel int, sliceRows int64) ([]arrow.RecordBatch, error) {
	return t.ReadSlicedHead(ctx, ref, cols, parallel, sliceRows, ref.Rows())
}

// ReadSlicedHead is ReadSliced of the row group's first headRows rows
// (File.ReadColumnHead): the plan's encoding sample of a row group too
// large to decode whole within --memory-limit.
func (t *Table) ReadSlicedHead(ctx context.Context, ref RowGroupRef, cols []int, parallel int, sliceRows, headRows int64) ([]arrow.RecordBatch, error) {
	if cols == nil {
		cols = make([]int, t.Schema.NumFields())
		for i := range cols {
			cols[i] = i
		}
	}
	byCol := make([][]arrow.Array, len(cols))
	release := func() {
		for _, as := range byCol {
			for _, a := range as {
				a.Release()
			}
		}
	}
	err := par.ForEach(ctx, len(cols), parallel, func(k int) error {
		var err error
		byCol[k], err = ref.File.ReadColumnHead(ctx, ref.RowGroup, cols[k], sliceRows, headRows)
		return err
	})
	if err != nil {
		release()
		return nil, err
	}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = t.Schema.Field(c)
	}
	sc := arrow.NewSchema(fields, nil)
	n := len(byCol[0])
	recs := make([]arrow.RecordBatch, n)
	for s := 0; s < n; s++ {
		arrs := make([]arrow.Array, len(cols))
		for k := range cols {
			if len(byCol[k]) != n || byCol[k][s].Len() != byCol[0][s].Len() {
				for _, r := range recs[:s] {
					r.Release()
				}
				release()
				return nil, fmt.Errorf("internal: %s: row group %d read in slices that do not line up", ref.File.Obj.URL, ref.RowGroup)
			}
			arrs[k] = byCol[k][s]
		}
		recs[s] = array.NewRecordBatch(sc, arrs, int64(byCol[0][s].Len()))
	}
	release()
	return recs, nil
}

// spanFiles returns the end of the refs from `from` that lie in at most
// n files, and those files.
func spanFiles(refs []RowGroupRef, from, n int) (int, []*File) {
	var files []*File
	for i := from; i < len(refs); i++ {
		if i == from || refs[i].File != refs[i-1].File {
			if len(files) == n {
				return i, files
			}
			files = append(files, refs[i].File)
		}
	}
	return len(refs), files
}

// readSpan reads cols of refs[from:to] into arrs. files, an object store's
// files of the span, are opened first, all at once, and held until the
// span is read: the column reads of one file wait on its open, so with the
// tasks in file order the files of many small ones were opened one at a
// time (10,000 files of 20 rows, 5 ms a request: the read took 66 s).
func (t *Table) readSpan(ctx context.Context, refs []RowGroupRef, cols []int, from, to int, files []*File, readers int, arrs []arrow.Array) error {
	if len(files) > 0 {
		held := make([]bool, len(files))
		defer func() {
			for i, f := range files {
				if held[i] {
					t.release(f)
				}
			}
		}()
		err := par.ForEach(ctx, len(files), readers, func(i int) error {
			if _, err := t.acquire(files[i]); err != nil {
				return err
			}
			held[i] = true
			return nil
		})
		if err != nil {
			return err
		}
	}
	n := len(cols)
	return par.ForEach(ctx, (to-from)*n, readers, func(k int) error {
		ref := refs[from+k/n]
		var err error
		arrs[from*n+k], err = ref.File.ReadColumn(ctx, ref.RowGroup, cols[k%n])
		return err
	})
}

// Allocator returns the allocator used for decoded data.
func (t *Table) Allocator() memory.Allocator { return t.mem }

// Head reads the first n rows (at most) of row group rg, every column, in
// the table's column order. It streams pages rather than whole column chunks,
// so it reads roughly the bytes of the pages those rows lie in (plus each
// column's dictionary page): the way to sample a table without reading it.
func (t *Table) Head(ctx context.Context, ref RowGroupRef, n int64) (rec arrow.RecordBatch, err error) {
	f := ref.File
	what := fmt.Sprintf("sample %s: row group %d", f.Obj.URL, ref.RowGroup)
	defer errs.Recover(&err, what)
	n = min(n, ref.Rows())
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.BufferedStreamEnabled = true
	props.BufferSize = 64 << 10
	h, err := t.acquire(f)
	if err != nil {
		return nil, err
	}
	defer t.release(f)
	setPageLimits(props, h.pq.MetaData(), f.Obj.Size)
	pq, err := file.NewParquetReader(h.ra, file.WithReadProps(props), file.WithMetadata(h.pq.MetaData()))
	if err != nil {
		return nil, classify(err, what)
	}
	fr, err := pqarrow.NewFileReader(pq, pqarrow.ArrowReadProperties{BatchSize: max(n, 1)}, t.mem)
	if err != nil {
		return nil, classify(err, what)
	}
	rr, err := fr.GetRecordReader(ctx, nil, []int{ref.RowGroup})
	if err != nil {
		return nil, classify(err, what)
	}
	defer rr.Release()
	if n == 0 || !rr.Next() {
		if err := rr.Err(); err != nil && err != io.EOF {
			return nil, classify(err, what)
		}
		cols := emptyColumns(t.Schema)
		rec := array.NewRecordBatch(t.Schema, cols, 0)
		for _, c := range cols {
			c.Release()
		}
		return rec, nil
	}
	got := rr.RecordBatch()
	arrs := make([]arrow.Array, t.Schema.NumFields())
	var consts []arrow.Array
	defer func() {
		for _, a := range consts {
			a.Release()
		}
	}()
	for i := range arrs {
		if f.colMap[i] < 0 {
			c, err := f.partitionColumn(i, int(got.NumRows()))
			if err != nil {
				return nil, err
			}
			consts = append(consts, c)
			arrs[i] = c
			continue
		}
		arrs[i] = got.Column(f.colMap[i])
		if t.partCol != nil && t.partCol[i] >= 0 {
			if err := f.checkPartition(arrs[i], i, what); err != nil {
				return nil, err
			}
		}
	}
	rows := min(got.NumRows(), n)
	out := array.NewRecordBatch(t.Schema, arrs, got.NumRows())
	if rows < got.NumRows() {
		s := out.NewSlice(0, rows)
		out.Release()
		out = s
	}
	return out, nil
}

func emptyColumns(s *arrow.Schema) []arrow.Array {
	arrs := make([]arrow.Array, s.NumFields())
	for i, f := range s.Fields() {
		arrs[i] = array.MakeArrayOfNull(memory.DefaultAllocator, f.Type, 0)
	}
	return arrs
}
