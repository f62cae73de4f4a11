package pipeline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/relayout/relayout/internal/testutil"
)

// TestTimeAdjustedToUTCIsKept: a TIME column that the input declares
// isAdjustedToUTC=true (written by parquet-go, an independent writer) is
// written with the flag kept, and one declared false stays false; values
// are unchanged (read back with parquet-go). arrow-go alone writes every
// TIME as false.
func TestTimeAdjustedToUTCIsKept(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.MkdirAll(in, 0o755)
	sch := parquet.NewSchema("t", parquet.Group{
		"id":    parquet.Int(64),
		"t_utc": parquet.TimeAdjusted(parquet.Microsecond, true),
		"t_loc": parquet.TimeAdjusted(parquet.Microsecond, false),
	})
	f, err := os.Create(filepath.Join(in, "part-0.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewWriter(f, sch)
	var rows []parquet.Row
	for i := 0; i < 1000; i++ {
		rows = append(rows, parquet.Row{parquet.Int64Value(int64(i)).Level(0, 0, 0), parquet.Int64Value(int64(i)*1_000_000).Level(0, 0, 1), parquet.Int64Value(int64(i)*7).Level(0, 0, 2)})
	}
	if _, err := w.WriteRows(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out := filepath.Join(dir, "out")
	smallRun(t, in, out, func(o *RunOptions) { o.SliceKeys = nil })
	files := testutil.Files(t, filepath.Join(out, "parquet"))
	pf, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	st, _ := pf.Stat()
	r, err := parquet.OpenFile(pf, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"t_utc": true, "t_loc": false} {
		col, ok := r.Schema().Lookup(name)
		if !ok {
			t.Fatalf("no column %s in the output", name)
		}
		lt := col.Node.Type().LogicalType()
		var tt *format.TimeType
		if lt != nil {
			tt, _ = lt.Value.(*format.TimeType)
		}
		if tt == nil {
			t.Fatalf("%s: logical type %v, want TIME", name, lt)
		}
		if tt.IsAdjustedToUTC != want {
			t.Errorf("%s: isAdjustedToUTC %v, the input declared %v", name, tt.IsAdjustedToUTC, want)
		}
	}
	a := testutil.ParquetGoRows(t, filepath.Join(in, "part-0.parquet"))
	b := testutil.ParquetGoRows(t, files...)
	if len(a) != len(b) {
		t.Fatalf("%d rows in, %d out", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d differs: %s vs %s", i, a[i], b[i])
		}
	}
}
