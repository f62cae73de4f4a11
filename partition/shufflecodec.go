package partition

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The shuffle codec makes the map tasks' Arrow IPC streams small without
// leaving Arrow: a compressor cannot shrink offsets (rising integers), and
// they are most of what a string or list column adds over its values. So a
// batch is written with
//   - a string or binary column that repeats (at most half its values
//     distinct) as a dictionary: int32 indices, which zstd shrinks to little
//     for a query-level or low-cardinality column;
//   - a list column whose lists all have one length k as a fixed-size list
//     of k: no offsets at all (an embedding);
//   - and the same inside lists (a list of strings keeps its offsets and its
//     strings become a dictionary).
//
// Every decision is per batch, from the batch's own values; a stream whose
// next batch encodes to another schema ends and a new stream begins in the
// same segment, so the reader needs no side information. Decoding restores
// the exact arrays (types, nulls, values), which the round-trip tests and
// the byte-identical distributed tests check.

// minDictRows is the smallest batch worth a dictionary.
const minDictRows = 16

// encodeBatch returns rec encoded for the shuffle (retained: the caller
// releases it), or rec itself, retained, when nothing encodes smaller.
func encodeBatch(rec arrow.RecordBatch) arrow.RecordBatch {
	n := int(rec.NumCols())
	var cols []arrow.Array
	var fields []arrow.Field
	for c := 0; c < n; c++ {
		a, ok := encodeArray(rec.Column(c))
		if !ok {
			continue
		}
		if cols == nil {
			cols = make([]arrow.Array, n)
			fields = append([]arrow.Field(nil), rec.Schema().Fields()...)
		}
		cols[c] = a
		fields[c].Type = a.DataType()
	}
	if cols == nil {
		rec.Retain()
		return rec
	}
	for c := range cols {
		if cols[c] == nil {
			cols[c] = rec.Column(c)
			cols[c].Retain()
		}
	}
	md := rec.Schema().Metadata()
	out := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
	for _, a := range cols {
		a.Release()
	}
	return out
}

// encodeArray encodes one column; ok is false when it stays as it is.
func encodeArray(a arrow.Array) (arrow.Array, bool) {
	switch a.DataType().ID() {
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		return dictEncode(a)
	case arrow.LIST, arrow.LARGE_LIST:
		return encodeList(a.(array.ListLike))
	}
	return nil, false
}

// valueString returns the i-th value of a string or binary array as a
// string viewing the array's bytes (no copy).
func valueString(a arrow.Array) func(int) string {
	switch v := a.(type) {
	case *array.String:
		return v.Value
	case *array.LargeString:
		return v.Value
	case *array.Binary:
		return v.ValueString
	case *array.LargeBinary:
		return v.ValueString
	}
	panic(fmt.Sprintf("internal: valueString of %s", a.DataType()))
}

