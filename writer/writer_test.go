package writer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	apq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/cespare/xxhash/v2"
	"github.com/parquet-go/parquet-go"

	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
)

// rows builds n rows (id int64, name string, score float32 nullable) with
// ids from first.
func rows(t *testing.T, first, n int) arrow.RecordBatch {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := first; i < first+n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("n-%d", i%7))
		if i%5 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float32Builder).Append(float32(i) / 2)
		}
	}
	return b.NewRecordBatch()
}

func outDir(t *testing.T) (storage.Location, string) {
	t.Helper()
	dir := t.TempDir()
	out, err := storage.OpenDir(context.Background(), dir, true)
	if err != nil {
		t.Fatal(err)
	}
	return out, dir
}

type idRow struct {
	ID    int64    `parquet:"id"`
	Name  string   `parquet:"name"`
	Score *float32 `parquet:"score,optional"`
}

// TestParquetCutsExactlyWhereTheLayoutSays writes 9 rows in records that
// straddle the planned cuts and reads the files back with parquet-go (an
// independent reader): the files and row groups are the layout's, the
// values are the rows in order, and the returned manifest entries match
// the bytes on disk (size, xxhash64, row-group byte ranges, first rows).
func TestParquetCutsExactlyWhereTheLayoutSays(t *testing.T) {
	out, dir := outDir(t)
	first := rows(t, 0, 1)
	defer first.Release()
	layout := []FileLayout{{Start: 0, RowGroups: []int64{3, 2}}, {Start: 5, RowGroups: []int64{4}}}
	w, err := NewParquet(context.Background(), out, first.Schema(), layout, ParquetOptions{Sample: first, SortingColumns: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	var sink Sink = w
	for _, part := range [][2]int{{0, 2}, {2, 6}, {8, 1}} { // records crossing both cuts
		rec := rows(t, part[0], part[1])
		if err := sink.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	got, err := sink.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 2 || len(got.Shards) != 0 {
		t.Fatalf("wrote %d files, %d shards", len(got.Files), len(got.Shards))
	}
	next := int64(0)
	for fi, mf := range got.Files {
		if mf.Path != FileName(fi) || mf.FirstRow != layout[fi].Start || mf.Rows != layout[fi].Rows() {
			t.Fatalf("file %d: %+v, layout %+v", fi, mf, layout[fi])
		}
		data, err := os.ReadFile(filepath.Join(dir, mf.Path))
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(data)) != mf.Bytes || fmt.Sprintf("%016x", xxhash.Sum64(data)) != mf.XXHash64 {
			t.Fatalf("%s: %d bytes, xxhash %016x; entry says %d, %s", mf.Path, len(data), xxhash.Sum64(data), mf.Bytes, mf.XXHash64)
		}
		pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if len(pf.RowGroups()) != len(layout[fi].RowGroups) {
			t.Fatalf("%s: %d row groups, layout %d", mf.Path, len(pf.RowGroups()), len(layout[fi].RowGroups))
		}
		var firstRow int64
		for gi, rg := range pf.RowGroups() {
			e := mf.RowGroups[gi]
			if rg.NumRows() != layout[fi].RowGroups[gi] || e.Rows != rg.NumRows() || e.FirstRow != firstRow {
				t.Fatalf("%s rg %d: %d rows (entry %+v), layout %d", mf.Path, gi, rg.NumRows(), e, layout[fi].RowGroups[gi])
			}
			firstRow += e.Rows
			md := pf.Metadata().RowGroups[gi]
			start := md.Columns[0].MetaData.DataPageOffset
			if d := md.Columns[0].MetaData.DictionaryPageOffset; d > 0 && d < start {
				start = d
			}
			if e.Offset != start || e.Offset+e.Length > int64(len(data)) {
				t.Fatalf("%s rg %d: range [%d,+%d), first page at %d", mf.Path, gi, e.Offset, e.Length, start)
			}
		}
		r := parquet.NewGenericReader[idRow](bytes.NewReader(data))
		buf := make([]idRow, 16)
		n, err := r.Read(buf)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		for _, row := range buf[:n] {
			want := next
			if row.ID != want || row.Name != fmt.Sprintf("n-%d", want%7) || (row.Score == nil) != (want%5 == 0) ||
				(row.Score != nil && *row.Score != float32(want)/2) {
				t.Fatalf("%s: row %+v, want id %d", mf.Path, row, want)
			}
			next++
		}
		if len(pf.Metadata().RowGroups[0].SortingColumns) != 1 {
			t.Errorf("%s: sorting_columns %v", mf.Path, pf.Metadata().RowGroups[0].SortingColumns)
		}
	}
	if next != 9 {
		t.Fatalf("read back %d rows, wrote 9", next)
	}
}

// TestParquetRefusesRowsOffTheLayout: more rows than planned, or fewer at
// Finish, is an error, not a silently different file.
func TestParquetRefusesRowsOffTheLayout(t *testing.T) {
	out, _ := outDir(t)
	rec := rows(t, 0, 5)
	defer rec.Release()
	w, _ := NewParquet(context.Background(), out, rec.Schema(), []FileLayout{{RowGroups: []int64{4}}}, ParquetOptions{})
	if err := w.Write(rec); err == nil {
		t.Fatal("5 rows into a 4-row layout: no error")
	}
	w.Abort()
	w, _ = NewParquet(context.Background(), out, rec.Schema(), []FileLayout{{RowGroups: []int64{6}}}, ParquetOptions{})
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(); err == nil {
		t.Fatal("5 rows into a 6-row layout finished without error")
	}
}

// TestAbortLeavesNothingVisible: a file being written when the sink is
// aborted never appears, so a failed run leaves no partial Parquet file.
func TestAbortLeavesNothingVisible(t *testing.T) {
	out, dir := outDir(t)
	rec := rows(t, 0, 3)
	defer rec.Release()
	w, _ := NewParquet(context.Background(), out, rec.Schema(), []FileLayout{{RowGroups: []int64{3}}, {Start: 3, RowGroups: []int64{3}}}, ParquetOptions{})
	if err := w.Write(rec); err != nil { // file 0 full, still open
		t.Fatal(err)
	}
	w.Abort()
	var files []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Fatalf("an aborted sink left %v", files)
	}
}

// TestTeeWritesParquetAndShards: a Tee hands every record to each sink, in
// order, and Finish returns the files and the shards; in manual mode the
// caller's EndRowGroup cuts.
func TestTeeWritesParquetAndShards(t *testing.T) {
	out, dir := outDir(t)
	rec := rows(t, 0, 10)
	defer rec.Release()
	p, err := tensors.NewPlan(rec.Schema(), false, &tensors.Spec{Drop: []string{"name"}}, tensors.NewProfile())
	if err != nil {
		t.Fatal(err)
	}
	pw, err := NewParquet(context.Background(), out, rec.Schema(), nil, ParquetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sink := Tee{pw, NewTensors(context.Background(), out, p, TensorOptions{ShardBytes: 64})}
	for _, part := range [][2]int64{{0, 4}, {4, 10}} {
		s := rec.NewSlice(part[0], part[1])
		if err := sink.Write(s); err != nil {
			t.Fatal(err)
		}
		s.Release()
		if err := sink.EndRowGroup(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := sink.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != 1 || len(got.Files[0].RowGroups) != 2 || got.Files[0].RowGroups[0].Rows != 4 {
		t.Fatalf("files %+v", got.Files)
	}
	var rowsInShards int64
	for i, s := range got.Shards {
		if s.FirstRow != rowsInShards || s.Path != ShardName(0, i) {
			t.Fatalf("shard %d: %+v", i, s.Shard)
		}
		data, err := os.ReadFile(filepath.Join(dir, s.Path))
		if err != nil || int64(len(data)) != s.Bytes || fmt.Sprintf("%016x", xxhash.Sum64(data)) != s.XXHash64 {
			t.Fatalf("shard %s: %d bytes (%v), entry %d %s", s.Path, len(data), err, s.Bytes, s.XXHash64)
		}
		var sum int64
		for _, b := range s.TensorBytes {
			sum += b
		}
		if s.HeaderBytes+sum != s.Bytes {
			t.Fatalf("shard %s: header %d + tensors %d != %d bytes", s.Path, s.HeaderBytes, sum, s.Bytes)
		}
		rowsInShards += s.Rows
	}
	if len(got.Shards) < 2 || rowsInShards != 10 {
		t.Fatalf("%d shards with %d rows; want several (64-byte target) with 10", len(got.Shards), rowsInShards)
	}
}

// TestHiveRefusesRowsOffTheirFolder: a file in a Hive folder takes only
// rows whose folder columns hold the folder's values; a row that differs
// in a string, a date or an integer column is refused, naming the column
// and both values, whichever row it is (the check's fast path compares
// raw values).
func TestHiveRefusesRowsOffTheirFolder(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "k", Type: arrow.BinaryTypes.String},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	record := func(k []string, d []arrow.Date32, n []int64) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		b.Field(0).(*array.StringBuilder).AppendValues(k, nil)
		b.Field(1).(*array.Date32Builder).AppendValues(d, nil)
		b.Field(2).(*array.Int64Builder).AppendValues(n, nil)
		b.Field(3).(*array.Int64Builder).AppendValues([]int64{1, 2, 3, 4}, nil)
		return b.NewRecordBatch()
	}
	ks, ds, ns := []string{"a", "a", "a", "a"}, []arrow.Date32{20000, 20000, 20000, 20000}, []int64{7, 7, 7, 7}
	for _, c := range []struct {
		name string
		rec  arrow.RecordBatch
		want string // "" : accepted
	}{
		{"one folder", record(ks, ds, ns), ""},
		{"a string off", record([]string{"a", "a", "a", "b"}, ds, ns), "k=b"},
		{"a date off", record(ks, []arrow.Date32{20000, 20000, 20001, 20000}, ns), "d=2024-10-05"},
		{"an integer off", record(ks, ds, []int64{7, 8, 7, 7}), "n=8"},
	} {
		out, _ := outDir(t)
		w, err := NewParquet(context.Background(), out, sc, []FileLayout{{RowGroups: []int64{4}}}, ParquetOptions{HiveColumns: []string{"k", "d", "n"}})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Write(c.rec)
		c.rec.Release()
		if c.want == "" {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if _, err := w.Finish(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "holds "+c.want) {
			t.Fatalf("%s: %v, want a refusal naming %s", c.name, err, c.want)
		}
		w.Abort()
	}
	// A later batch whose rows all agree with each other, not with the
	// folder its file's first row named.
	for col, later := range map[string]arrow.RecordBatch{
		"k=b":          record([]string{"b", "b", "b", "b"}, ds, ns),
		"d=2024-10-05": record(ks, []arrow.Date32{20001, 20001, 20001, 20001}, ns),
		"n=8":          record(ks, ds, []int64{8, 8, 8, 8}),
	} {
		out, _ := outDir(t)
		w, err := NewParquet(context.Background(), out, sc, []FileLayout{{RowGroups: []int64{8}}}, ParquetOptions{HiveColumns: []string{"k", "d", "n"}})
		if err != nil {
			t.Fatal(err)
		}
		first := record(ks, ds, ns)
		if err := w.Write(first); err != nil {
			t.Fatal(err)
		}
		first.Release()
		err = w.Write(later)
		later.Release()
		if err == nil || !strings.Contains(err.Error(), "holds "+col) {
			t.Fatalf("a later batch of %s: %v", col, err)
		}
		w.Abort()
	}
}

// TestLargeValuesCutPagesAtPageBytes: a column of 200 KB values is written
// in pages near --page-bytes, not 1,024 values a page (arrow-go checks a
// page's size only between batches of its WriteBatchSize: 1,024 images of
// 1 MB made one page of a whole row group). The page sizes come from
// parquet-go's reading of the offset index, and the values from
// arrow-go's read of the file.
func TestLargeValuesCutPagesAtPageBytes(t *testing.T) {
	const n, size = 300, 200 << 10
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "image", Type: arrow.BinaryTypes.Binary},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(i*31 + j*7 + j>>9) // little for zstd to find
		}
		b.Field(1).(*array.BinaryBuilder).Append(v)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	const pageBytes = 1 << 20
	out, dir := outDir(t)
	w, err := NewParquet(context.Background(), out, schema, []FileLayout{{RowGroups: []int64{n}}}, ParquetOptions{Sample: rec, PageBytes: pageBytes})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	got, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, got.Files[0].Path))
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	locs := f.OffsetIndexes()[1].PageLocations // row group 0, column image
	var most int64
	for _, l := range locs {
		most = max(most, int64(l.CompressedPageSize))
	}
	// Values of 200 KB fill a 1 MiB page in 5 and close it at the sixth.
	if most > 2*pageBytes || len(locs) < n*size/(2*pageBytes) {
		t.Fatalf("%d pages of %d KB values, the largest %d bytes stored; want pages of at most %d bytes", len(locs), size>>10, most, 2*pageBytes)
	}
	requireSameRows(t, rec, readArrowGo(t, data))
}

