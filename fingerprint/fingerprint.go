// Package fingerprint computes an order-independent content fingerprint of a
// table's rows, so a run can prove that what came out equals what went in.
//
// Spec (relayout-rowhash-v1), so another implementation can reproduce it:
//
//   - Each value gets a 64-bit hash h(v): null is the constant nullHash;
//     booleans, integers, dates, times, timestamps and durations hash their
//     value as a signed 64-bit integer (unsigned as its bits) through mix;
//     floats hash the bits of the float64 value (float32 widened; -0 is 0,
//     every NaN is the same) through mix; strings, binary and decimals
//     (two's complement little-endian bytes) hash with xxhash64 of the bytes;
//     a list is the xxhash round fold of its length and its elements' hashes;
//     a struct folds its fields' hashes; a map is a list of key/value structs.
//   - A row's hash is the fold of its columns' hashes in schema order, then
//     mixed.
//   - The fingerprint is the row count and the sum modulo 2^64 of the row
//     hashes: the same for any order of the same multiset of rows.
//
// Values are hashed by their logical value, not their encoding, so the
// fingerprint of a Parquet file is the same however it is encoded, compressed
// or split into row groups.
//
// The exact hashes (ExactValueHash, ExactRowHashes, an exact group of
// RowHashesWith) are h(v) except for a float -0 and a NaN, which hash by
// their own bits: two values with equal exact hashes are the same bits, as
// packing needs to keep one value for every item of a query. They are not
// part of the fingerprint and not a format: only values hashed by one build
// are compared.
package fingerprint

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/cespare/xxhash/v2"
)

const (
	prime1   uint64 = 11400714785074694791
	prime2   uint64 = 14029467366897019727
	prime3   uint64 = 1609587929392839161
	nullHash uint64 = 0x6a09e667f3bcc908
	seed     uint64 = 0x27d4eb2f165667c5
)

// Algorithm names the fingerprint algorithm in manifests.
const Algorithm = "relayout-rowhash-v1"

func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

