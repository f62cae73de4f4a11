package pipeline

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
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
	requireUTCFlags(t, out, map[string]bool{"t_utc": true, "t_loc": false})
	requireSameParquetGoRows(t, in, out)
}

// requireUTCFlags requires each TIME column (dotted Parquet path) of an
// output's first file, read with parquet-go, to declare isAdjustedToUTC as
// want says.
func requireUTCFlags(t *testing.T, out string, want map[string]bool) {
	t.Helper()
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
	for p, utc := range want {
		col, ok := r.Schema().Lookup(strings.Split(p, ".")...)
		if !ok {
			t.Fatalf("%s: no column %s in the output (%s)", out, p, r.Schema())
		}
		var tt *format.TimeType
		if lt := col.Node.Type().LogicalType(); lt != nil {
			tt, _ = lt.Value.(*format.TimeType)
		}
		if tt == nil {
			t.Fatalf("%s: %s is not TIME", out, p)
		}
		if tt.IsAdjustedToUTC != utc {
			t.Errorf("%s: %s isAdjustedToUTC %v, want %v", out, p, tt.IsAdjustedToUTC, utc)
		}
		// The legacy converted type TIME_MICROS means UTC: present exactly
		// when the flag is (every TIME column here is microseconds).
		conv := schemaElements(r.Metadata().Schema)[p].ConvertedType
		if hasConv := conv.Valid && conv.V == deprecated.TimeMicros; hasConv != utc {
			t.Errorf("%s: %s converted type %+v with isAdjustedToUTC %v", out, p, conv, utc)
		}
	}
}

// schemaElements maps dotted paths to a footer's schema elements, from
// their depth-first order and child counts (the root left out).
func schemaElements(els []format.SchemaElement) map[string]format.SchemaElement {
	out := map[string]format.SchemaElement{}
	i := 1
	var walk func(prefix string, n int32)
	walk = func(prefix string, n int32) {
		for k := int32(0); k < n && i < len(els); k++ {
			e := els[i]
			i++
			out[prefix+e.Name] = e
			if e.NumChildren.Valid {
				walk(prefix+e.Name+".", e.NumChildren.V)
			}
		}
	}
	if len(els) > 0 && els[0].NumChildren.Valid {
		walk("", els[0].NumChildren.V)
	}
	return out
}

// requireSameParquetGoRows requires the output's rows, read with
// parquet-go, to equal the input folder's part-0.parquet's, in order.
func requireSameParquetGoRows(t *testing.T, in, out string) {
	t.Helper()
	a := testutil.ParquetGoRows(t, filepath.Join(in, "part-0.parquet"))
	b := testutil.ParquetGoRows(t, testutil.Files(t, filepath.Join(out, "parquet"))...)
	if len(a) != len(b) {
		t.Fatalf("%d rows in, %d out", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d differs: %s vs %s", i, a[i], b[i])
		}
	}
}

// TestNestedTimeAdjustedToUTCIsKept: TIME columns declared
// isAdjustedToUTC=true (written by parquet-go) as list elements, and a
// top-level one that packing moves into the items struct, keep the flag
// (read back with parquet-go, values unchanged). So do TIME columns inside
// a struct, which arrow-go's nested writer lays out: it declares every
// TIME local and takes no schema, so the flag is set in the footer; a
// local one there stays local, and no warning is logged.
func TestNestedTimeAdjustedToUTCIsKept(t *testing.T) {
	dir := t.TempDir()
	// Leaf columns in parquet-go's (name) order.
	fast := parquet.Group{
		"id":    parquet.Int(64),
		"q":     parquet.Int(64),
		"t_utc": parquet.TimeAdjusted(parquet.Microsecond, true),
		"z":     parquet.List(parquet.TimeAdjusted(parquet.Microsecond, true)),
	}
	nested := parquet.Group{
		"id": parquet.Int(64),
		"s":  parquet.Group{"a_utc": parquet.TimeAdjusted(parquet.Microsecond, true), "b_loc": parquet.TimeAdjusted(parquet.Microsecond, false)},
	}
	write := func(name string, g parquet.Group, row func(i int64) parquet.Row) string {
		in := filepath.Join(dir, name)
		os.MkdirAll(in, 0o755)
		f, err := os.Create(filepath.Join(in, "part-0.parquet"))
		if err != nil {
			t.Fatal(err)
		}
		w := parquet.NewWriter(f, parquet.NewSchema("t", g))
		for i := int64(0); i < 1000; i++ {
			if _, err := w.WriteRows([]parquet.Row{row(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		return in
	}
	inFast := write("fast", fast, func(i int64) parquet.Row {
		r := parquet.Row{parquet.Int64Value(i).Level(0, 0, 0), parquet.Int64Value(i/4).Level(0, 0, 1), parquet.Int64Value(i*11).Level(0, 0, 2)}
		if i%3 == 0 { // an empty list
			return append(r, parquet.NullValue().Level(0, 0, 3))
		}
		return append(r, parquet.Int64Value(i*13).Level(0, 1, 3), parquet.Int64Value(i*17).Level(1, 1, 3))
	})
	inNested := write("nested", nested, func(i int64) parquet.Row {
		return parquet.Row{parquet.Int64Value(i).Level(0, 0, 0), parquet.Int64Value(i*1_000_000).Level(0, 0, 1), parquet.Int64Value(i*7).Level(0, 0, 2)}
	})
	flat := filepath.Join(dir, "flat")
	smallRun(t, inFast, flat, func(o *RunOptions) { o.SliceKeys = nil })
	requireUTCFlags(t, flat, map[string]bool{"t_utc": true, "z.list.element": true})
	requireSameParquetGoRows(t, inFast, flat)
	packed := filepath.Join(dir, "packed")
	smallRun(t, inFast, packed, func(o *RunOptions) { o.SliceKeys, o.QueryKey = nil, []string{"q"} })
	requireUTCFlags(t, packed, map[string]bool{"items.list.element.t_utc": true, "items.list.element.z.list.element": true})

	var log bytes.Buffer
	out := filepath.Join(dir, "struct")
	smallRun(t, inNested, out, func(o *RunOptions) { o.SliceKeys, o.Log = nil, slog.New(slog.NewTextHandler(&log, nil)) })
	requireUTCFlags(t, out, map[string]bool{"s.a_utc": true, "s.b_loc": false})
	requireSameParquetGoRows(t, inNested, out)
	if strings.Contains(log.String(), "level=WARN") {
		t.Errorf("a warning, with every TIME flag kept; the log:\n%s", log.String())
	}
}
