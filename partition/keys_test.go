package partition

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// natural compares two values of a test column the way a person would,
// independently of the encoding: nulls first.
type value struct {
	null bool
	i    int64
	u    uint64
	f    float64
	s    string
}

func cmpNatural(kind string, a, b value) int {
	if a.null || b.null {
		switch {
		case a.null && b.null:
			return 0
		case a.null:
			return -1
		}
		return 1
	}
	switch kind {
	case "int", "date", "ts", "dec":
		return cmpOrdered(a.i, b.i)
	case "uint":
		return cmpOrdered(a.u, b.u)
	case "float":
		an, bn := math.IsNaN(a.f), math.IsNaN(b.f)
		switch {
		case an && bn:
			return 0
		case an:
			return 1 // NaN sorts last
		case bn:
			return -1
		}
		return cmpOrdered(a.f, b.f) // -0 == 0
	case "string":
		return strings.Compare(a.s, b.s)
	}
	panic(kind)
}

func cmpOrdered[T int64 | uint64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func build(kind string, vals []value) arrow.Array {
	mem := memory.DefaultAllocator
	switch kind {
	case "int":
		b := array.NewInt32Builder(mem)
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(int32(v.i))
			}
		}
		return b.NewArray()
	case "uint":
		b := array.NewUint64Builder(mem)
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(v.u)
			}
		}
		return b.NewArray()
	case "float":
		b := array.NewFloat32Builder(mem)
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(float32(v.f))
			}
		}
		return b.NewArray()
	case "date":
		b := array.NewDate32Builder(mem)
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(arrow.Date32(v.i))
			}
		}
		return b.NewArray()
	case "ts":
		b := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Microsecond})
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(arrow.Timestamp(v.i))
			}
		}
		return b.NewArray()
	case "dec":
		b := array.NewDecimal128Builder(mem, &arrow.Decimal128Type{Precision: 38, Scale: 2})
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(decimal128.FromI64(v.i))
			}
		}
		return b.NewArray()
	case "string":
		b := array.NewStringBuilder(mem)
		for _, v := range vals {
			if v.null {
				b.AppendNull()
			} else {
				b.Append(v.s)
			}
		}
		return b.NewArray()
	}
	panic(kind)
}

func randValue(r *rand.Rand, kind string) value {
	if r.IntN(10) == 0 {
		return value{null: true}
	}
	switch kind {
	case "int", "date":
		return value{i: int64(r.Int32N(2000) - 1000)}
	case "ts", "dec":
		return value{i: r.Int64N(1<<62) - 1<<61}
	case "uint":
		return value{u: r.Uint64() >> uint(r.IntN(64))}
	case "float":
		specials := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), -1.5, 1e-30}
		if r.IntN(4) == 0 {
			return value{f: specials[r.IntN(len(specials))]}
		}
		return value{f: float64(float32(r.NormFloat64() * 100))}
	case "string":
		alphabet := []string{"", "a", "b", "\x00", "\xff", "ab", "a\x00", "a\x00b", "é"}
		var sb strings.Builder
		for n := r.IntN(4); n > 0; n-- {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return value{s: sb.String()}
	}
	panic(kind)
}

// TestAppendKeyOrdersLikeValues: sorting encoded keys gives the natural
// order of the values, for every supported kind, with nulls, NaN, -0,
// empty strings, zero bytes and prefixes.
func TestAppendKeyOrdersLikeValues(t *testing.T) {
	for _, kind := range []string{"int", "uint", "float", "date", "ts", "dec", "string"} {
		t.Run(kind, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(len(kind))))
			vals := make([]value, 500)
			for i := range vals {
				vals[i] = randValue(r, kind)
			}
			arr := build(kind, vals)
			defer arr.Release()
			keys := make([][]byte, len(vals))
			for i := range vals {
				keys[i] = AppendKey(nil, arr, i)
			}
			for i := range vals {
				for j := range vals {
					want := cmpNatural(kind, vals[i], vals[j])
					if kind == "float" {
						// compare through float32, as stored
						want = cmpNatural(kind, value{null: vals[i].null, f: float64(float32(vals[i].f))}, value{null: vals[j].null, f: float64(float32(vals[j].f))})
					}
					if got := bytes.Compare(keys[i], keys[j]); got != want {
						t.Fatalf("%v vs %v: key order %d, value order %d", vals[i], vals[j], got, want)
					}
				}
			}
		})
	}
}

// TestTupleKeysAreUnambiguous: concatenated column encodings never let a
// value's bytes run into the next column (("a", "bc") != ("ab", "c")).
func TestTupleKeysAreUnambiguous(t *testing.T) {
	a := build("string", []value{{s: "a"}, {s: "ab"}, {s: "a\x00"}, {s: "a"}})
	b := build("string", []value{{s: "bc"}, {s: "c"}, {s: "c"}, {s: "\x00c"}})
	seen := map[string]int{}
	for i := 0; i < 4; i++ {
		k := AppendKey(AppendKey(nil, a, i), b, i)
		if j, ok := seen[string(k)]; ok {
			t.Fatalf("rows %d and %d encode equal", i, j)
		}
		seen[string(k)] = i
	}
}

func FuzzStringKeyOrder(f *testing.F) {
	f.Add("a", "a\x00")
	f.Add("", "\x00")
	f.Add("ab", "a\xff")
	f.Fuzz(func(t *testing.T, x, y string) {
		arr := build("string", []value{{s: x}, {s: y}})
		defer arr.Release()
		kx, ky := AppendKey(nil, arr, 0), AppendKey(nil, arr, 1)
		if got, want := bytes.Compare(kx, ky), strings.Compare(x, y); got != want {
			t.Fatalf("%q vs %q: key order %d, string order %d", x, y, got, want)
		}
	})
}

func TestSupportedKeyType(t *testing.T) {
	if err := SupportedKeyType(arrow.ListOf(arrow.PrimitiveTypes.Int64)); err == nil {
		t.Fatal("a list was accepted as a key")
	}
	if err := SupportedKeyType(arrow.BinaryTypes.String); err != nil {
		t.Fatal(err)
	}
}
