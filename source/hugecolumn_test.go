package source

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/testutil"
)

// TestHugeStringColumnIsNamed: a row group whose string column decodes to
// more than 2 GiB is valid Parquet, but arrow-go's reader wraps its 32-bit
// offsets around, and relayout called the file corrupt ("re-export the
// file"). It now says the column is too large for one array and what to
// do. The file: 36,864 strings of 64 KiB zeros in one row group (2.25 GiB
// decoded, 0.4 MB stored), written from one buffer that is never touched.
func TestHugeStringColumnIsNamed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: decodes 2.25 GiB (about 30 s and 9 GB of memory on 2 cores); make test runs it")
	}
	const n, size = 36 << 10, 64 << 10
	offs := make([]int64, n+1)
	for i := range offs {
		offs[i] = int64(i * size)
	}
	d := array.NewData(arrow.BinaryTypes.LargeString, n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(offs)), memory.NewBufferBytes(make([]byte, n*size))}, nil, 0, 0)
	a := array.MakeFromData(d)
	d.Release()
	sc := arrow.NewSchema([]arrow.Field{{Name: "doc", Type: arrow.BinaryTypes.LargeString}}, nil)
	rec := array.NewRecordBatch(sc, []arrow.Array{a}, n)
	a.Release()
	p := filepath.Join(t.TempDir(), "docs.parquet")
	// No stored Arrow schema: the column is read as string (32-bit offsets).
	testutil.WriteArrow(t, p, rec, parquet.WithDictionaryDefault(false), parquet.WithCompression(compress.Codecs.Zstd), parquet.WithMaxRowGroupLength(n))
	_, err := readSum(t, p)
	if errs.ClassOf(err) != errs.BadInput || !strings.Contains(err.Error(), "column doc") || !strings.Contains(err.Error(), "32-bit offsets") ||
		!strings.Contains(err.Error(), "smaller row groups") || strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("%v (class %v), want bad input naming the column as too large, not corrupt", err, errs.ClassOf(err))
	}
}