func fold(acc, v uint64) uint64 {
	acc ^= v * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

// Sum is a fingerprint: a row count and the sum of the row hashes.
type Sum struct {
	Rows int64
	Hash uint64
}

// Add adds another fingerprint's rows.
func (s *Sum) Add(o Sum) {
	s.Rows += o.Rows
	s.Hash += o.Hash
}

// String formats the hash as 16 hex digits.
func (s Sum) String() string { return fmt.Sprintf("%016x", s.Hash) }

// Record returns the fingerprint of the record's rows.
func Record(rec arrow.RecordBatch) (Sum, error) {
	return RecordWith(rec, nil, nil, nil)
}

// RecordWith returns the fingerprint of the record's rows and fills extra
// with per-row hashes of groups of its columns, as RowHashesWith does.
func RecordWith(rec arrow.RecordBatch, group []int, extra [][]uint64, exact []bool) (Sum, error) {
	hs, err := RowHashesWith(rec.Columns(), int(rec.NumRows()), group, extra, exact)
	if err != nil {
		return Sum{}, err
	}
	var s Sum
	s.Rows = int64(len(hs))
	for _, h := range hs {
		s.Hash += h
	}
	return s, nil
}

// RowHashes returns each row's hash over the given columns.
func RowHashes(cols []arrow.Array, n int) ([]uint64, error) {
	return RowHashesWith(cols, n, nil, nil, nil)
}

// ExactRowHashes returns each row's hash over the given columns from the
// columns' exact hashes (see the package doc): rows whose hashes are
// equal hold the same bits, up to a 64-bit collision.
func ExactRowHashes(cols []arrow.Array, n int) ([]uint64, error) {
	acc := make([]uint64, n)
	for i := range acc {
		acc[i] = seed
	}
	tmp := make([]uint64, n)
	for _, c := range cols {
		if err := valueHashes(c, tmp, &exactness{}); err != nil {
			return nil, err
		}
		for i := range acc {
			acc[i] = fold(acc[i], tmp[i])
		}
	}
	for i := range acc {
		acc[i] = mix(acc[i])
	}
	return acc, nil
}

// RowHashesWith returns each row's hash over cols, as RowHashes does, and
// also writes to extra[g][i] row i's hash over the columns k with group[k]
// == g (in their order), which is what RowHashes over those columns alone
// returns. Each value is hashed once for both. group may be nil (no
// extra), else one entry per column, negative for none; len(extra[g])
// must be n. A group g with exact[g] set (exact may be nil or shorter:
// none) is hashed from its columns' exact hashes, as ExactRowHashes; a
// column holding a -0 or a NaN is then hashed twice.
func RowHashesWith(cols []arrow.Array, n int, group []int, extra [][]uint64, exact []bool) ([]uint64, error) {
	if group != nil && len(group) != len(cols) {
		return nil, fmt.Errorf("internal: %d column groups for %d columns", len(group), len(cols))
	}
	for _, e := range extra {
		if len(e) != n {
			return nil, fmt.Errorf("internal: %d extra hashes for %d rows", len(e), n)
		}
		for i := range e {
			e[i] = seed
		}
	}
	acc := make([]uint64, n)
	for i := range acc {
		acc[i] = seed
	}
	var tmp []uint64
	for k, c := range cols {
		g := -1
		if group != nil {
			g = group[k]
		}
		if g < 0 && foldValues(c, acc) {
			continue
		}
		if tmp == nil {
			tmp = make([]uint64, n)
		}
		var x *exactness
		if g >= 0 && g < len(exact) && exact[g] {
			x = &exactness{}
		}
		if err := valueHashes(c, tmp, x); err != nil {
			return nil, err
		}
		if g >= 0 {
			e := extra[g]
			for i := range e {
				e[i] = fold(e[i], tmp[i])
			}
		}
		if x != nil && x.special { // the fingerprint's are h(v)
			if err := valueHashes(c, tmp, nil); err != nil {
				return nil, err
			}
		}
		for i := range acc {
			acc[i] = fold(acc[i], tmp[i])
		}
	}
	for i := range acc {
		acc[i] = mix(acc[i])
	}
	for _, e := range extra {
		for i := range e {
			e[i] = mix(e[i])
		}
	}
	return acc, nil
}

// foldValues folds h(c[i]) into acc[i] for the common column types
// without nulls, as RowHashes does through valueHashes, without the pass
// over a scratch array between them (and, for a list of numbers, without
// its children's hashes in one); it reports whether it did.
func foldValues(c arrow.Array, acc []uint64) bool {
	if c.NullN() > 0 {
		return false
	}
	switch a := c.(type) {
	case *array.Int32:
		foldInts(acc, a.Int32Values())
	case *array.Int64:
		foldInts(acc, a.Int64Values())
	case *array.Date32:
		foldInts(acc, a.Date32Values())
	case *array.Timestamp:
		foldInts(acc, a.TimestampValues())
	case *array.Float32:
		for i, v := range a.Float32Values() {
			acc[i] = fold(acc[i], floatHash(float64(v)))
		}
	case *array.Float64:
		for i, v := range a.Float64Values() {
			acc[i] = fold(acc[i], floatHash(v))
		}
	case *array.String:
		for i := range acc {
			acc[i] = fold(acc[i], xxhash.Sum64String(a.Value(i)))
		}
	case *array.List:
		child, ok := a.ListValues().(*array.Float32)
		if !ok || child.NullN() > 0 {
			return false
		}
		// As valueHashes' list case: the length, then each element.
		vs := child.Float32Values()
		for i := range acc {
			start, end := a.ValueOffsets(i)
			h := fold(seed, uint64(end-start))
			for _, v := range vs[start:end] {
				h = fold(h, floatHash(float64(v)))
			}
			acc[i] = fold(acc[i], mix(h))
		}
	default:
		return false
	}
	return true
}

func foldInts[T integer](acc []uint64, vs []T) {
	for i, v := range vs {
		acc[i] = fold(acc[i], intHash(v))
	}
}

// exactness asks valueHashes for exact hashes, and records whether any
// differs from h(v) (a -0 or a NaN was seen).
type exactness struct{ special bool }

// exactSalt sets an exact hash of a -0 or a NaN apart from h of a value.
const exactSalt uint64 = 0x9e3779b97f4a7c15

// exactFloat reports whether f is a -0 or a NaN, whose exact hash,
// mix(bits)^exactSalt, is not h(f).
func exactFloat(f float64) bool { return f != f || (f == 0 && math.Signbit(f)) }

// floatHashOf is h(v), or, with x, v's exact hash.
func floatHashOf[T float32 | float64](v T, bits func(T) uint64, x *exactness) uint64 {
	if x != nil && exactFloat(float64(v)) {
		x.special = true
		return mix(bits(v)) ^ exactSalt
	}
	return floatHash(float64(v))
}

// floatHashes writes floatHashOf of each of vs to out.
func floatHashes[T float32 | float64](out []uint64, vs []T, bits func(T) uint64, x *exactness) {
	for i, v := range vs {
		out[i] = floatHashOf(v, bits, x)
	}
}

func bits32(v float32) uint64 { return uint64(math.Float32bits(v)) }

// valueHashes fills out[i] with h(arr[i]); len(out) == arr.Len(). With x,
// the hashes are exact (see the package doc).
func valueHashes(arr arrow.Array, out []uint64, x *exactness) error {
	n := arr.Len()
	switch a := arr.(type) {
	case *array.Null:
		for i := range out {
			out[i] = nullHash
		}
		return nil
	case *array.Boolean:
		for i := 0; i < n; i++ {
			v := uint64(0)
			if a.Value(i) {
				v = 1
			}
			out[i] = mix(v)
		}
	case *array.Int8:
		ints(out, a.Int8Values())
	case *array.Int16:
		ints(out, a.Int16Values())
	case *array.Int32:
		ints(out, a.Int32Values())
	case *array.Int64:
		ints(out, a.Int64Values())
	case *array.Uint8:
		ints(out, a.Uint8Values())
	case *array.Uint16:
		ints(out, a.Uint16Values())
	case *array.Uint32:
		ints(out, a.Uint32Values())
	case *array.Uint64:
		ints(out, a.Uint64Values())
	case *array.Date32:
		ints(out, a.Date32Values())
	case *array.Date64:
		ints(out, a.Date64Values())
	case *array.Time32:
		ints(out, a.Time32Values())
	case *array.Time64:
		ints(out, a.Time64Values())
	case *array.Timestamp:
		ints(out, a.TimestampValues())
	case *array.Duration:
		ints(out, a.DurationValues())
	case *array.Float16:
		for i := 0; i < n; i++ {
			f := float64(a.Value(i).Float32())
			out[i] = floatHash(f)
			if x != nil && exactFloat(f) {
				out[i] = mix(uint64(a.Value(i).Uint16())) ^ exactSalt
				x.special = true
			}
		}
	case *array.Float32:
		floatHashes(out, a.Float32Values(), bits32, x)
	case *array.Float64:
		floatHashes(out, a.Float64Values(), math.Float64bits, x)
	case *array.String:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64String(a.Value(i))
		}
	case *array.LargeString:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64String(a.Value(i))
		}
	case *array.StringView:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64String(a.Value(i))
		}
	case *array.Binary:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64(a.Value(i))
		}
	case *array.LargeBinary:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64(a.Value(i))
		}
	case *array.BinaryView:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64(a.Value(i))
		}
	case *array.FixedSizeBinary:
		for i := 0; i < n; i++ {
			out[i] = xxhash.Sum64(a.Value(i))
		}
	case *array.Decimal128:
		var b [16]byte
		for i := 0; i < n; i++ {
			v := a.Value(i)
			putU64(b[0:], v.LowBits())
			putU64(b[8:], uint64(v.HighBits()))
			out[i] = xxhash.Sum64(b[:])
		}
	case *array.Decimal256:
		var b [32]byte
		for i := 0; i < n; i++ {
			v := a.Value(i).Array()
			for k := 0; k < 4; k++ {
				putU64(b[8*k:], v[k])
			}
			out[i] = xxhash.Sum64(b[:])
		}
	case *array.Decimal32:
		for i := 0; i < n; i++ {
			out[i] = intHash(a.Value(i))
		}
	case *array.Decimal64:
		for i := 0; i < n; i++ {
			out[i] = intHash(a.Value(i))
		}
	case array.ListLike:
		// List, LargeList, FixedSizeList, Map, ListView.
		child := a.ListValues()
		// Only the child values the array's lists span are hashed: a
		// slice of a list array shares its parent's child array. A list
		// view's offsets need not grow, so its child is hashed whole.
		var lo, hi int64 = 0, int64(child.Len())
		if !isListView(a) {
			lo, hi = 0, 0
			if n > 0 {
				lo, _ = a.ValueOffsets(0)
				_, hi = a.ValueOffsets(n - 1)
			}
		}
		if lo != 0 || hi != int64(child.Len()) {
			child = array.NewSlice(child, lo, hi)
			defer child.Release()
		}
		ch := make([]uint64, child.Len())
		if err := valueHashes(child, ch, x); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if a.IsNull(i) {
				continue
			}
			start, end := a.ValueOffsets(i)
			acc := fold(seed, uint64(end-start))
			for j := start; j < end; j++ {
				acc = fold(acc, ch[j-lo])
			}
			out[i] = mix(acc)
		}
	case *array.Struct:
		for i := range out {
			out[i] = seed
		}
		tmp := make([]uint64, n)
		for f := 0; f < a.NumField(); f++ {
			if err := valueHashes(a.Field(f), tmp, x); err != nil {
				return err
			}
			for i := range out {
				out[i] = fold(out[i], tmp[i])
			}
		}
		for i := range out {
			out[i] = mix(out[i])
		}
	case *array.Dictionary:
		dict := a.Dictionary()
		dh := make([]uint64, dict.Len())
		if err := valueHashes(dict, dh, x); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if !a.IsNull(i) {
				out[i] = dh[a.GetValueIndex(i)]
			}
		}
	case array.ExtensionArray:
		if err := valueHashes(a.Storage(), out, x); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported: fingerprint of type %s", arr.DataType())
	}
	if arr.NullN() > 0 {
		for i := 0; i < n; i++ {
			if arr.IsNull(i) {
				out[i] = nullHash
			}
		}
	}
	return nil
}

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// intHash is h(v) for an integer of any width, signed or not: the hash of
// its value as an int64.
func intHash[T integer](v T) uint64 { return mix(uint64(int64(v))) }