// TestWideSampleIsBounded: the sample of a wide table keeps the rows that
// hold about SampleBytes, trimming it again keeps them all, and the
// encodings chosen from the trimmed sample are those chosen from the whole.
func TestWideSampleIsBounded(t *testing.T) {
	const cols, n = 300, 20000 // 24 MB of float64
	fields := make([]arrow.Field, cols)
	arrs := make([]arrow.Array, cols)
	for c := range fields {
		fields[c] = arrow.Field{Name: fmt.Sprintf("c%d", c), Type: arrow.PrimitiveTypes.Float64}
		b := array.NewFloat64Builder(memory.DefaultAllocator)
		for i := 0; i < n; i++ {
			if c%3 == 0 {
				b.Append(float64(i % 5)) // few values: a dictionary
			} else {
				b.Append(float64(i*cols+c) / 7)
			}
		}
		arrs[c] = b.NewArray()
		b.Release()
	}
	sample := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrs, n)
	for _, a := range arrs {
		a.Release()
	}
	defer sample.Release()
	rows := SampleRowsOf(sample)
	if want := int64(SampleBytes / (cols * 8)); rows < want*9/10 || rows > want {
		t.Fatalf("a sample of %d rows of %d bytes keeps %d rows, want about %d", n, cols*8, rows, want)
	}
	trimmed, err := TrimSample(sample, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer trimmed.Release()
	if trimmed.NumRows() != rows || SampleRowsOf(trimmed) != rows {
		t.Fatalf("trimmed to %d rows, which keep %d; want %d", trimmed.NumRows(), SampleRowsOf(trimmed), rows)
	}
	pqs, err := pqarrow.ToParquet(sample.Schema(), apq.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	a, av := chooseEncodings(sample, pqs)
	b, bv := chooseEncodings(trimmed, pqs)
	pa, pb := apq.NewWriterProperties(a...), apq.NewWriterProperties(b...)
	for c := 0; c < cols; c++ {
		p := pqs.Column(c).ColumnPath()
		if pa.DictionaryEnabledFor(p.String()) != pb.DictionaryEnabledFor(p.String()) || pa.EncodingFor(p.String()) != pb.EncodingFor(p.String()) {
			t.Fatalf("column %s: encodings differ between the sample and its trimmed copy", p)
		}
		if wantDict := c%3 == 0; pa.DictionaryEnabledFor(p.String()) != wantDict {
			t.Fatalf("column %s: dictionary %v, want %v", p, pa.DictionaryEnabledFor(p.String()), wantDict)
		}
	}
	if av != bv {
		t.Fatalf("value bytes %v from the sample, %v trimmed", av, bv)
	}
}
