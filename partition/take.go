package partition

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// A span is a run of consecutive rows in one chunk of a column held as
// chunks: chunk c, logical rows [s, e).
type span struct {
	c    int32
	s, e int64
}

// BatchStarts numbers rows across batches: element k is batch k's first
// row, and the last element is the total.
func BatchStarts(recs []arrow.RecordBatch) []int64 {
	starts := make([]int64, len(recs)+1)
	for k, r := range recs {
		starts[k+1] = starts[k] + r.NumRows()
	}
	return starts
}

// LocateRow returns the batch holding row i (numbered by BatchStarts) and
// i's row in it. k is the caller's cursor, the batch of the row located
// before: rows mostly come from it, so it is tried first.
func LocateRow(starts []int64, i int64, k *int) (int, int64) {
	if i < starts[*k] || i >= starts[*k+1] {
		*k = sort.Search(len(starts)-1, func(j int) bool { return starts[j+1] > i })
	}
	return *k, i - starts[*k]
}

// spansOf maps rows numbered across chunks (BatchStarts) to runs of
// consecutive rows in one chunk, appended to out.
func spansOf(starts []int64, idx []int64, out []span) ([]span, error) {
	out = out[:0]
	n := starts[len(starts)-1]
	k := 0
	for _, i := range idx {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("internal: row %d of %d", i, n)
		}
		c, r := LocateRow(starts, i, &k)
		if m := len(out) - 1; m >= 0 && out[m].c == int32(c) && out[m].e == r {
			out[m].e++
			continue
		}
		out = append(out, span{int32(c), r, r + 1})
	}
	return out, nil
}

// spanRows is the number of rows the spans cover.
func spanRows(spans []span) int {
	n := int64(0)
	for _, p := range spans {
		n += p.e - p.s
	}
	return int(n)
}

// gatherable reports whether gather handles the type: fixed-width values,
// booleans, binary and strings, and lists of any of them. Others
// (dictionaries, structs, maps, unions, extensions) are concatenated and
// taken by arrow's compute kernels.
func gatherable(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.BOOL, arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		return true
	case arrow.LIST:
		return gatherable(t.(*arrow.ListType).Elem())
	case arrow.LARGE_LIST:
		return gatherable(t.(*arrow.LargeListType).Elem())
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT16, arrow.FLOAT32, arrow.FLOAT64,
		arrow.DATE32, arrow.DATE64, arrow.TIMESTAMP, arrow.TIME32, arrow.TIME64, arrow.DURATION,
		arrow.DECIMAL32, arrow.DECIMAL64, arrow.DECIMAL128, arrow.DECIMAL256, arrow.FIXED_SIZE_BINARY,
		arrow.INTERVAL_MONTHS, arrow.INTERVAL_DAY_TIME, arrow.INTERVAL_MONTH_DAY_NANO:
		fw, ok := t.(arrow.FixedWidthDataType)
		return ok && fw.BitWidth() >= 8 && fw.BitWidth()%8 == 0
	}
	return false
}

// gather copies the rows of spans out of chunks (arrays of one
// gatherable type) into one new array. It is arrow's Take over a chunked
// column, without concatenating the chunks first: one pass per buffer,
// runs of rows copied at once, a list's elements as one run per list.
func gather(t arrow.DataType, chunks []arrow.ArrayData, spans []span) (arrow.ArrayData, error) {
	n := spanRows(spans)
	validity, nulls := gatherValidity(chunks, spans, n)
	switch t.ID() {
	case arrow.BOOL:
		out := make([]byte, bitutil.BytesForBits(int64(n)))
		i := 0
		for _, p := range spans {
			d := chunks[p.c]
			bitutil.CopyBitmap(d.Buffers()[1].Bytes(), d.Offset()+int(p.s), int(p.e-p.s), out, i)
			i += int(p.e - p.s)
		}
		return array.NewData(t, n, []*memory.Buffer{validity, memory.NewBufferBytes(out)}, nil, nulls, 0), nil
	case arrow.STRING, arrow.BINARY, arrow.LARGE_STRING, arrow.LARGE_BINARY:
		large := t.ID() == arrow.LARGE_STRING || t.ID() == arrow.LARGE_BINARY
		offs, vals, err := gatherOffsets(chunks, spans, n, large)
		if err != nil {
			return nil, err
		}
		data := make([]byte, spanRows(vals))
		o := 0
		for _, p := range vals {
			if p.e > p.s {
				o += copy(data[o:], chunks[p.c].Buffers()[2].Bytes()[p.s:p.e])
			}
		}
		return array.NewData(t, n, []*memory.Buffer{validity, offs, memory.NewBufferBytes(data)}, nil, nulls, 0), nil
	case arrow.LIST, arrow.LARGE_LIST:
		var elem arrow.DataType
		large := t.ID() == arrow.LARGE_LIST
		if large {
			elem = t.(*arrow.LargeListType).Elem()
		} else {
			elem = t.(*arrow.ListType).Elem()
		}
		offs, child, err := gatherOffsets(chunks, spans, n, large)
		if err != nil {
			return nil, err
		}
		kids := make([]arrow.ArrayData, len(chunks))
		for k, d := range chunks {
			kids[k] = d.Children()[0]
		}
		cd, err := gather(elem, kids, child)
		if err != nil {
			return nil, err
		}
		defer cd.Release()
		return array.NewData(t, n, []*memory.Buffer{validity, offs}, []arrow.ArrayData{cd}, nulls, 0), nil
	}
	w := t.(arrow.FixedWidthDataType).BitWidth() / 8
	out := make([]byte, n*w)
	gatherFixed(out, w, chunks, spans)
	return array.NewData(t, n, []*memory.Buffer{validity, memory.NewBufferBytes(out)}, nil, nulls, 0), nil
}