// dictEncode makes a dictionary array of a string or binary array when at
// most half its values are distinct. Runs of one value (query-level
// columns) cost a comparison, not a lookup.
func dictEncode(a arrow.Array) (arrow.Array, bool) {
	n := a.Len()
	if n < minDictRows {
		return nil, false
	}
	value := valueString(a)
	limit := n / 2
	idx, ids := newValues[int32](n)
	seen := make(map[string]int32, 64)
	var order []string
	var dictBytes int
	prev, prevID := "", int32(-1)
	for i := 0; i < n; i++ {
		if a.IsNull(i) {
			ids[i] = 0
			continue
		}
		s := value(i)
		if prevID >= 0 && s == prev {
			ids[i] = prevID
			continue
		}
		id, ok := seen[s]
		if !ok {
			if len(order) == limit {
				idx.Release()
				return nil, false
			}
			id = int32(len(order))
			seen[s] = id
			order = append(order, s)
			dictBytes += len(s)
		}
		ids[i], prev, prevID = id, s, id
	}
	// The dictionary: the distinct values in first-seen order, of a's type.
	var dict arrow.Array
	if isLarge(a.DataType()) {
		dict = buildBinary[int64](a.DataType(), order, dictBytes)
	} else {
		dict = buildBinary[int32](a.DataType(), order, dictBytes)
	}
	defer dict.Release()
	// The narrowest index type that holds the dictionary: a column of
	// few values (a country, a device) then gives zstd a byte a row to
	// compress instead of four.
	var it arrow.DataType = arrow.PrimitiveTypes.Int32
	switch k := len(order); {
	case k <= math.MaxInt8:
		idx, it = narrow[int8](idx, ids), arrow.PrimitiveTypes.Int8
	case k <= math.MaxInt16:
		idx, it = narrow[int16](idx, ids), arrow.PrimitiveTypes.Int16
	}
	validity, nulls := validityCopy(a.Data())
	data := array.NewData(it, n, []*memory.Buffer{validity, idx}, nil, nulls, 0)
	if validity != nil {
		validity.Release()
	}
	idx.Release()
	dt := &arrow.DictionaryType{IndexType: it, ValueType: a.DataType()}
	out := array.NewDictionaryArray(dt, array.MakeFromData(data), dict)
	data.Release()
	return out, true
}

// narrow copies dictionary indices into a buffer of a narrower type I
// (each fits) and releases the int32 buffer.
func narrow[I int8 | int16](wide *memory.Buffer, ids []int32) *memory.Buffer {
	var i0 I
	b := memory.NewResizableBuffer(memory.DefaultAllocator)
	b.Resize(len(ids) * int(unsafe.Sizeof(i0)))
	out := unsafe.Slice((*I)(unsafe.Pointer(unsafe.SliceData(b.Bytes()))), len(ids))
	for i, id := range ids {
		out[i] = I(id)
	}
	wide.Release()
	return b
}

func isLarge(dt arrow.DataType) bool {
	id := dt.ID()
	return id == arrow.LARGE_STRING || id == arrow.LARGE_BINARY
}

// validityCopy returns a's validity bitmap starting at bit 0 (a new
// reference; nil when a has no nulls) and its null count.
func validityCopy(d arrow.ArrayData) (*memory.Buffer, int) {
	nulls := d.NullN()
	bufs := d.Buffers()
	if nulls == 0 || len(bufs) == 0 || bufs[0] == nil {
		return nil, 0
	}
	if d.Offset() == 0 {
		bufs[0].Retain()
		return bufs[0], nulls
	}
	b := memory.NewResizableBuffer(memory.DefaultAllocator)
	b.Resize(int(bitutil.BytesForBits(int64(d.Len()))))
	bitutil.CopyBitmap(bufs[0].Bytes(), d.Offset(), d.Len(), b.Bytes(), 0)
	return b, nulls
}

// newValues allocates a buffer of n values of type O, with a view of it.
func newValues[O int32 | int64](n int) (*memory.Buffer, []O) {
	var o O
	b := memory.NewResizableBuffer(memory.DefaultAllocator)
	b.Resize(n * int(unsafe.Sizeof(o)))
	return b, unsafe.Slice((*O)(unsafe.Pointer(unsafe.SliceData(b.Bytes()))), n)
}

// binaryBuffers allocates the offsets (n+1 of type O) and data (total
// bytes) buffers of a string or binary array, with views of each.
func binaryBuffers[O int32 | int64](n, total int) (*memory.Buffer, []O, *memory.Buffer, []byte) {
	offBuf, offs := newValues[O](n + 1)
	dataBuf := memory.NewResizableBuffer(memory.DefaultAllocator)
	dataBuf.Resize(total)
	return offBuf, offs, dataBuf, dataBuf.Bytes()
}

