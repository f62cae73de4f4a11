package source

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/testutil"
)

// writeWithArrowSchema writes a two-column file whose footer stores
// value under ARROW:schema, and returns its path.
func writeWithArrowSchema(t *testing.T, value string) string {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	lb := b.Field(1).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.StringBuilder).Append("a")
	lb.Append(true)
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "in.parquet")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendKeyValueMetadata("ARROW:schema", value); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDamagedArrowSchemaIsBadInput: a footer's ARROW:schema whose field
// count was damaged made arrow-go allocate 2^28 fields (a fatal
// out-of-memory error, found by FuzzParquetInput); it is now bad input
// naming the file. The same schema undamaged is read.
func TestDamagedArrowSchemaIsBadInput(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
	good := flight.SerializeSchema(sc, memory.DefaultAllocator)
	p := writeWithArrowSchema(t, base64.StdEncoding.EncodeToString(good))
	if _, err := readSum(t, p); err != nil {
		t.Fatalf("the undamaged schema: %v", err)
	}
	// The schema's field count: arrow-go reads it as the number of fields.
	at := bytes.Index(good, []byte{2, 0, 0, 0}) // the only 2 in the message
	bad := bytes.Clone(good)
	binary.LittleEndian.PutUint32(bad[at:], 1)
	if s, err := flight.DeserializeSchema(bad, memory.DefaultAllocator); err != nil || s.NumFields() != 1 {
		t.Fatalf("byte %d is not the field count: %v, %v", at, s, err)
	}
	binary.LittleEndian.PutUint32(bad[at:], 1<<28)
	p = writeWithArrowSchema(t, base64.StdEncoding.EncodeToString(bad))
	_, err := readSum(t, p)
	if errs.ClassOf(err) != errs.BadInput || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "ARROW:schema") {
		t.Fatalf("%v (class %v), want bad input naming %s and its ARROW:schema", err, errs.ClassOf(err), p)
	}
}

// TestArrowSchemaIsPqarrows: the schema openFile takes from a file's
// manifest (arrowSchema) is the one pqarrow.FileReader.Schema returns,
// fields and metadata, for every readable Parquet file of the shared test
// data (apache/parquet-testing and DuckDB's files: nested, decimal, map,
// dictionary, time and timestamp types, with and without ARROW:schema) and
// one with a stored Arrow schema.
func TestArrowSchemaIsPqarrows(t *testing.T) {
	md := arrow.NewMetadata([]string{"origin"}, []string{"test"})
	stored := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, &md)
	paths := []string{writeWithArrowSchema(t, base64.StdEncoding.EncodeToString(flight.SerializeSchema(stored, memory.DefaultAllocator)))}
	for _, dir := range []string{"parquet-testing/data", "duckdb-parquet-testing"} {
		filepath.Walk(filepath.Join(testutil.DataDir(t), dir), func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".parquet") {
				paths = append(paths, p)
			}
			return nil
		})
	}
	compared := 0
	for _, p := range paths {
		func() {
			defer func() { recover() }() // a damaged test file: not this test's
			pq, err := file.OpenParquetFile(p, false)
			if err != nil {
				return
			}
			defer pq.Close()
			fr, err := pqarrow.NewFileReader(pq, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
			if err != nil {
				return
			}
			want, err := fr.Schema()
			if err != nil {
				return
			}
			if got := arrowSchema(fr.Manifest); !got.Equal(want) || !got.Metadata().Equal(want.Metadata()) {
				t.Errorf("%s: schema\n%v\nwant\n%v", p, got, want)
			}
			compared++
		}()
	}
	if compared < 100 {
		t.Fatalf("compared %d files' schemas; the shared test data has hundreds", compared)
	}
}
