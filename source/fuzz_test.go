package source

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/testutil"
)

// FuzzParquetInput: any bytes as an input file are read in full or refused
// as bad input (exit 3): never a panic, never exit 1 or 4. Seeded with the
// small files of ../shared/data (apache/parquet-testing, bad_data included,
// and DuckDB's test files) and a parquet-go file with page CRCs.
func FuzzParquetInput(f *testing.F) {
	dir := testutil.DataDir(f)
	var seeds []string
	for _, sub := range []string{"parquet-testing/bad_data", "parquet-testing/data", "duckdb-parquet-testing"} {
		m, _ := filepath.Glob(filepath.Join(dir, sub, "*.parquet"))
		seeds = append(seeds, m...)
	}
	n := 0
	for _, p := range seeds {
		if st, err := os.Stat(p); err == nil && st.Size() < 16<<10 {
			data, _ := os.ReadFile(p)
			f.Add(data)
			n++
		}
	}
	if n < 10 {
		f.Fatalf("only %d seed files under %s", n, dir)
	}
	tmp := f.TempDir()
	crc := filepath.Join(tmp, "crc.parquet")
	writeCRCFile(f, crc, 500)
	if data, err := os.ReadFile(crc); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "in.parquet")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := readSum(t, p)
		if err == nil {
			return
		}
		if c := errs.ClassOf(err); c != errs.BadInput || strings.Contains(err.Error(), "panic") {
			t.Fatalf("%v (class %v), want exit 3", err, c)
		}
	})
}