// buildBinary builds a string or binary array of type dt holding values.
func buildBinary[O int32 | int64](dt arrow.DataType, values []string, total int) arrow.Array {
	offBuf, offs, dataBuf, buf := binaryBuffers[O](len(values), total)
	pos := 0
	for i, s := range values {
		offs[i] = O(pos)
		pos += copy(buf[pos:], s)
	}
	offs[len(values)] = O(pos)
	data := array.NewData(dt, len(values), []*memory.Buffer{nil, offBuf, dataBuf}, nil, 0, 0)
	offBuf.Release()
	dataBuf.Release()
	out := array.MakeFromData(data)
	data.Release()
	return out
}

// encodeList writes a list whose lists all hold k ≥ 1 values as a
// fixed-size list, and encodes the values either way.
func encodeList(l array.ListLike) (arrow.Array, bool) {
	n := l.Len()
	elem := l.DataType().(arrow.ListLikeType).ElemField()
	child := l.ListValues()
	start, end := l.ValueOffsets(0)
	k := end - start
	fixed := n > 0 && k > 0
	for i := 1; fixed && i < n; i++ {
		s, e := l.ValueOffsets(i)
		fixed = e-s == k && s == end
		end = e
	}
	if fixed {
		_, last := l.ValueOffsets(n - 1)
		vals := array.NewSlice(child, start, last)
		defer vals.Release()
		if enc, ok := encodeArray(vals); ok {
			defer enc.Release()
			vals = enc
			elem.Type = enc.DataType()
		}
		validity, nulls := validityCopy(l.Data())
		data := array.NewData(arrow.FixedSizeListOfField(int32(k), elem), n, []*memory.Buffer{validity}, []arrow.ArrayData{vals.Data()}, nulls, 0)
		if validity != nil {
			validity.Release()
		}
		out := array.MakeFromData(data)
		data.Release()
		return out, true
	}
	enc, ok := encodeArray(child)
	if !ok {
		return nil, false
	}
	defer enc.Release()
	elem.Type = enc.DataType()
	var dt arrow.DataType = arrow.ListOfField(elem)
	if l.DataType().ID() == arrow.LARGE_LIST {
		dt = arrow.LargeListOfField(elem)
	}
	d := l.Data()
	data := array.NewData(dt, n, d.Buffers(), []arrow.ArrayData{enc.Data()}, d.NullN(), d.Offset())
	out := array.MakeFromData(data)
	data.Release()
	return out, true
}

