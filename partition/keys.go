package partition

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Tags that start each encoded value: nulls sort before every value.
const (
	tagNull  = 0x00
	tagValue = 0x01
)

// TagNull is the first byte of an encoded null (a slice's part for a null
// key value); every encoded value sorts after it.
const TagNull = tagNull

// SupportedKeyType reports whether values of t can be slice or sort keys.
func SupportedKeyType(t arrow.DataType) error {
	switch t.ID() {
	case arrow.BOOL, arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64,
		arrow.UINT8, arrow.UINT16, arrow.UINT32, arrow.UINT64,
		arrow.FLOAT32, arrow.FLOAT64, arrow.STRING, arrow.LARGE_STRING,
		arrow.BINARY, arrow.LARGE_BINARY, arrow.FIXED_SIZE_BINARY,
		arrow.DATE32, arrow.DATE64, arrow.TIMESTAMP, arrow.TIME32, arrow.TIME64,
		arrow.DECIMAL128, arrow.DECIMAL256, arrow.DURATION:
		return nil
	case arrow.DICTIONARY:
		return SupportedKeyType(t.(*arrow.DictionaryType).ValueType)
	}
	return fmt.Errorf("type %s cannot be a key (use a column of integers, floats, strings, binary, bool, dates, times, timestamps or decimals)", t)
}

// AppendKey appends the order-preserving encoding of arr[i] to dst.
//
// Encoding: a null is the single byte 0x00; a value is 0x01 followed by
//   - signed integers, dates, times, timestamps, durations: big-endian with
//     the sign bit flipped (8 bytes, whatever the width);
//   - unsigned integers and bool: big-endian, 8 bytes (bool: 0 or 1);
//   - floats: IEEE-754 bits big-endian, sign bit flipped for positives, all
//     bits flipped for negatives (so -Inf < -1 < -0 < 0 < 1 < Inf < NaN);
//     -0 and 0 are made equal, all NaNs equal;
//   - decimals: two's complement big-endian with the sign bit flipped;
//   - strings and binary: the bytes with 0x00 escaped as 0x00 0xFF, ended by
//     0x00 0x00 (so a prefix sorts first and the tuple stays decodable).
func AppendKey(dst []byte, arr arrow.Array, i int) []byte {
	if arr.IsNull(i) {
		return append(dst, tagNull)
	}
	dst = append(dst, tagValue)
	switch a := arr.(type) {
	case *array.Boolean:
		v := uint64(0)
		if a.Value(i) {
			v = 1
		}
		return binary.BigEndian.AppendUint64(dst, v)
	case *array.Int8:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Int16:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Int32:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Int64:
		return appendInt(dst, a.Value(i))
	case *array.Uint8:
		return binary.BigEndian.AppendUint64(dst, uint64(a.Value(i)))
	case *array.Uint16:
		return binary.BigEndian.AppendUint64(dst, uint64(a.Value(i)))
	case *array.Uint32:
		return binary.BigEndian.AppendUint64(dst, uint64(a.Value(i)))
	case *array.Uint64:
		return binary.BigEndian.AppendUint64(dst, a.Value(i))
	case *array.Float32:
		return appendFloat(dst, float64(a.Value(i)))
	case *array.Float64:
		return appendFloat(dst, a.Value(i))
	case *array.Date32:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Date64:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Time32:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Time64:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Timestamp:
		return appendInt(dst, int64(a.Value(i)))
	case *array.Duration:
		return appendInt(dst, int64(a.Value(i)))
	case *array.String:
		return appendBytes(dst, []byte(a.Value(i)))
	case *array.LargeString:
		return appendBytes(dst, []byte(a.Value(i)))
	case *array.Binary:
		return appendBytes(dst, a.Value(i))
	case *array.LargeBinary:
		return appendBytes(dst, a.Value(i))
	case *array.FixedSizeBinary:
		return appendBytes(dst, a.Value(i))
	case *array.Decimal128:
		v := a.Value(i)
		dst = binary.BigEndian.AppendUint64(dst, uint64(v.HighBits())^(1<<63))
		return binary.BigEndian.AppendUint64(dst, v.LowBits())
	case *array.Decimal256:
		v := a.Value(i).Array()
		dst = binary.BigEndian.AppendUint64(dst, v[3]^(1<<63))
		dst = binary.BigEndian.AppendUint64(dst, v[2])
		dst = binary.BigEndian.AppendUint64(dst, v[1])
		return binary.BigEndian.AppendUint64(dst, v[0])
	case *array.Dictionary:
		return AppendKey(dst[:len(dst)-1], a.Dictionary(), a.GetValueIndex(i))
	}
	panic(fmt.Sprintf("partition: unsupported key type %s", arr.DataType()))
}

func appendInt(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

func appendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		f = 0 // -0 == 0
	}
	if math.IsNaN(f) {
		return binary.BigEndian.AppendUint64(dst, math.MaxUint64)
	}
	b := math.Float64bits(f)
	if b>>63 == 1 {
		b = ^b
	} else {
		b |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, b)
}

func appendBytes(dst, v []byte) []byte {
	for _, c := range v {
		if c == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, 0, 0)
}
