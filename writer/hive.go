package writer

import (
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/errs"
)

// HiveKeyType reports whether a column of type t can name a Hive
// partition folder that readers parse back to the same value: strings,
// integers, dates and booleans. (Floats, timestamps, decimals and binary
// values do not round-trip through a folder name.)
func HiveKeyType(t arrow.DataType) bool {
	if d, ok := t.(*arrow.DictionaryType); ok {
		t = d.ValueType
	}
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64, arrow.DATE32, arrow.BOOL:
		return true
	}
	return false
}

// HiveTypeName is the manifest's (and --hive-types') name of a folder
// column's type, the type readers should declare.
func HiveTypeName(t arrow.DataType) string {
	if d, ok := t.(*arrow.DictionaryType); ok {
		t = d.ValueType
	}
	if t.ID() == arrow.LARGE_STRING {
		return "string"
	}
	return hive.TypeName(t)
}

// hiveSchema finds the folder columns and returns the files' schema.
func (w *Parquet) hiveSchema(sc *arrow.Schema) (*arrow.Schema, error) {
	drop := map[int]bool{}
	for _, name := range w.opts.HiveColumns {
		idx := sc.FieldIndices(name)
		if len(idx) != 1 {
			return nil, errs.Usagef("--output-partitioning hive: %q is not a top-level column of the output", name)
		}
		if t := sc.Field(idx[0]).Type; !HiveKeyType(t) {
			return nil, errs.Usagef("--output-partitioning hive: column %q is %s, which does not round-trip through a folder name (use strings, integers, dates or booleans)", name, t)
		}
		w.hiveIdx = append(w.hiveIdx, idx[0])
		drop[idx[0]] = true
	}
	var fields []arrow.Field
	for i, f := range sc.Fields() {
		if !drop[i] {
			w.keepIdx = append(w.keepIdx, i)
			fields = append(fields, f)
		}
	}
	md := sc.Metadata()
	return arrow.NewSchema(fields, &md), nil
}

// FolderValue is the folder form of a[i] (nil: null): what DuckDB,
// Spark and pyarrow parse back to the value.
func FolderValue(a arrow.Array, i int) *string {
	if a.IsNull(i) {
		return nil
	}
	var v string
	switch x := a.(type) {
	case *array.Dictionary:
		return FolderValue(x.Dictionary(), x.GetValueIndex(i))
	case *array.String: // a copy: Value points into the array's buffer, recycled once released
		v = strings.Clone(x.Value(i))
	case *array.LargeString:
		v = strings.Clone(x.Value(i))
	case *array.Date32:
		v = x.Value(i).ToTime().UTC().Format(time.DateOnly)
	default: // a copy: a view's ValueStr may point into its buffers
		v = strings.Clone(a.ValueStr(i))
	}
	return &v
}

// folderName names the next file from its first row's folder values (an
// empty output: null folders).
func (w *Parquet) folderName() (string, []*string, error) {
	vals := make([]*string, len(w.hiveIdx))
	if w.peek != nil && w.peekRow < w.peek.NumRows() {
		for k, c := range w.hiveIdx {
			vals[k] = FolderValue(w.peek.Column(c), int(w.peekRow))
		}
	}
	dir, err := hive.Path(w.opts.HiveColumns, vals)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("parquet/%s/part-%05d.parquet", dir, w.opts.FirstFile+w.fileIdx), vals, nil
}

// checkFolder checks that every row of rec holds the open file's folder
// values.
func (w *Parquet) checkFolder(rec arrow.RecordBatch) error {
	for k, c := range w.hiveIdx {
		want := w.cur.vals[k]
		a := rec.Column(c)
		if allFolder(a, want) {
			continue
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			got := FolderValue(a, i)
			if (got == nil) != (want == nil) || (got != nil && *got != *want) {
				return fmt.Errorf("writer: a row of %s holds %s=%v, its folder says %v (the layout must cut files where folder values change)",
					w.cur.name, w.opts.HiveColumns[k], strOrNull(got), strOrNull(want))
			}
		}
	}
	return nil
}

// allFolder reports, without making a string per row, whether every row
// of a provably holds the folder value want: strings equal to it byte for
// byte, or dates and integers all equal to a first row whose folder form is
// want. false sends checkFolder down its row-by-row path, which names the
// offending row.
func allFolder(a arrow.Array, want *string) bool {
	if want == nil || a.Len() == 0 || a.NullN() > 0 {
		return false
	}
	if s, ok := a.(*array.String); ok {
		for i := 0; i < s.Len(); i++ {
			if s.Value(i) != *want {
				return false
			}
		}
		return true
	}
	var same func(i int) bool
	switch x := a.(type) {
	case *array.Date32:
		same = func(i int) bool { return x.Value(i) == x.Value(0) }
	case *array.Int32:
		same = func(i int) bool { return x.Value(i) == x.Value(0) }
	case *array.Int64:
		same = func(i int) bool { return x.Value(i) == x.Value(0) }
	default:
		return false
	}
	if v := FolderValue(a, 0); v == nil || *v != *want {
		return false
	}
	for i := 1; i < a.Len(); i++ {
		if !same(i) {
			return false
		}
	}
	return true
}

func strOrNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// project returns rec's columns keep as a record of schema sc.
func project(rec arrow.RecordBatch, sc *arrow.Schema, keep []int) arrow.RecordBatch {
	cols := make([]arrow.Array, len(keep))
	for i, c := range keep {
		cols[i] = rec.Column(c)
	}
	return array.NewRecordBatch(sc, cols, rec.NumRows())
}
