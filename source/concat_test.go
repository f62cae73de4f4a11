package source

import (
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bigString is a string array of one value of n zero bytes (the bytes are
// never touched, so the memory is never faulted in).
func bigString(n int) arrow.Array {
	offs := arrow.Int32Traits.CastToBytes([]int32{0, int32(n)})
	d := array.NewData(arrow.BinaryTypes.String, 1, []*memory.Buffer{nil, memory.NewBufferBytes(offs), memory.NewBufferBytes(make([]byte, n))}, nil, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// TestConcatRefusesOffsetOverflow: pqarrow hands a row group's column in
// several chunks when its strings (or list elements) pass 2 GiB, and
// arrow-go's Concatenate then wraps the 32-bit offsets around: the array
// failed validation and a valid file was called corrupt. concat now says
// what does not fit, at any depth (strings, lists of strings, structs).
func TestConcatRefusesOffsetOverflow(t *testing.T) {
	const n = 1<<30 + 1<<29 // 1.5 GiB: two exceed math.MaxInt32
	s := bigString(n)
	defer s.Release()
	listOf := func(v arrow.Array) arrow.Array {
		offs := arrow.Int32Traits.CastToBytes([]int32{0, int32(v.Len())})
		d := array.NewData(arrow.ListOf(v.DataType()), 1, []*memory.Buffer{nil, memory.NewBufferBytes(offs)}, []arrow.ArrayData{v.Data()}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	structOf := func(v arrow.Array) arrow.Array {
		a, err := array.NewStructArray([]arrow.Array{v}, []string{"s"})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	largeListOf := func(v arrow.Array) arrow.Array {
		offs := arrow.Int64Traits.CastToBytes([]int64{0, int64(v.Len())})
		d := array.NewData(arrow.LargeListOf(v.DataType()), 1, []*memory.Buffer{nil, memory.NewBufferBytes(offs)}, []arrow.ArrayData{v.Data()}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	fixedOf := func(v arrow.Array) arrow.Array {
		d := array.NewData(arrow.FixedSizeListOf(int32(v.Len()), v.DataType()), 1, []*memory.Buffer{nil}, []arrow.ArrayData{v.Data()}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	l, st, ll, fl := listOf(s), structOf(s), largeListOf(s), fixedOf(s)
	ls := listOf(st)
	for _, a := range []arrow.Array{l, st, ll, fl, ls} {
		defer a.Release()
	}
	for _, c := range []struct {
		name string
		a    arrow.Array
	}{{"strings", s}, {"list of strings", l}, {"struct of strings", st}, {"list of structs", ls},
		{"large list of strings", ll}, {"fixed-size list of strings", fl}} {
		ch := arrow.NewChunked(c.a.DataType(), []arrow.Array{c.a, c.a})
		_, err := concat(ch)
		ch.Release()
		if _, ok := err.(errTooLarge); !ok || !strings.Contains(err.Error(), "3221225472 values") {
			t.Fatalf("%s: %v, want the 3221225472 bytes that do not fit %d", c.name, err, math.MaxInt32)
		}
	}
	// What fits is joined.
	small := array.NewStringBuilder(memory.DefaultAllocator)
	small.AppendValues([]string{"a", "bc"}, nil)
	a := small.NewArray()
	small.Release()
	defer a.Release()
	ch := arrow.NewChunked(a.DataType(), []arrow.Array{a, a})
	defer ch.Release()
	got, err := concat(ch)
	if err != nil || got.Len() != 4 || got.(*array.String).Value(3) != "bc" {
		t.Fatalf("two small chunks: %v, %v", got, err)
	}
	got.Release()
}
