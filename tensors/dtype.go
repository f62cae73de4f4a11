package tensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// DType is a safetensors dtype name.
type DType string

// The dtypes relayout writes.
const (
	Bool DType = "BOOL"
	U8   DType = "U8"
	I8   DType = "I8"
	U16  DType = "U16"
	I16  DType = "I16"
	U32  DType = "U32"
	I32  DType = "I32"
	U64  DType = "U64"
	I64  DType = "I64"
	F16  DType = "F16"
	BF16 DType = "BF16"
	F32  DType = "F32"
	F64  DType = "F64"
)

// Size is the size of one element in bytes.
func (d DType) Size() int {
	switch d {
	case Bool, U8, I8:
		return 1
	case U16, I16, F16, BF16:
		return 2
	case U32, I32, F32:
		return 4
	default:
		return 8
	}
}

// NumPy returns the NumPy dtype string of d ("<f4"); bfloat16, which NumPy
// lacks, is read as its raw bits ("<u2").
func (d DType) NumPy() string {
	switch d {
	case Bool:
		return "|b1"
	case U8:
		return "|u1"
	case I8:
		return "|i1"
	case U16, BF16:
		return "<u2"
	case I16:
		return "<i2"
	case U32:
		return "<u4"
	case I32:
		return "<i4"
	case U64:
		return "<u8"
	case I64:
		return "<i8"
	case F16:
		return "<f2"
	case F32:
		return "<f4"
	}
	return "<f8"
}

func (d DType) isFloat() bool { return d == F16 || d == BF16 || d == F32 || d == F64 }

// ParseDType accepts NumPy/PyTorch-style names (float32, bfloat16, int64,
// uint8, bool) and safetensors names (F32, BF16, I64).
func ParseDType(s string) (DType, error) {
	switch s {
	case "float64", "double", "F64":
		return F64, nil
	case "float32", "float", "F32":
		return F32, nil
	case "float16", "half", "F16":
		return F16, nil
	case "bfloat16", "BF16":
		return BF16, nil
	case "int64", "long", "I64":
		return I64, nil
	case "int32", "int", "I32":
		return I32, nil
	case "int16", "I16":
		return I16, nil
	case "int8", "I8":
		return I8, nil
	case "uint64", "U64":
		return U64, nil
	case "uint32", "U32":
		return U32, nil
	case "uint16", "U16":
		return U16, nil
	case "uint8", "U8":
		return U8, nil
	case "bool", "BOOL":
		return Bool, nil
	}
	return "", fmt.Errorf("unknown dtype %q (use float64, float32, float16, bfloat16, int64, int32, int16, int8, uint64, uint32, uint16, uint8 or bool)", s)
}

func init() {
	// Tensors are written by reinterpreting Go slices as bytes.
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		panic("relayout tensors need a little-endian machine")
	}
}

type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// view reinterprets b as n elements of T. b comes from a buffer holding only
// T-sized elements, so it is T-aligned.
func view[T any](b []byte, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// grow extends buf by n bytes and returns it with the new tail.
func grow(buf []byte, n int) ([]byte, []byte) {
	off := len(buf)
	if cap(buf)-off < n {
		buf = slices.Grow(buf, max(n, 64, cap(buf)))
	}
	buf = buf[:off+n]
	return buf, buf[off:]
}

func castTo[D, S number](dst []D, src []S) {
	for i, v := range src {
		dst[i] = D(v)
	}
}

// appendCast appends src converted to dt. Float-to-integer conversions
// truncate toward zero; out-of-range values wrap as Go's conversions do.
func appendCast[S number](buf []byte, src []S, dt DType) []byte {
	n := len(src)
	buf, t := grow(buf, n*dt.Size())
	switch dt {
	case I8:
		castTo(view[int8](t, n), src)
	case U8:
		castTo(view[uint8](t, n), src)
	case I16:
		castTo(view[int16](t, n), src)
	case U16:
		castTo(view[uint16](t, n), src)
	case I32:
		castTo(view[int32](t, n), src)
	case U32:
		castTo(view[uint32](t, n), src)
	case I64:
		castTo(view[int64](t, n), src)
	case U64:
		castTo(view[uint64](t, n), src)
	case F32:
		castTo(view[float32](t, n), src)
	case F64:
		castTo(view[float64](t, n), src)
	case F16:
		d := view[uint16](t, n)
		for i, v := range src {
			d[i] = Float16Bits(float64(v))
		}
	case BF16:
		d := view[uint16](t, n)
		for i, v := range src {
			d[i] = BFloat16Bits(float32(v))
		}
	case Bool:
		d := view[uint8](t, n)
		for i, v := range src {
			if v != 0 {
				d[i] = 1
			} else {
				d[i] = 0
			}
		}
	}
	return buf
}

// Float16Bits rounds f to IEEE half precision (round to nearest, ties to
// even, directly from float64 as NumPy's astype does) and returns its bits.
// Values beyond the half range become infinities; NaN stays NaN.
func Float16Bits(f float64) uint16 {
	b := math.Float64bits(f)
	sign := uint16(b>>48) & 0x8000
	exp := int(b>>52) & 0x7ff
	mant := b & (1<<52 - 1)
	if exp == 0x7ff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 1023 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // a subnormal half, or zero
		if e < -10 {
			return sign
		}
		m := mant | 1<<52
		shift := uint(43 - e)
		r := m >> shift
		rem, half := m&(1<<shift-1), uint64(1)<<(shift-1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into the smallest normal: still the right bits
		}
		return sign | uint16(r)
	}
	r := mant >> 42
	rem, half := mant&(1<<42-1), uint64(1)<<41
	if rem > half || (rem == half && r&1 == 1) {
		r++
		if r == 1<<10 {
			r = 0
			e++
			if e >= 0x1f {
				return sign | 0x7c00
			}
		}
	}
	return sign | uint16(e)<<10 | uint16(r)
}

// BFloat16Bits rounds f to bfloat16 (round to nearest, ties to even) and
// returns its bits. NaN stays NaN.
func BFloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40 // keep it a quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// fillBytes encodes v as one element of dt.
func fillBytes(v float64, dt DType) []byte {
	if dt.isFloat() {
		return appendCast(nil, []float64{v}, dt)
	}
	return appendCast(nil, []int64{int64(v)}, dt)
}
