package partition

import (
	"fmt"
	"math"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// A loc is a row's place in a column held as chunks: the chunk, and the
// row's logical index in it.
type loc struct{ c, r int32 }

// locate maps rows numbered across chunks (starts[k] is chunk k's first
// row; the last entry is the total) to their chunks.
func locate(starts []int64, idx []int64, out []loc) ([]loc, error) {
	out = out[:0]
	n := starts[len(starts)-1]
	k := 0
	for _, i := range idx {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("internal: row %d of %d", i, n)
		}
		// Rows come in runs from one chunk far more often than not.
		if i < starts[k] || i >= starts[k+1] {
			k = sort.Search(len(starts)-1, func(j int) bool { return starts[j+1] > i })
		}
		out = append(out, loc{int32(k), int32(i - starts[k])})
	}
	return out, nil
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

// gather copies the rows at locs out of chunks (arrays of one gatherable
// type) into one new array. It is arrow's Take over a chunked column,
// without concatenating the chunks first: one pass per buffer, values
// copied by their width.
func gather(t arrow.DataType, chunks []arrow.ArrayData, locs []loc) (arrow.ArrayData, error) {
	n := len(locs)
	validity, nulls := gatherValidity(chunks, locs)
	switch t.ID() {
	case arrow.BOOL:
		out := make([]byte, bitutil.BytesForBits(int64(n)))
		for i, l := range locs {
			d := chunks[l.c]
			if bitutil.BitIsSet(d.Buffers()[1].Bytes(), d.Offset()+int(l.r)) {
				bitutil.SetBit(out, i)
			}
		}
		return array.NewData(t, n, []*memory.Buffer{validity, memory.NewBufferBytes(out)}, nil, nulls, 0), nil
	case arrow.STRING, arrow.BINARY:
		offs, data, err := gatherBinary32(chunks, locs)
		if err != nil {
			return nil, err
		}
		return array.NewData(t, n, []*memory.Buffer{validity, offs, data}, nil, nulls, 0), nil
	case arrow.LARGE_STRING, arrow.LARGE_BINARY:
		offs, data := gatherBinary64(chunks, locs)
		return array.NewData(t, n, []*memory.Buffer{validity, offs, data}, nil, nulls, 0), nil
	case arrow.LIST, arrow.LARGE_LIST:
		var elem arrow.DataType
		if t.ID() == arrow.LIST {
			elem = t.(*arrow.ListType).Elem()
		} else {
			elem = t.(*arrow.LargeListType).Elem()
		}
		offs, child, err := gatherLists(chunks, locs, t.ID() == arrow.LARGE_LIST)
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
	gatherFixed(out, w, chunks, locs)
	return array.NewData(t, n, []*memory.Buffer{validity, memory.NewBufferBytes(out)}, nil, nulls, 0), nil
}

// gatherValidity builds the validity bitmap of the gathered rows, or nil
// when none of them is null.
func gatherValidity(chunks []arrow.ArrayData, locs []loc) (*memory.Buffer, int) {
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
	out := make([]byte, bitutil.BytesForBits(int64(len(locs))))
	nulls := 0
	for i, l := range locs {
		d := chunks[l.c]
		bm := d.Buffers()[0]
		if d.NullN() == 0 || bm == nil || bitutil.BitIsSet(bm.Bytes(), d.Offset()+int(l.r)) {
			bitutil.SetBit(out, i)
		} else {
			nulls++
		}
	}
	if nulls == 0 {
		return nil, 0
	}
	return memory.NewBufferBytes(out), nulls
}

// gatherFixed copies values of w bytes each.
func gatherFixed(out []byte, w int, chunks []arrow.ArrayData, locs []loc) {
	src := make([][]byte, len(chunks))
	for k, d := range chunks {
		if b := d.Buffers()[1]; b != nil {
			src[k] = b.Bytes()[d.Offset()*w:]
		}
	}
	switch w {
	case 8:
		o := arrow.Uint64Traits.CastFromBytes(out)
		s := make([][]uint64, len(src))
		for k, b := range src {
			s[k] = arrow.Uint64Traits.CastFromBytes(b)
		}
		for i, l := range locs {
			o[i] = s[l.c][l.r]
		}
	case 4:
		o := arrow.Uint32Traits.CastFromBytes(out)
		s := make([][]uint32, len(src))
		for k, b := range src {
			s[k] = arrow.Uint32Traits.CastFromBytes(b)
		}
		for i, l := range locs {
			o[i] = s[l.c][l.r]
		}
	case 2:
		o := arrow.Uint16Traits.CastFromBytes(out)
		s := make([][]uint16, len(src))
		for k, b := range src {
			s[k] = arrow.Uint16Traits.CastFromBytes(b)
		}
		for i, l := range locs {
			o[i] = s[l.c][l.r]
		}
	case 1:
		for i, l := range locs {
			out[i] = src[l.c][l.r]
		}
	default:
		for i, l := range locs {
			r := int(l.r) * w
			copy(out[i*w:(i+1)*w], src[l.c][r:r+w])
		}
	}
}

// gatherBinary32 gathers binary or string values with 32-bit offsets.
func gatherBinary32(chunks []arrow.ArrayData, locs []loc) (*memory.Buffer, *memory.Buffer, error) {
	offs := make([][]int32, len(chunks))
	vals := make([][]byte, len(chunks))
	for k, d := range chunks {
		if b := d.Buffers()[1]; b != nil && b.Len() > 0 {
			offs[k] = arrow.Int32Traits.CastFromBytes(b.Bytes())[d.Offset():]
		}
		if b := d.Buffers()[2]; b != nil {
			vals[k] = b.Bytes()
		}
	}
	out := make([]byte, arrow.Int32Traits.BytesRequired(len(locs)+1))
	o := arrow.Int32Traits.CastFromBytes(out)
	var total int64
	for i, l := range locs {
		if of := offs[l.c]; of != nil {
			total += int64(of[l.r+1] - of[l.r])
		}
		if total > math.MaxInt32 {
			return nil, nil, fmt.Errorf("%d rows hold more than 2 GiB of values", len(locs))
		}
		o[i+1] = int32(total)
	}
	data := make([]byte, total)
	for i, l := range locs {
		if of := offs[l.c]; of != nil {
			copy(data[o[i]:o[i+1]], vals[l.c][of[l.r]:of[l.r+1]])
		}
	}
	return memory.NewBufferBytes(out), memory.NewBufferBytes(data), nil
}

// gatherBinary64 gathers binary or string values with 64-bit offsets.
func gatherBinary64(chunks []arrow.ArrayData, locs []loc) (*memory.Buffer, *memory.Buffer) {
	offs := make([][]int64, len(chunks))
	vals := make([][]byte, len(chunks))
	for k, d := range chunks {
		if b := d.Buffers()[1]; b != nil && b.Len() > 0 {
			offs[k] = arrow.Int64Traits.CastFromBytes(b.Bytes())[d.Offset():]
		}
		if b := d.Buffers()[2]; b != nil {
			vals[k] = b.Bytes()
		}
	}
	out := make([]byte, arrow.Int64Traits.BytesRequired(len(locs)+1))
	o := arrow.Int64Traits.CastFromBytes(out)
	var total int64
	for i, l := range locs {
		if of := offs[l.c]; of != nil {
			total += of[l.r+1] - of[l.r]
		}
		o[i+1] = total
	}
	data := make([]byte, total)
	for i, l := range locs {
		if of := offs[l.c]; of != nil {
			copy(data[o[i]:o[i+1]], vals[l.c][of[l.r]:of[l.r+1]])
		}
	}
	return memory.NewBufferBytes(out), memory.NewBufferBytes(data)
}

// gatherLists builds the gathered lists' offsets and the places of their
// elements in the chunks' child arrays.
func gatherLists(chunks []arrow.ArrayData, locs []loc, large bool) (*memory.Buffer, []loc, error) {
	span := func(l loc) (int64, int64) {
		d := chunks[l.c]
		b := d.Buffers()[1]
		if b == nil || b.Len() == 0 {
			return 0, 0
		}
		j := d.Offset() + int(l.r)
		if large {
			of := arrow.Int64Traits.CastFromBytes(b.Bytes())
			return of[j], of[j+1]
		}
		of := arrow.Int32Traits.CastFromBytes(b.Bytes())
		return int64(of[j]), int64(of[j+1])
	}
	var total int64
	for _, l := range locs {
		s, e := span(l)
		total += e - s
	}
	if !large && total > math.MaxInt32 {
		return nil, nil, fmt.Errorf("%d rows hold more than 2^31 list elements", len(locs))
	}
	child := make([]loc, 0, total)
	var out []byte
	if large {
		out = make([]byte, arrow.Int64Traits.BytesRequired(len(locs)+1))
	} else {
		out = make([]byte, arrow.Int32Traits.BytesRequired(len(locs)+1))
	}
	var o32 []int32
	var o64 []int64
	if large {
		o64 = arrow.Int64Traits.CastFromBytes(out)
	} else {
		o32 = arrow.Int32Traits.CastFromBytes(out)
	}
	for i, l := range locs {
		s, e := span(l)
		if e > math.MaxInt32 {
			return nil, nil, fmt.Errorf("a list's elements start past 2^31 in its row group")
		}
		for r := s; r < e; r++ {
			child = append(child, loc{l.c, int32(r)})
		}
		if large {
			o64[i+1] = int64(len(child))
		} else {
			o32[i+1] = int32(len(child))
		}
	}
	return memory.NewBufferBytes(out), child, nil
}
