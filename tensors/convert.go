package tensors

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/float16"
	"github.com/cespare/xxhash/v2"
)

// conv says how one source array becomes tensor elements.
type conv struct {
	dt      DType
	fill    []byte // one element of dt
	buckets uint64 // string and binary ids: modulo, when > 0
}

// appendArray appends elements [lo, hi) of a converted to c.dt; null
// elements become c.fill.
func appendArray(buf []byte, a arrow.Array, lo, hi int, c *conv) ([]byte, error) {
	start := len(buf)
	switch a := a.(type) {
	case *array.Int8:
		buf = appendCast(buf, a.Int8Values()[lo:hi], c.dt)
	case *array.Int16:
		buf = appendCast(buf, a.Int16Values()[lo:hi], c.dt)
	case *array.Int32:
		buf = appendCast(buf, a.Int32Values()[lo:hi], c.dt)
	case *array.Int64:
		buf = appendCast(buf, a.Int64Values()[lo:hi], c.dt)
	case *array.Uint8:
		buf = appendCast(buf, a.Uint8Values()[lo:hi], c.dt)
	case *array.Uint16:
		buf = appendCast(buf, a.Uint16Values()[lo:hi], c.dt)
	case *array.Uint32:
		buf = appendCast(buf, a.Uint32Values()[lo:hi], c.dt)
	case *array.Uint64:
		buf = appendCast(buf, a.Uint64Values()[lo:hi], c.dt)
	case *array.Float32:
		buf = appendCast(buf, a.Float32Values()[lo:hi], c.dt)
	case *array.Float64:
		buf = appendCast(buf, a.Float64Values()[lo:hi], c.dt)
	case *array.Float16:
		v := a.Values()[lo:hi]
		if c.dt == F16 {
			buf = appendCast(buf, view16(v), U16)
			break
		}
		tmp := make([]float32, len(v))
		for i, x := range v {
			tmp[i] = x.Float32()
		}
		buf = appendCast(buf, tmp, c.dt)
	case *array.Boolean:
		tmp := make([]uint8, hi-lo)
		for i := range tmp {
			if a.Value(lo + i) {
				tmp[i] = 1
			}
		}
		buf = appendCast(buf, tmp, c.dt)
	case *array.Date32:
		buf = appendCast(buf, a.Date32Values()[lo:hi], c.dt)
	case *array.Date64:
		buf = appendCast(buf, a.Date64Values()[lo:hi], c.dt)
	case *array.Time32:
		buf = appendCast(buf, a.Time32Values()[lo:hi], c.dt)
	case *array.Time64:
		buf = appendCast(buf, a.Time64Values()[lo:hi], c.dt)
	case *array.Timestamp:
		buf = appendCast(buf, a.TimestampValues()[lo:hi], c.dt)
	case *array.Duration:
		buf = appendCast(buf, a.DurationValues()[lo:hi], c.dt)
	case *array.Decimal128:
		scale := a.DataType().(*arrow.Decimal128Type).Scale
		tmp := make([]float64, hi-lo)
		for i := range tmp {
			tmp[i] = a.Value(lo + i).ToFloat64(scale)
		}
		buf = appendCast(buf, tmp, c.dt)
	case *array.Decimal256:
		scale := a.DataType().(*arrow.Decimal256Type).Scale
		tmp := make([]float64, hi-lo)
		for i := range tmp {
			tmp[i] = a.Value(lo + i).ToFloat64(scale)
		}
		buf = appendCast(buf, tmp, c.dt)
	case *array.Dictionary:
		return appendDictionary(buf, a, lo, hi, c)
	default:
		at, ok := bytesAccessor(a)
		if !ok {
			return buf, fmt.Errorf("type %s cannot become a tensor", a.DataType())
		}
		ids := make([]uint64, hi-lo)
		for i := range ids {
			h := xxhash.Sum64(at(lo + i))
			if c.buckets > 0 {
				h %= c.buckets
			}
			ids[i] = h
		}
		if c.dt == I64 { // two's complement: the same bits as uint64
			buf, t := grow(buf, 8*len(ids))
			copy(view[uint64](t, len(ids)), ids)
			return fillNulls(buf, start, a, lo, hi, c), nil
		}
		buf = appendCast(buf, ids, c.dt)
	}
	return fillNulls(buf, start, a, lo, hi, c), nil
}

