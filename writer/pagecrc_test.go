package writer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	apq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

// crcRows builds n rows for the page CRC tests: scalars, a dictionary
// string, a nullable float, a list (the parallel path's shapes) and, with
// nested, a struct column (which takes arrow-go's sequential writer).
func crcRows(t *testing.T, n int, nested bool) arrow.RecordBatch {
	t.Helper()
	fields := []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "country", Type: arrow.BinaryTypes.String},
		{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}
	if nested {
		fields = append(fields, arrow.Field{Name: "meta", Nullable: true, Type: arrow.StructOf(
			arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32},
			arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true})})
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	countries := []string{"US", "DE", "FR", "JP", "BR", "IN"}
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i) * 7919)
		b.Field(1).(*array.StringBuilder).Append(countries[(i*i)%len(countries)])
		if i%9 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float32Builder).Append(float32(i%1000) / 3)
		}
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		for k := 0; k < i%4; k++ {
			lb.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
		}
		if nested {
			sb := b.Field(4).(*array.StructBuilder)
			if i%11 == 0 {
				sb.AppendNull()
				continue
			}
			sb.Append(true)
			sb.FieldBuilder(0).(*array.Int32Builder).Append(int32(i % 300))
			if i%3 == 0 {
				sb.FieldBuilder(1).AppendNull()
			} else {
				sb.FieldBuilder(1).(*array.StringBuilder).Append(fmt.Sprintf("b%d", i%50))
			}
		}
	}
	return b.NewRecordBatch()
}

// writeCRCOutput writes rec through the Parquet sink in small pages, two
// files of several row groups, and returns the files' paths.
func writeCRCOutput(t *testing.T, rec arrow.RecordBatch) []string {
	t.Helper()
	n := rec.NumRows()
	layout := []FileLayout{{Start: 0, RowGroups: []int64{n / 3, n / 3}}, {Start: 2 * (n / 3), RowGroups: []int64{n - 2*(n/3)}}}
	dir, written := writeRecord(t, rec, layout, ParquetOptions{Sample: rec, PageBytes: 4 << 10, DictionaryPageBytes: 64 << 10, SortingColumns: []string{"id"}})
	var paths []string
	for _, f := range written.Files {
		p := filepath.Join(dir, f.Path)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != f.Bytes {
			t.Fatalf("%s: %d bytes, the sink says %d", f.Path, st.Size(), f.Bytes)
		}
		paths = append(paths, p)
	}
	return paths
}

// writeRecord writes rec through the Parquet sink with the given layout and
// options into a new folder, and returns the folder and what was written.
func writeRecord(t *testing.T, rec arrow.RecordBatch, layout []FileLayout, opts ParquetOptions) (string, Written) {
	t.Helper()
	out, dir := outDir(t)
	w, err := NewParquet(context.Background(), out, rec.Schema(), layout, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	written, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return dir, written
}

// pageAt decodes the page header at off with parquet-go's Thrift codec.
func pageAt(t *testing.T, b []byte, off int64) (format.PageHeader, int) {
	t.Helper()
	var proto thrift.CompactProtocol
	var h format.PageHeader
	rd := proto.NewReaderFromBytes(b[off:])
	if err := thrift.NewDecoder(rd).Decode(&h); err != nil {
		t.Fatalf("page header at %d: %v", off, err)
	}
	return h, rd.BytesRead()
}

// TestPageCRCsInEveryPage writes the parallel and the sequential writer's
// shapes and checks the files with parquet-go, not with relayout's own
// rewrite: every page, dictionary pages included, carries the CRC32 of its
// bytes; the offset index points at every data page with its size, header
// included; each chunk's compressed size is its pages'. Then parquet-go
// (which checks page CRCs) and arrow-go read back exactly the rows written.
func TestPageCRCsInEveryPage(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(fmt.Sprintf("nested=%v", nested), func(t *testing.T) {
			rec := crcRows(t, 30000, nested)
			defer rec.Release()
			var got []arrow.RecordBatch
			for _, p := range writeCRCOutput(t, rec) {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				f, pages, dicts := checkPageCRCs(t, b)
				if pages < 10 || dicts == 0 {
					t.Fatalf("%s: %d pages, %d dictionary pages: too few to test", p, pages, dicts)
				}
				// parquet-go reads every page (checking its CRC) ...
				if n := len(readAllParquetGo(t, f)); int64(n) != f.NumRows() {
					t.Fatalf("parquet-go read %d rows of %d", n, f.NumRows())
				}
				// ... and arrow-go reads the values.
				got = append(got, readArrowGo(t, b)...)
			}
			requireSameRows(t, rec, got)
		})
	}
}

