package partition

import (
	"encoding/binary"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// StatsRange is a column chunk's statistics in key encoding (see AppendKey),
// so they compare with bytes.Compare against encoded values.
type StatsRange struct {
	Lo, Hi []byte
	// MinMax is false when the statistics give no usable range.
	MinMax bool
	// MayHaveNulls is true unless the statistics say there are no nulls.
	MayHaveNulls bool
}

// MayContain reports whether a row group with these statistics may hold the
// encoded value v (one value's encoding, tag included), as a pruning reader
// decides: without usable statistics it must read the row group.
func (s StatsRange) MayContain(v []byte) bool {
	if len(v) == 0 {
		return true
	}
	if v[0] == tagNull {
		return s.MayHaveNulls
	}
	if !s.MinMax {
		return true
	}
	return string(s.Lo) <= string(v) && string(v) <= string(s.Hi)
}

// StatsFor converts parquet statistics of a column whose Arrow type is t.
func StatsFor(t arrow.DataType, st metadata.TypedStatistics) StatsRange {
	r := StatsRange{MayHaveNulls: true}
	if st == nil {
		return r
	}
	if st.HasNullCount() && st.NullCount() == 0 {
		r.MayHaveNulls = false
	}
	if !st.HasMinMax() {
		return r
	}
	enc := func(f func([]byte) []byte) []byte { return f([]byte{tagValue}) }
	switch s := st.(type) {
	case *metadata.BooleanStatistics:
		b := func(v bool) []byte {
			x := uint64(0)
			if v {
				x = 1
			}
			return binary.BigEndian.AppendUint64([]byte{tagValue}, x)
		}
		r.Lo, r.Hi = b(s.Min()), b(s.Max())
	case *metadata.Int32Statistics:
		lo, hi, ok := intRange(t, int64(s.Min()), int64(s.Max()), 32)
		if !ok {
			return r
		}
		r.Lo, r.Hi = lo, hi
	case *metadata.Int64Statistics:
		lo, hi, ok := intRange(t, s.Min(), s.Max(), 64)
		if !ok {
			return r
		}
		r.Lo, r.Hi = lo, hi
	case *metadata.Float32Statistics:
		r.Lo = enc(func(d []byte) []byte { return appendFloat(d, float64(s.Min())) })
		r.Hi = enc(func(d []byte) []byte { return appendFloat(d, float64(s.Max())) })
	case *metadata.Float64Statistics:
		r.Lo = enc(func(d []byte) []byte { return appendFloat(d, s.Min()) })
		r.Hi = enc(func(d []byte) []byte { return appendFloat(d, s.Max()) })
	case *metadata.ByteArrayStatistics:
		lo, hi, ok := bytesRange(t, s.Min(), s.Max())
		if !ok {
			return r
		}
		r.Lo, r.Hi = lo, hi
	case *metadata.FixedLenByteArrayStatistics:
		lo, hi, ok := bytesRange(t, s.Min(), s.Max())
		if !ok {
			return r
		}
		r.Lo, r.Hi = lo, hi
	default:
		return r
	}
	r.MinMax = true
	return r
}

func intRange(t arrow.DataType, lo, hi int64, bits int) ([]byte, []byte, bool) {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64, arrow.DATE32, arrow.DATE64,
		arrow.TIME32, arrow.TIME64, arrow.TIMESTAMP, arrow.DURATION:
		if t.ID() == arrow.DATE64 {
			return nil, nil, false // stored as days, keyed as milliseconds
		}
		return appendInt([]byte{tagValue}, lo), appendInt([]byte{tagValue}, hi), true
	case arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64:
		u := func(v int64) uint64 {
			if bits == 32 {
				return uint64(uint32(v))
			}
			return uint64(v)
		}
		return binary.BigEndian.AppendUint64([]byte{tagValue}, u(lo)), binary.BigEndian.AppendUint64([]byte{tagValue}, u(hi)), true
	case arrow.DECIMAL128:
		return decKey(big.NewInt(lo)), decKey(big.NewInt(hi)), true
	}
	return nil, nil, false
}

func bytesRange(t arrow.DataType, lo, hi []byte) ([]byte, []byte, bool) {
	switch t.ID() {
	case arrow.STRING, arrow.LARGE_STRING, arrow.BINARY, arrow.LARGE_BINARY, arrow.FIXED_SIZE_BINARY:
		return appendBytes([]byte{tagValue}, lo), appendBytes([]byte{tagValue}, hi), true
	case arrow.DECIMAL128:
		return decKey(twos(lo)), decKey(twos(hi)), true
	}
	return nil, nil, false
}

// twos reads a big-endian two's complement integer.
func twos(b []byte) *big.Int {
	v := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return v
}

// decKey encodes a decimal128 unscaled value as AppendKey does.
func decKey(v *big.Int) []byte {
	m := new(big.Int).And(v, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1)))
	var b [16]byte
	m.FillBytes(b[:])
	b[0] ^= 0x80
	return append([]byte{tagValue}, b[:]...)
}

// IsNullKey reports whether an encoded key part is the null value.
func IsNullKey(part []byte) bool { return len(part) > 0 && part[0] == tagNull }

// ConstantStats is the exact range of a row group whose every row holds
// the one value of v (a partition folder's value).
func ConstantStats(v arrow.Array) StatsRange {
	if v.IsNull(0) {
		return StatsRange{MinMax: true, MayHaveNulls: true} // an empty range: nulls only
	}
	k := AppendKey(nil, v, 0)
	return StatsRange{Lo: k, Hi: k, MinMax: true}
}
