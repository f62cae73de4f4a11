package partition

import (
	"encoding/base64"
	"math"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Value returns arr[i] as a JSON-friendly value for manifests and reports:
// nil for null; bool; int64 or uint64 for integers; float64 (NaN and
// infinities as the strings "NaN", "Inf", "-Inf"); string for strings;
// base64 for binary; "YYYY-MM-DD" for dates; RFC 3339 (UTC) for timestamps;
// the decimal's text for decimals; integers in the type's unit for times and
// durations.
func Value(arr arrow.Array, i int) any {
	if arr.IsNull(i) {
		return nil
	}
	switch a := arr.(type) {
	case *array.Boolean:
		return a.Value(i)
	case *array.Int8:
		return int64(a.Value(i))
	case *array.Int16:
		return int64(a.Value(i))
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.Uint8:
		return uint64(a.Value(i))
	case *array.Uint16:
		return uint64(a.Value(i))
	case *array.Uint32:
		return uint64(a.Value(i))
	case *array.Uint64:
		return a.Value(i)
	case *array.Float32:
		return floatValue(float64(a.Value(i)))
	case *array.Float64:
		return floatValue(a.Value(i))
	case *array.String: // a copy: arrow's Value points into the array's buffer, which the result would pin
		return strings.Clone(a.Value(i))
	case *array.LargeString:
		return strings.Clone(a.Value(i))
	case *array.Binary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.LargeBinary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.FixedSizeBinary:
		return base64.StdEncoding.EncodeToString(a.Value(i))
	case *array.Date32:
		return a.Value(i).ToTime().UTC().Format("2006-01-02")
	case *array.Date64:
		return a.Value(i).ToTime().UTC().Format("2006-01-02")
	case *array.Timestamp:
		unit := a.DataType().(*arrow.TimestampType).Unit
		return a.Value(i).ToTime(unit).UTC().Format(time.RFC3339Nano)
	case *array.Time32:
		return int64(a.Value(i))
	case *array.Time64:
		return int64(a.Value(i))
	case *array.Duration:
		return int64(a.Value(i))
	case *array.Decimal128:
		return a.ValueStr(i)
	case *array.Decimal256:
		return a.ValueStr(i)
	case *array.Dictionary:
		return Value(a.Dictionary(), a.GetValueIndex(i))
	}
	return strings.Clone(arr.ValueStr(i)) // a view's ValueStr may point into its buffers
}

func floatValue(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case f == 0:
		return 0.0 // -0 too: one slice with 0 (appendFloat), named as 0
	}
	return f
}

// RecordBytes sums the sizes of a record's buffers (its decoded size),
// dictionaries included.
func RecordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	for _, c := range rec.Columns() {
		n += dataBytes(c.Data())
	}
	return n
}

func dataBytes(d arrow.ArrayData) int64 {
	var n int64
	for _, b := range d.Buffers() {
		if b != nil {
			n += int64(b.Len())
		}
	}
	for _, c := range d.Children() {
		n += dataBytes(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		if dict := d.Dictionary(); dict != nil && dict.(*array.Data) != nil {
			n += dataBytes(dict)
		}
	}
	return n
}