// checkPageCRCs walks every page of the file b with parquet-go's Thrift
// codec, not relayout's rewrite: each page, dictionary pages included,
// carries the CRC32 of its bytes; the offset index points at every data
// page with its size, header included; each chunk's compressed size is its
// pages'. It returns the file and its page and dictionary page counts.
func checkPageCRCs(t *testing.T, b []byte) (*parquet.File, int, int) {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	oi := f.OffsetIndexes()
	md := f.Metadata()
	pages, dicts := 0, 0
	for rg, g := range md.RowGroups {
		for c, cc := range g.Columns {
			m := cc.MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			locs := oi[rg*len(g.Columns)+c].PageLocations
			li := 0
			for pos := start; pos < start+m.TotalCompressedSize; {
				h, n := pageAt(t, b, pos)
				body := b[pos+int64(n) : pos+int64(n)+int64(h.CompressedPageSize)]
				if h.CRC == 0 || uint32(h.CRC) != crc32.ChecksumIEEE(body) {
					t.Fatalf("row group %d column %d page at %d: CRC %08x, bytes %08x", rg, c, pos, uint32(h.CRC), crc32.ChecksumIEEE(body))
				}
				size := int64(n) + int64(h.CompressedPageSize)
				if h.Type == format.DictionaryPage {
					dicts++
				} else {
					if li >= len(locs) || locs[li].Offset != pos || int64(locs[li].CompressedPageSize) != size {
						t.Fatalf("row group %d column %d: page %d at %d+%d, offset index says %+v", rg, c, li, pos, size, locs[min(li, len(locs)-1)])
					}
					li++
				}
				pages++
				pos += size
			}
			if li != len(locs) {
				t.Fatalf("row group %d column %d: %d data pages, offset index lists %d", rg, c, li, len(locs))
			}
		}
	}
	return f, pages, dicts
}

