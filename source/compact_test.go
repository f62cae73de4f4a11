package source

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
)

// TestReadColumnKeepsOnlyItsBytes: a decoded column holds backing arrays
// of about its own size. arrow-go's readers left a row group of 65,536
// rows in arrays of twice that (every fixed-width column of such a file),
// and strings and lists in arrays grown by doubling; the collector keeps a
// whole backing array alive for a slice of it, so the 1M-row log held in
// memory took 440 MB of heap for 305 MB of columns. The values must be the
// ones arrow-go decodes (read again without relayout's reader).
func TestReadColumnKeepsOnlyItsBytes(t *testing.T) {
	const rgRows = 65536
	ctx := context.Background()
	tbl, want := openPow2(t, 3*rgRows, rgRows)

	checked := 0
	for rg := range tbl.Files[0].RowGroupRows {
		for col := 0; col < tbl.Schema.NumFields(); col++ {
			got, err := tbl.Files[0].ReadColumn(ctx, rg, col)
			if err != nil {
				t.Fatal(err)
			}
			name := tbl.Schema.Field(col).Name
			checked += checkBacking(t, fmt.Sprintf("row group %d, column %s", rg, name), got.Data())
			w := array.NewSlice(want.Column(col), int64(rg*rgRows), int64((rg+1)*rgRows))
			if !array.Equal(got, w) {
				t.Errorf("row group %d, column %s: values differ from arrow-go's own read", rg, name)
			}
			w.Release()
			got.Release()
		}
	}
	if checked < 3*8 {
		t.Fatalf("only %d buffers of at least %d bytes were checked; the file does not exercise the readers' growth", checked, minCompact)
	}
}

// checkBacking fails when a buffer of at least minCompact bytes of d (or
// of its children) sits in a backing array over a quarter larger, and
// returns how many such buffers it checked.
func checkBacking(t *testing.T, what string, d arrow.ArrayData) int {
	t.Helper()
	n := 0
	for i, b := range d.Buffers() {
		if b == nil || b.Len() < minCompact {
			continue
		}
		n++
		if c := cap(b.Buf()); c > b.Len()+b.Len()/4 {
			t.Errorf("%s: buffer %d holds %d bytes in a backing array of %d", what, i, b.Len(), c)
		}
	}
	for _, ch := range d.Children() {
		n += checkBacking(t, what, ch)
	}
	return n
}

// writePow2File writes, with arrow-go, rows in row groups of rgRows:
// required and nullable fixed-width columns, strings, and lists.
func writePow2File(t *testing.T, path string, rows, rgRows int) {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "emb", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	mem := memory.NewGoAllocator()
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	id := b.Field(0).(*array.Int64Builder)
	score := b.Field(1).(*array.Float32Builder)
	day := b.Field(2).(*array.Date32Builder)
	name := b.Field(3).(*array.StringBuilder)
	emb := b.Field(4).(*array.ListBuilder)
	embv := emb.ValueBuilder().(*array.Float32Builder)
	tags := b.Field(5).(*array.ListBuilder)
	tagv := tags.ValueBuilder().(*array.StringBuilder)
	for i := 0; i < rows; i++ {
		id.Append(int64(i) * 7919)
		if i%11 == 0 {
			score.AppendNull()
		} else {
			score.Append(float32(i%1000) / 3)
		}
		day.Append(arrow.Date32(19000 + i%400))
		if i%13 == 0 {
			name.AppendNull()
		} else {
			name.Append(fmt.Sprintf("user-%07d", i*31%1000003))
		}
		emb.Append(true)
		for k := 0; k < 4; k++ {
			embv.Append(float32(i*4+k) / 7)
		}
		if i%17 == 0 {
			tags.AppendNull()
		} else {
			tags.Append(true)
			for k := 0; k < i%3+1; k++ {
				tagv.Append(fmt.Sprintf("tag-%d", (i+k)%5000))
			}
		}
	}
	testutil.WriteArrow(t, path, b.NewRecordBatch(), parquet.WithMaxRowGroupLength(int64(rgRows)),
		parquet.WithCompression(compress.Codecs.Zstd), parquet.WithDictionaryDefault(false), parquet.WithDictionaryFor("tags.list.element", true))
}

// readPlain reads path whole with arrow-go alone, into one record.
func readPlain(t *testing.T, path string) arrow.RecordBatch {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1 << 20}, memory.NewGoAllocator())
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	cols := make([]arrow.Array, tbl.NumCols())
	for i := range cols {
		c, err := concat(tbl.Column(i).Data())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		cols[i] = c
	}
	return array.NewRecordBatch(tbl.Schema(), cols, tbl.NumRows())
}