// decodeBatch restores a batch read from the shuffle to schema (the input
// schema). It takes ownership of rec.
func decodeBatch(rec arrow.RecordBatch, schema *arrow.Schema) (arrow.RecordBatch, error) {
	defer rec.Release()
	if int(rec.NumCols()) != schema.NumFields() {
		return nil, fmt.Errorf("the shuffle holds %d columns, the plan's schema %d", rec.NumCols(), schema.NumFields())
	}
	cols := make([]arrow.Array, schema.NumFields())
	release := func() {
		for _, a := range cols {
			if a != nil {
				a.Release()
			}
		}
	}
	for c, f := range schema.Fields() {
		a, err := decodeArray(rec.Column(c), f.Type)
		if err != nil {
			release()
			return nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		cols[c] = a
	}
	out := array.NewRecordBatch(schema, cols, rec.NumRows())
	release()
	return out, nil
}

// decodeArray returns a (retained) as an array of type want.
func decodeArray(a arrow.Array, want arrow.DataType) (arrow.Array, error) {
	if arrow.TypeEqual(a.DataType(), want) {
		a.Retain()
		return a, nil
	}
	switch v := a.(type) {
	case *array.Dictionary:
		vt := v.DataType().(*arrow.DictionaryType).ValueType
		if !arrow.TypeEqual(vt, want) {
			break
		}
		switch idx := v.Indices().(type) {
		case *array.Int8:
			return dictDecodeAs[int8](v, want, idx.Int8Values())
		case *array.Int16:
			return dictDecodeAs[int16](v, want, idx.Int16Values())
		case *array.Int32:
			return dictDecodeAs[int32](v, want, idx.Int32Values())
		}
		return nil, fmt.Errorf("dictionary indices of type %s", v.Indices().DataType())
	case *array.FixedSizeList:
		if want.ID() != arrow.LIST && want.ID() != arrow.LARGE_LIST {
			break
		}
		vals, err := decodeArray(v.ListValues(), want.(arrow.ListLikeType).Elem())
		if err != nil {
			return nil, err
		}
		defer vals.Release()
		k := int64(v.DataType().(*arrow.FixedSizeListType).Len())
		d := v.Data()
		var offBuf *memory.Buffer
		if want.ID() == arrow.LARGE_LIST {
			offBuf = fixedOffsets[int64](d.Offset(), d.Len(), k)
		} else {
			offBuf = fixedOffsets[int32](d.Offset(), d.Len(), k)
		}
		defer offBuf.Release()
		var validity *memory.Buffer
		if bufs := d.Buffers(); len(bufs) > 0 {
			validity = bufs[0]
		}
		data := array.NewData(want, d.Len(), []*memory.Buffer{validity, offBuf}, []arrow.ArrayData{vals.Data()}, d.NullN(), d.Offset())
		out := array.MakeFromData(data)
		data.Release()
		return out, nil
	case array.ListLike:
		if v.DataType().ID() != want.ID() || (want.ID() != arrow.LIST && want.ID() != arrow.LARGE_LIST) {
			break
		}
		vals, err := decodeArray(v.ListValues(), want.(arrow.ListLikeType).Elem())
		if err != nil {
			return nil, err
		}
		defer vals.Release()
		d := v.Data()
		data := array.NewData(want, d.Len(), d.Buffers(), []arrow.ArrayData{vals.Data()}, d.NullN(), d.Offset())
		out := array.MakeFromData(data)
		data.Release()
		return out, nil
	}
	return nil, fmt.Errorf("the shuffle holds %s where the plan's schema has %s", a.DataType(), want)
}

// fixedOffsets returns the offsets of n lists of k values whose first
// list is list off of the child (a fixed-size list's layout).
func fixedOffsets[O int32 | int64](off, n int, k int64) *memory.Buffer {
	b, offs := newValues[O](off + n + 1)
	for i := range offs {
		offs[i] = O(int64(i) * k)
	}
	return b
}

// dictDecodeAs materializes a dictionary array of strings or binaries
// whose indices (ids) are of type I, with the offsets want needs.
func dictDecodeAs[I int8 | int16 | int32](d *array.Dictionary, want arrow.DataType, ids []I) (arrow.Array, error) {
	if isLarge(want) {
		return dictDecode[int64](d, want, ids)
	}
	return dictDecode[int32](d, want, ids)
}

// dictDecode materializes a dictionary array of strings or binaries.
func dictDecode[O int32 | int64, I int8 | int16 | int32](d *array.Dictionary, want arrow.DataType, ids []I) (arrow.Array, error) {
	dict := d.Dictionary()
	value := valueString(dict)
	n := d.Len()
	if len(ids) != n {
		return nil, fmt.Errorf("%d dictionary indices for %d values", len(ids), n)
	}
	nd := int32(dict.Len())
	total := 0
	for i, id := range ids {
		if d.IsNull(i) {
			continue
		}
		if int32(id) < 0 || int32(id) >= nd {
			return nil, fmt.Errorf("dictionary index %d out of range (%d values)", id, nd)
		}
		total += len(value(int(id)))
	}
	offBuf, offs, dataBuf, buf := binaryBuffers[O](n, total)
	pos := 0
	for i, id := range ids {
		offs[i] = O(pos)
		if !d.IsNull(i) {
			pos += copy(buf[pos:], value(int(id)))
		}
	}
	offs[n] = O(pos)
	validity, nulls := validityCopy(d.Data())
	data := array.NewData(want, n, []*memory.Buffer{validity, offBuf, dataBuf}, nil, nulls, 0)
	if validity != nil {
		validity.Release()
	}
	offBuf.Release()
	dataBuf.Release()
	out := array.MakeFromData(data)
	data.Release()
	return out, nil
}