// TestPageCRCsWithLongStatistics writes string columns whose min and max
// run to kilobytes (as JSON documents and WKT geometries do): arrow-go then
// lets 4 KiB fragments of each chunk's metadata into the byte stream
// between chunks. The file must still have every page's CRC, offsets that
// hold, and the rows written.
func TestPageCRCsWithLongStatistics(t *testing.T) {
	fields := []arrow.Field{
		{Name: "doc", Type: arrow.BinaryTypes.String},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "geom", Type: arrow.BinaryTypes.String, Nullable: true},
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer b.Release()
	for i := 0; i < 3000; i++ {
		b.Field(0).(*array.StringBuilder).Append(fmt.Sprintf("{\"k\": %d, \"pad\": %q}", i%97, strings.Repeat(string(rune('a'+i%26)), 2500+i%700)))
		b.Field(1).(*array.Int64Builder).Append(int64(i))
		if i%5 == 0 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append("POLYGON ((" + strings.Repeat(fmt.Sprintf("%d %d, ", i%13, i%17), 400+i%300) + "0 0))")
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var got []arrow.RecordBatch
	for _, p := range writeCRCOutput(t, rec) {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, pages, _ := checkPageCRCs(t, raw)
		if pages < 3 {
			t.Fatalf("%s: %d pages: too few to test", p, pages)
		}
		long := false
		for _, g := range f.Metadata().RowGroups {
			for _, cc := range g.Columns {
				long = long || len(cc.MetaData.Statistics.MinValue)+len(cc.MetaData.Statistics.MaxValue) > 4096
			}
		}
		if !long {
			t.Fatalf("%s: no chunk has statistics over 4 KiB: the test does not exercise the fragments", p)
		}
		if n := len(readAllParquetGo(t, f)); int64(n) != f.NumRows() {
			t.Fatalf("parquet-go read %d rows of %d", n, f.NumRows())
		}
		got = append(got, readArrowGo(t, raw)...)
	}
	requireSameRows(t, rec, got)
}

// readArrowGo reads a whole Parquet file's rows with arrow-go.
func readArrowGo(t *testing.T, b []byte) []arrow.RecordBatch {
	t.Helper()
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(b), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	tr := array.NewTableReader(tbl, 1<<20)
	defer tr.Release()
	var out []arrow.RecordBatch
	for tr.Next() {
		r := tr.RecordBatch()
		r.Retain()
		out = append(out, r)
	}
	return out
}

// requireSameRows requires got, read back in order, to be exactly rec's
// rows, and releases it.
func requireSameRows(t *testing.T, rec arrow.RecordBatch, got []arrow.RecordBatch) {
	t.Helper()
	var off int64
	for _, r := range got {
		want := rec.NewSlice(off, off+r.NumRows())
		for c := 0; c < int(r.NumCols()); c++ {
			if !array.Equal(r.Column(c), want.Column(c)) {
				t.Fatalf("rows %d+: column %s differs after the page CRC rewrite", off, r.ColumnName(c))
			}
		}
		off += r.NumRows()
		want.Release()
		r.Release()
	}
	if off != rec.NumRows() {
		t.Fatalf("read %d rows of %d", off, rec.NumRows())
	}
}

func readAllParquetGo(t *testing.T, f *parquet.File) []parquet.Row {
	t.Helper()
	var out []parquet.Row
	for _, rg := range f.RowGroups() {
		rows := rg.Rows()
		buf := make([]parquet.Row, 512)
		for {
			n, err := rows.ReadRows(buf)
			for _, r := range buf[:n] {
				out = append(out, r.Clone())
			}
			if err != nil {
				break
			}
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFlippedPageByteIsNamed flips one byte in every page body of a
// written file in turn: relayout's source names the row group, column and
// page, and parquet-go refuses the page too.
func TestFlippedPageByteIsNamed(t *testing.T) {
	rec := crcRows(t, 6000, false)
	defer rec.Release()
	p := writeCRCOutput(t, rec)[0]
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tried := 0
	for rg, g := range f.Metadata().RowGroups {
		for c, cc := range g.Columns {
			m := cc.MetaData
			start := m.DataPageOffset
			if m.DictionaryPageOffset > 0 && m.DictionaryPageOffset < start {
				start = m.DictionaryPageOffset
			}
			for page, pos := 0, start; pos < start+m.TotalCompressedSize; page++ {
				h, n := pageAt(t, b, pos)
				bad := bytes.Clone(b)
				at := pos + int64(n) + int64(h.CompressedPageSize)/2
				bad[at] ^= 0x10
				dp := filepath.Join(t.TempDir(), "bad.parquet")
				if err := os.WriteFile(dp, bad, 0o644); err != nil {
					t.Fatal(err)
				}
				_, err := source.CheckPages(ctx, storage.Object{URL: dp, LocalPath: dp, Size: int64(len(bad)), Loc: storage.Location{Local: filepath.Dir(dp)}, Key: "bad.parquet"})
				var pe *source.PageCRCError
				if !errors.As(err, &pe) || !errs.Is(err, errs.BadInput) {
					t.Fatalf("byte %d flipped (row group %d, column %d, page %d): %v", at, rg, c, page, err)
				}
				if pe.RowGroup != rg || pe.Column != strings.Join(cc.MetaData.PathInSchema, ".") || pe.Page != page {
					t.Fatalf("byte %d flipped in row group %d, column %v, page %d; reported %s", at, rg, cc.MetaData.PathInSchema, page, pe.Where())
				}
				pf, err := parquet.OpenFile(bytes.NewReader(bad), int64(len(bad)))
				if err == nil {
					func() {
						defer func() { recover() }()
						readAllParquetGoErr(pf, &err)
					}()
				}
				if err == nil {
					t.Fatalf("byte %d flipped in row group %d, column %d, page %d: parquet-go read it", at, rg, c, page)
				}
				tried++
				pos += int64(n) + int64(h.CompressedPageSize)
			}
		}
	}
	if tried < 10 {
		t.Fatalf("only %d pages", tried)
	}
}

func readAllParquetGoErr(f *parquet.File, errp *error) {
	for _, rg := range f.RowGroups() {
		rows := rg.Rows()
		buf := make([]parquet.Row, 512)
		for {
			_, err := rows.ReadRows(buf)
			if err != nil {
				if err.Error() != "EOF" {
					*errp = err
					rows.Close()
					return
				}
				break
			}
		}
		rows.Close()
	}
}

// TestPageCRCRewriteIgnoresWriteSizes feeds one arrow-go file through the
// rewrite whole, a byte at a time and in odd pieces: the bytes out are the
// same, and arrow-go's offsets (parsed back) hold in the result.
func TestPageCRCRewriteIgnoresWriteSizes(t *testing.T) {
	rec := crcRows(t, 5000, true)
	defer rec.Release()
	var plain bytes.Buffer
	props := apq.NewWriterProperties(apq.WithCompression(compress.Codecs.Zstd), apq.WithDataPageSize(2048), apq.WithPageIndexEnabled(true), apq.WithStats(true), apq.WithMaxRowGroupLength(1500))
	fw, err := pqarrow.NewFileWriter(rec.Schema(), &plain, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	src := plain.Bytes()
	var first []byte
	for _, piece := range []int{len(src), 1, 7, 4093} {
		var out bytes.Buffer
		c := newPageCRC(&out)
		for i := 0; i < len(src); i += piece {
			if _, err := c.Write(src[i:min(i+piece, len(src))]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Close(); err != nil {
			t.Fatalf("pieces of %d: %v", piece, err)
		}
		if first == nil {
			first = out.Bytes()
			if len(c.pages) < 20 {
				t.Fatalf("%d pages", len(c.pages))
			}
			if len(first) <= len(src) {
				t.Fatalf("%d bytes out, %d in", len(first), len(src))
			}
			tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(first), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
			if err != nil {
				t.Fatal(err)
			}
			if tbl.NumRows() != rec.NumRows() {
				t.Fatalf("%d rows", tbl.NumRows())
			}
			tbl.Release()
			continue
		}
		if !bytes.Equal(out.Bytes(), first) {
			t.Fatalf("pieces of %d bytes give other bytes than one write", piece)
		}
	}
}

// TestDictionaryFallbackFilesAreIdentical writes, eight times, rows whose
// string column outgrows its dictionary in every row group (arrow-go's
// default encodings, a 4 KiB dictionary limit), so that each column chunk
// has data pages of two encodings. arrow-go lists a chunk's encoding stats
// from a Go map, in a random order; the files must still be byte-identical.
// parquet-go confirms the fallback happened, so the test exercises it.
func TestDictionaryFallbackFilesAreIdentical(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "u", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	const n = 6000
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("value-%08d", i*7919%100003))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var first []byte
	for run := 0; run < 8; run++ {
		layout := []FileLayout{{Start: 0, RowGroups: []int64{n / 3, n / 3, n - 2*(n/3)}}}
		dir, written := writeRecord(t, rec, layout, ParquetOptions{PageBytes: 4 << 10, DictionaryPageBytes: 4 << 10})
		got, err := os.ReadFile(filepath.Join(dir, written.Files[0].Path))
		if err != nil {
			t.Fatal(err)
		}
		if run == 0 {
			first = got
			f, err := parquet.OpenFile(bytes.NewReader(got), int64(len(got)))
			if err != nil {
				t.Fatal(err)
			}
			for rg, g := range f.Metadata().RowGroups {
				data := map[format.Encoding]bool{}
				for _, s := range g.Columns[1].MetaData.EncodingStats {
					if s.PageType == format.DataPage {
						data[s.Encoding] = true
					}
				}
				if !data[format.RLEDictionary] || !data[format.Plain] {
					t.Fatalf("row group %d: column u's data pages are %v, want dictionary and plain (a fallback)", rg, data)
				}
			}
			continue
		}
		if !bytes.Equal(got, first) {
			t.Fatalf("write %d differs from the first (%d and %d bytes)", run, len(got), len(first))
		}
	}
}