func ints[T integer](out []uint64, vs []T) {
	for i, v := range vs {
		out[i] = intHash(v)
	}
}

func floatHash(f float64) uint64 {
	if f == 0 {
		f = 0
	}
	if math.IsNaN(f) {
		return mix(0x7ff8000000000001)
	}
	return mix(math.Float64bits(f))
}

func putU64(b []byte, v uint64) {
	for k := 0; k < 8; k++ {
		b[k] = byte(v >> (8 * k))
	}
}

// isListView reports whether a is a list view, whose offsets need not
// grow from one list to the next.
func isListView(a arrow.Array) bool {
	switch a.(type) {
	case *array.ListView, *array.LargeListView:
		return true
	}
	return false
}

// ValueHash returns h(arr[i]), what ValueHashesTo writes at i, hashing
// that value alone.
func ValueHash(arr arrow.Array, i int) (uint64, error) { return valueHash(arr, i, nil) }

// ExactValueHash returns arr[i]'s exact hash (see the package doc), what
// ExactValueHashesTo writes at i.
func ExactValueHash(arr arrow.Array, i int) (uint64, error) {
	return valueHash(arr, i, &exactness{})
}

func valueHash(arr arrow.Array, i int, x *exactness) (uint64, error) {
	if arr.IsNull(i) {
		return nullHash, nil
	}
	// The common types without a slice, with valueHashes' formulas.
	switch a := arr.(type) {
	case *array.Int32:
		return intHash(a.Value(i)), nil
	case *array.Int64:
		return intHash(a.Value(i)), nil
	case *array.Float32:
		return floatHashOf(a.Value(i), bits32, x), nil
	case *array.Float64:
		return floatHashOf(a.Value(i), math.Float64bits, x), nil
	case *array.String:
		return xxhash.Sum64String(a.Value(i)), nil
	case *array.Binary:
		return xxhash.Sum64(a.Value(i)), nil
	case *array.Dictionary: // not the whole dictionary for one value
		return valueHash(a.Dictionary(), a.GetValueIndex(i), x)
	}
	one := array.NewSlice(arr, int64(i), int64(i)+1)
	defer one.Release()
	var out [1]uint64
	if err := valueHashes(one, out[:], x); err != nil {
		return 0, err
	}
	return out[0], nil
}

// ValueHashesTo writes h(arr[i]) to out[i] for every value of the array
// (see the package doc: equal values, nulls included, hash equal);
// len(out) must be arr.Len().
func ValueHashesTo(arr arrow.Array, out []uint64) error {
	if len(out) != arr.Len() {
		return fmt.Errorf("internal: %d hashes for %d values", len(out), arr.Len())
	}
	return valueHashes(arr, out, nil)
}

// ExactValueHashesTo writes arr[i]'s exact hash (see the package doc) to
// out[i] for every value of the array; len(out) must be arr.Len().
func ExactValueHashesTo(arr arrow.Array, out []uint64) error {
	if len(out) != arr.Len() {
		return fmt.Errorf("internal: %d hashes for %d values", len(out), arr.Len())
	}
	return valueHashes(arr, out, &exactness{})
}