func view16(v []float16.Num) []uint16 {
	if len(v) == 0 {
		return nil
	}
	return view[uint16](toBytes(v), len(v))
}

func toBytes[T any](v []T) []byte {
	var z T
	return unsafeBytes(v, int(sizeOf(z)))
}

// fillNulls overwrites the elements of buf (from start) that are null in a.
func fillNulls(buf []byte, start int, a arrow.Array, lo, hi int, c *conv) []byte {
	if a.NullN() == 0 {
		return buf
	}
	es := len(c.fill)
	for i := lo; i < hi; i++ {
		if a.IsNull(i) {
			copy(buf[start+(i-lo)*es:], c.fill)
		}
	}
	return buf
}

// appendValid appends 1 for every valid element of [lo, hi), 0 for nulls.
func appendValid(buf []byte, a arrow.Array, lo, hi int) []byte {
	buf, t := grow(buf, hi-lo)
	for i := range t {
		t[i] = 1
	}
	if a.NullN() > 0 {
		for i := lo; i < hi; i++ {
			if a.IsNull(i) {
				t[i-lo] = 0
			}
		}
	}
	return buf
}

func appendDictionary(buf []byte, a *array.Dictionary, lo, hi int, c *conv) ([]byte, error) {
	dict, err := appendArray(nil, a.Dictionary(), 0, a.Dictionary().Len(), c)
	if err != nil {
		return buf, err
	}
	idx, err := appendArray(nil, a.Indices(), lo, hi, &conv{dt: I64, fill: make([]byte, 8)})
	if err != nil {
		return buf, err
	}
	es := c.dt.Size()
	n := hi - lo
	start := len(buf)
	buf, t := grow(buf, n*es)
	for i, k := range view[int64](idx, n) {
		if a.IsNull(lo + i) {
			copy(t[i*es:], c.fill)
			continue
		}
		if k < 0 || int(k)*es >= len(dict) {
			return buf[:start], fmt.Errorf("dictionary index %d out of range", k)
		}
		copy(t[i*es:(i+1)*es], dict[int(k)*es:])
	}
	return buf, nil
}

// bytesAccessor returns the bytes of element i of a string or binary array.
func bytesAccessor(a arrow.Array) (func(i int) []byte, bool) {
	switch a := a.(type) {
	case *array.String:
		return func(i int) []byte { return stringBytes(a.Value(i)) }, true
	case *array.LargeString:
		return func(i int) []byte { return stringBytes(a.Value(i)) }, true
	case *array.Binary:
		return a.Value, true
	case *array.LargeBinary:
		return a.Value, true
	case *array.FixedSizeBinary:
		return a.Value, true
	case *array.StringView:
		return func(i int) []byte { return stringBytes(a.Value(i)) }, true
	case *array.BinaryView:
		return a.Value, true
	}
	return nil, false
}

// listAccess gives uniform access to list-like arrays.
type listAccess struct {
	values arrow.Array
	bounds func(i int) (int64, int64)
}

func listOf(a arrow.Array) (listAccess, bool) {
	switch a := a.(type) {
	case *array.List:
		return listAccess{a.ListValues(), a.ValueOffsets}, true
	case *array.LargeList:
		return listAccess{a.ListValues(), a.ValueOffsets}, true
	case *array.FixedSizeList:
		n := int64(a.DataType().(*arrow.FixedSizeListType).Len())
		off := int64(a.Data().Offset())
		return listAccess{a.ListValues(), func(i int) (int64, int64) { s := (off + int64(i)) * n; return s, s + n }}, true
	}
	return listAccess{}, false
}
