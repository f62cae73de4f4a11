// Package letor converts learning-to-rank text (SVMlight / LETOR / LibSVM
// with qid) to Parquet, so ranking datasets can be re-laid out and packed by
// query.
//
// Input lines: `label [qid:N] id:value ... [# comment]`. Output columns:
// label (double), qid (int64), f<id> (float, one per feature id seen in the
// file, ascending; null where a line omits the feature), docid (string from
// a `docid = X` comment, null otherwise). A feature repeated on one line
// keeps its last value. Without qid, a sidecar group file (one group size
// per line, xgboost's .group format) numbers the queries 0, 1, ...; rows
// keep file order.
package letor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Row is one parsed line.
type Row struct {
	Label    float64
	QID      int64
	HasQID   bool
	Features map[int]float64
	DocID    string
}

// Parse reads every line. line numbers in errors are 1-based.
func Parse(r io.Reader, name string) ([]Row, error) {
	var rows []Row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		comment := ""
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line, comment = line[:i], line[i+1:]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		label, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: label %q is not a number", name, n, fields[0])
		}
		row := Row{Label: label, Features: map[int]float64{}}
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, ":")
			if !ok {
				return nil, fmt.Errorf("%s:%d: %q is not id:value", name, n, f)
			}
			if k == "qid" {
				if row.QID, err = strconv.ParseInt(v, 10, 64); err != nil {
					return nil, fmt.Errorf("%s:%d: qid %q is not an integer", name, n, v)
				}
				row.HasQID = true
				continue
			}
			id, err := strconv.Atoi(k)
			if err != nil || id < 0 {
				return nil, fmt.Errorf("%s:%d: feature id %q is not a non-negative integer", name, n, k)
			}
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: feature %d value %q is not a number", name, n, id, v)
			}
			row.Features[id] = x
		}
		if _, rest, ok := strings.Cut(comment, "docid"); ok {
			rest = strings.TrimLeft(rest, " =\t")
			row.DocID = strings.Fields(rest + " ")[0]
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return rows, nil
}

// ApplyGroups numbers queries from group sizes (one per line) for rows
// without qid.
func ApplyGroups(rows []Row, groups io.Reader, name string) error {
	sc := bufio.NewScanner(groups)
	i := 0
	for q := int64(0); sc.Scan(); q++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			q--
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%s: group size %q is not a count", name, s)
		}
		for j := 0; j < n; j++ {
			if i >= len(rows) {
				return fmt.Errorf("%s: groups hold more rows than the data (%d)", name, len(rows))
			}
			rows[i].QID, rows[i].HasQID = q, true
			i++
		}
	}
	if i != len(rows) {
		return fmt.Errorf("%s: groups hold %d rows, the data %d", name, i, len(rows))
	}
	return sc.Err()
}

// WriteParquet writes rows as one Parquet file (zstd).
func WriteParquet(path string, rows []Row) error {
	ids := map[int]bool{}
	for _, r := range rows {
		if !r.HasQID {
			return fmt.Errorf("a row has no qid: pass a group file")
		}
		for id := range r.Features {
			ids[id] = true
		}
	}
	sorted := make([]int, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Ints(sorted)
	fields := []arrow.Field{{Name: "label", Type: arrow.PrimitiveTypes.Float64}, {Name: "qid", Type: arrow.PrimitiveTypes.Int64}}
	for _, id := range sorted {
		fields = append(fields, arrow.Field{Name: fmt.Sprintf("f%d", id), Type: arrow.PrimitiveTypes.Float32, Nullable: true})
	}
	fields = append(fields, arrow.Field{Name: "docid", Type: arrow.BinaryTypes.String, Nullable: true})
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Float64Builder).Append(r.Label)
		b.Field(1).(*array.Int64Builder).Append(r.QID)
		for i, id := range sorted {
			fb := b.Field(2 + i).(*array.Float32Builder)
			if v, ok := r.Features[id]; ok {
				fb.Append(float32(v))
			} else {
				fb.AppendNull()
			}
		}
		db := b.Field(len(fields) - 1).(*array.StringBuilder)
		if r.DocID != "" {
			db.Append(r.DocID)
		} else {
			db.AppendNull()
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		f.Close()
		return err
	}
	if err := w.Write(rec); err != nil {
		w.Close()
		return err
	}
	return w.Close() // closes f
}
