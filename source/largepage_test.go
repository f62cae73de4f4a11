package source

import (
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/testutil"
)

// writeOnePage writes n values of 1 MiB (random, or zeros) as one binary
// column in a single data page, compressed with codec, and returns the
// path and the rows' fingerprint.
func writeOnePage(t *testing.T, n int, random bool, codec compress.Compression) (string, fingerprint.Sum) {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{{Name: "blob", Type: arrow.BinaryTypes.Binary}}, nil)
	bld := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
	defer bld.Release()
	r := rand.New(rand.NewSource(int64(n)))
	v := make([]byte, 1<<20)
	for i := 0; i < n; i++ {
		if random {
			r.Read(v)
		}
		bld.Append(v)
	}
	a := bld.NewArray()
	rec := array.NewRecordBatch(sc, []arrow.Array{a}, int64(n))
	a.Release()
	want, err := fingerprint.Record(rec)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "blobs.parquet")
	testutil.WriteArrow(t, p, rec, parquet.WithDataPageSize(1<<30), parquet.WithDictionaryDefault(false), parquet.WithCompression(codec))
	return p, want
}

// pageSizes returns the stored and decoded sizes of the file's one column
// chunk (one data page), from its footer.
func pageSizes(t *testing.T, p string) (int64, int64) {
	t.Helper()
	props := parquet.NewReaderProperties(memory.DefaultAllocator)
	props.MaxCompressedPageSize, props.MaxUncompressedPageSize = 1<<31-1, 1<<31-1
	r, err := file.OpenParquetFile(p, false, file.WithReadProps(props))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	md, _ := r.RowGroup(0).MetaData().ColumnChunk(0)
	return md.TotalCompressedSize(), md.TotalUncompressedSize()
}

// TestLargePagesAreRead: arrow-go refuses pages over 64 MiB stored or 256
// MiB decoded by default, and relayout reported such a valid file as
// corrupt (exit 3). A page is now limited by its row group's sizes: a
// column of 1 MiB blobs in one 80 MiB zstd page, and 260 MiB of zeros in
// one page of a few KB stored, read back to the rows written.
func TestLargePagesAreRead(t *testing.T) {
	cases := []struct {
		name   string
		n      int
		random bool
	}{{"80 MiB stored", 80, true}, {"260 MiB decoded", 260, false}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.n > 100 {
				t.Skip("-short: decodes 260 MiB; make test runs it")
			}
			p, want := writeOnePage(t, c.n, c.random, compress.Codecs.Zstd)
			stored, decoded := pageSizes(t, p)
			if stored <= parquet.DefaultMaxCompressedPageSize && decoded <= parquet.DefaultMaxUncompressedPageSize {
				t.Fatalf("the column chunk is %d bytes stored, %d decoded: under arrow-go's default limits, so the test shows nothing", stored, decoded)
			}
			got, err := readSum(t, p)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("read %v, wrote %v", got, want)
			}
		})
	}
}

// TestPowerOfTwoAtLeast: the smallest power of two at least n, 1 below 2.
func TestPowerOfTwoAtLeast(t *testing.T) {
	for n, want := range map[int64]int64{-3: 1, 0: 1, 1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 65536: 65536, 65537: 131072, 1<<40 + 1: 1 << 41} {
		if got := PowerOfTwoAtLeast(n); got != want {
			t.Errorf("PowerOfTwoAtLeast(%d) = %d, want %d", n, got, want)
		}
	}
}