// TestReadSlicedEqualsRead: a row group read in slices (ReadSliced) is, slice
// by slice, the rows arrow-go decodes for it, every column, the last slice
// holding the rest, each slice's buffers of about its own size.
func TestReadSlicedEqualsRead(t *testing.T) {
	const rgRows = 65536
	ctx := context.Background()
	tbl, want := openPow2(t, 2*rgRows, rgRows)
	for _, ref := range tbl.RowGroups() {
		for _, slice := range []int64{10_000, rgRows, 3 * rgRows} {
			recs, err := tbl.ReadSliced(ctx, ref, nil, 2, slice)
			if err != nil {
				t.Fatal(err)
			}
			if n := (rgRows + min(slice, rgRows) - 1) / min(slice, rgRows); int64(len(recs)) != n {
				t.Fatalf("slices of %d rows: %d records, want %d", slice, len(recs), n)
			}
			from := ref.Offset()
			for i, rec := range recs {
				if rec.NumCols() != int64(tbl.Schema.NumFields()) || (i < len(recs)-1 && rec.NumRows() != slice) {
					t.Fatalf("slice %d: %d columns, %d rows", i, rec.NumCols(), rec.NumRows())
				}
				for c := 0; c < int(rec.NumCols()); c++ {
					w := array.NewSlice(want.Column(c), from, from+rec.NumRows())
					if !array.Equal(rec.Column(c), w) {
						t.Errorf("row group %d, slices of %d, slice %d, column %s: values differ from arrow-go's own read", ref.RowGroup, slice, i, tbl.Schema.Field(c).Name)
					}
					w.Release()
					checkBacking(t, fmt.Sprintf("slice %d, column %d", i, c), rec.Column(c).Data())
				}
				from += rec.NumRows()
				rec.Release()
			}
			if from != ref.Offset()+ref.Rows() {
				t.Fatalf("slices of %d rows hold %d rows, the row group %d", slice, from-ref.Offset(), ref.Rows())
			}
		}
	}
}

// TestReadSlicedHead: the head of a row group read in slices is its first
// rows, in slices of the size asked for, the last cut at the head's end.
func TestReadSlicedHead(t *testing.T) {
	const rgRows = 65536
	ctx := context.Background()
	tbl, want := openPow2(t, 2*rgRows, rgRows)
	ref := tbl.RowGroups()[1]
	for _, tc := range []struct{ slice, head int64 }{{10_000, 25_000}, {10_000, 30_000}, {4096, 1}, {10_000, 3 * rgRows}} {
		recs, err := tbl.ReadSlicedHead(ctx, ref, nil, 2, tc.slice, tc.head)
		if err != nil {
			t.Fatal(err)
		}
		head := min(tc.head, rgRows)
		if n := (head + tc.slice - 1) / tc.slice; int64(len(recs)) != n {
			t.Fatalf("head %d in slices of %d: %d records, want %d", tc.head, tc.slice, len(recs), n)
		}
		from := ref.Offset()
		for i, rec := range recs {
			if i < len(recs)-1 && rec.NumRows() != tc.slice {
				t.Fatalf("slice %d of head %d: %d rows", i, tc.head, rec.NumRows())
			}
			for c := 0; c < int(rec.NumCols()); c++ {
				w := array.NewSlice(want.Column(c), from, from+rec.NumRows())
				if !array.Equal(rec.Column(c), w) {
					t.Errorf("head %d, slice %d, column %s: values differ from arrow-go's own read", tc.head, i, tbl.Schema.Field(c).Name)
				}
				w.Release()
			}
			from += rec.NumRows()
			rec.Release()
		}
		if from-ref.Offset() != head {
			t.Fatalf("head %d: %d rows read", tc.head, from-ref.Offset())
		}
	}
}

// openPow2 writes a file of rows rows in row groups of rgRows (writePow2File)
// and opens it as a compacting table; want is arrow-go's own read of it.
// Both are released when the test ends.
func openPow2(t *testing.T, rows, rgRows int) (tbl *Table, want arrow.RecordBatch) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pow2.parquet")
	writePow2File(t, path, rows, rgRows)
	ctx := context.Background()
	objs, err := storage.List(ctx, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err = Open(ctx, objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	tbl.Compact = true
	want = readPlain(t, path)
	t.Cleanup(want.Release)
	return tbl, want
}