// gatherValidity builds the validity bitmap of the n gathered rows, or nil
// when none of them is null.
func gatherValidity(chunks []arrow.ArrayData, spans []span, n int) (*memory.Buffer, int) {
	any := false
	for _, d := range chunks {
		if d.NullN() != 0 { // -1: unknown (a slice)
			any = true
			break
		}
	}
	if !any {
		return nil, 0
	}
	out := make([]byte, bitutil.BytesForBits(int64(n)))
	i := 0
	for _, p := range spans {
		d := chunks[p.c]
		m := int(p.e - p.s)
		if bm := d.Buffers()[0]; d.NullN() != 0 && bm != nil {
			bitutil.CopyBitmap(bm.Bytes(), d.Offset()+int(p.s), m, out, i)
		} else {
			bitutil.SetBitsTo(out, int64(i), int64(m), true)
		}
		i += m
	}
	nulls := n - bitutil.CountSetBits(out, 0, n)
	if nulls == 0 {
		return nil, 0
	}
	return memory.NewBufferBytes(out), nulls
}

// gatherFixed copies values of w bytes each: a single row by its width, a
// run as one copy.
func gatherFixed(out []byte, w int, chunks []arrow.ArrayData, spans []span) {
	src := make([][]byte, len(chunks))
	for k, d := range chunks {
		if b := d.Buffers()[1]; b != nil {
			src[k] = b.Bytes()[d.Offset()*w:]
		}
	}
	i := 0
	for _, p := range spans {
		if p.e-p.s > 1 {
			i += copy(out[i:], src[p.c][int(p.s)*w:int(p.e)*w])
			continue
		}
		r := int(p.s) * w
		switch w {
		case 8:
			binary.LittleEndian.PutUint64(out[i:], binary.LittleEndian.Uint64(src[p.c][r:]))
		case 4:
			binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(src[p.c][r:]))
		case 2:
			binary.LittleEndian.PutUint16(out[i:], binary.LittleEndian.Uint16(src[p.c][r:]))
		case 1:
			out[i] = src[p.c][r]
		default:
			copy(out[i:i+w], src[p.c][r:r+w])
		}
		i += w
	}
}

// gatherOffsets builds the offsets of the n gathered variable-size values
// (binary, strings, lists) and the spans of what they hold: bytes, or
// elements of the chunks' child arrays.
func gatherOffsets(chunks []arrow.ArrayData, spans []span, n int, large bool) (*memory.Buffer, []span, error) {
	if large {
		return gatherOffsetsOf[int64](chunks, spans, n, arrow.Int64Traits.CastFromBytes, math.MaxInt64)
	}
	return gatherOffsetsOf[int32](chunks, spans, n, arrow.Int32Traits.CastFromBytes, math.MaxInt32)
}

func gatherOffsetsOf[T int32 | int64](chunks []arrow.ArrayData, spans []span, n int, cast func([]byte) []T, most int64) (*memory.Buffer, []span, error) {
	var zero [2]T // the offsets of a chunk without an offsets buffer (no rows)
	ofs := make([][]T, len(chunks))
	for k, d := range chunks {
		if b := d.Buffers()[1]; b != nil && b.Len() > 0 {
			ofs[k] = cast(b.Bytes())[d.Offset():]
		} else {
			ofs[k] = zero[:]
		}
	}
	var t T
	out := make([]byte, (n+1)*int(unsafe.Sizeof(t)))
	o := cast(out)
	held := make([]span, 0, len(spans))
	var total int64
	i := 0
	for _, p := range spans {
		of := ofs[p.c][p.s : p.e+1]
		base := int64(of[0])
		if e := int64(of[len(of)-1]); e > base {
			held = append(held, span{p.c, base, e})
		}
		if total+int64(of[len(of)-1])-base > most {
			return nil, nil, fmt.Errorf("%d rows hold more than 2^31 bytes or elements", n)
		}
		shift := T(total - base)
		for _, v := range of[1:] {
			i++
			o[i] = v + shift
		}
		total += int64(of[len(of)-1]) - base
	}
	return memory.NewBufferBytes(out), held, nil
}
