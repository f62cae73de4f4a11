package partition

import (
	"context"
	"math/rand"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// typesBatch builds a batch of n rows with a column of each kind gather
// copies itself (widths 1 to 16, booleans, fixed-size binary) and of kinds
// it leaves to arrow (a dictionary, a struct), nulls in most.
func typesBatch(n int, seed int64) arrow.RecordBatch {
	r := rand.New(rand.NewSource(seed))
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "u16", Type: arrow.PrimitiveTypes.Uint16, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "date", Type: arrow.FixedWidthTypes.Date32},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 20, Scale: 3}, Nullable: true},
		{Name: "mdn", Type: arrow.FixedWidthTypes.MonthDayNanoInterval},
		{Name: "fsb", Type: &arrow.FixedSizeBinaryType{ByteWidth: 3}, Nullable: true},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "dict", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}, Nullable: true},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32}, arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < n; i++ {
		null := r.Intn(9) == 0
		appendOr := func(bld array.Builder, f func()) {
			if null {
				bld.AppendNull()
			} else {
				f()
			}
		}
		appendOr(b.Field(0), func() { b.Field(0).(*array.Int8Builder).Append(int8(r.Intn(256) - 128)) })
		appendOr(b.Field(1), func() { b.Field(1).(*array.Uint16Builder).Append(uint16(r.Intn(65536))) })
		appendOr(b.Field(2), func() { b.Field(2).(*array.Float32Builder).Append(r.Float32()) })
		appendOr(b.Field(3), func() { b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(r.Int63())) })
		b.Field(4).(*array.Date32Builder).Append(arrow.Date32(r.Intn(30000)))
		appendOr(b.Field(5), func() { b.Field(5).(*array.Decimal128Builder).Append(decimal128.FromI64(r.Int63() - r.Int63())) })
		b.Field(6).(*array.MonthDayNanoIntervalBuilder).Append(arrow.MonthDayNanoInterval{Months: int32(i), Days: int32(r.Intn(31)), Nanoseconds: r.Int63()})
		appendOr(b.Field(7), func() {
			b.Field(7).(*array.FixedSizeBinaryBuilder).Append([]byte{byte(i), byte(i >> 8), byte(r.Intn(256))})
		})
		appendOr(b.Field(8), func() { b.Field(8).(*array.BooleanBuilder).Append(r.Intn(2) == 0) })
		appendOr(b.Field(9), func() {
			b.Field(9).(*array.BinaryDictionaryBuilder).AppendString([]string{"DE", "FR", "US"}[r.Intn(3)])
		})
		st := b.Field(10).(*array.StructBuilder)
		appendOr(st, func() {
			st.Append(true)
			st.FieldBuilder(0).(*array.Int32Builder).Append(int32(i))
			st.FieldBuilder(1).(*array.StringBuilder).Append("s")
		})
	}
	return b.NewRecordBatch()
}

// TestTakeFromBatchesEqualsArrowTake checks UnitRows.Take, which gathers
// most types straight from the batches, against arrow's Take kernel over
// the batches concatenated: every column kind, nulls, batches that are
// slices of larger ones (offsets not at zero), rows repeated and in random
// order, and runs within one batch.
func TestTakeFromBatchesEqualsArrowTake(t *testing.T) {
	ctx := context.Background()
	for _, mk := range []struct {
		name  string
		batch func(n int, seed int64) arrow.RecordBatch
	}{
		{"codec", func(n int, seed int64) arrow.RecordBatch { return codecBatch(t, n, seed, false) }},
		{"types", typesBatch},
	} {
		t.Run(mk.name, func(t *testing.T) {
			var recs []arrow.RecordBatch
			for k, n := range []int{500, 1, 300, 0, 777} {
				full := mk.batch(n+20, int64(k+1))
				// Slices of a larger batch, as routing hands them on.
				recs = append(recs, full.NewSlice(int64(min(7, n)), int64(min(7, n)+n)))
				full.Release()
			}
			schema := recs[0].Schema()
			gathered, fallback := 0, 0
			for _, f := range schema.Fields() {
				if gatherable(f.Type) {
					gathered++
				} else {
					fallback++
				}
			}
			want := map[string][2]int{"codec": {8, 0}, "types": {9, 2}}[mk.name]
			if gathered != want[0] || fallback != want[1] {
				t.Fatalf("gathered %d columns, fell back on %d; want %v", gathered, fallback, want)
			}
			// The reference: every column concatenated, then arrow's Take.
			whole := make([]arrow.Array, schema.NumFields())
			for c := range whole {
				chunks := make([]arrow.Array, len(recs))
				for k, r := range recs {
					chunks[k] = r.Column(c)
				}
				a, err := array.Concatenate(chunks, memory.DefaultAllocator)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Release()
				whole[c] = a
			}
			for _, r := range recs {
				r.Retain()
			}
			u, err := NewUnitRows(schema, recs)
			if err != nil {
				t.Fatal(err)
			}
			defer u.Release()
			n := u.Rows()
			rnd := rand.New(rand.NewSource(9))
			var idx []int64
			for len(idx) < 3000 {
				if rnd.Intn(3) == 0 { // a run of consecutive rows
					s := rnd.Int63n(n)
					for i := s; i < min(n, s+int64(rnd.Intn(40))); i++ {
						idx = append(idx, i)
					}
				} else {
					idx = append(idx, rnd.Int63n(n))
				}
			}
			for _, part := range [][]int64{idx, idx[:1], idx[:0], {n - 1, 0, n - 1}} {
				got, err := u.View(part).Take(ctx, schema, part)
				if err != nil {
					t.Fatal(err)
				}
				ind := array.NewInt64Builder(memory.DefaultAllocator)
				ind.AppendValues(part, nil)
				ia := ind.NewInt64Array()
				for c := range whole {
					ref, err := compute.TakeArray(ctx, whole[c], ia)
					if err != nil {
						// arrow's kernel cannot take some types (16-byte
						// intervals): compare row by row instead.
						t.Logf("column %s: arrow's Take: %v", schema.Field(c).Name, err)
						g := got.Column(c)
						for i, j := range part {
							if g.IsNull(i) != whole[c].IsNull(int(j)) || g.ValueStr(i) != whole[c].ValueStr(int(j)) {
								t.Fatalf("column %s: row %d (input row %d) gathered %q, input %q", schema.Field(c).Name, i, j, g.ValueStr(i), whole[c].ValueStr(int(j)))
							}
						}
						continue
					}
					if !array.Equal(got.Column(c), ref) {
						g := got.Column(c)
						for i := 0; i < ref.Len(); i++ {
							if g.IsNull(i) != ref.IsNull(i) || g.ValueStr(i) != ref.ValueStr(i) {
								t.Fatalf("column %s, %d rows: row %d (input row %d) gathered %q (null %v), arrow's Take %q (null %v)",
									schema.Field(c).Name, len(part), i, part[i], g.ValueStr(i), g.IsNull(i), ref.ValueStr(i), ref.IsNull(i))
							}
						}
						t.Fatalf("column %s, %d rows: arrays differ, values equal (lengths %d, %d)", schema.Field(c).Name, len(part), g.Len(), ref.Len())
					}
					if got.Column(c).NullN() != ref.NullN() {
						t.Fatalf("column %s: %d nulls, want %d", schema.Field(c).Name, got.Column(c).NullN(), ref.NullN())
					}
					ref.Release()
				}
				ia.Release()
				ind.Release()
				got.Release()
			}
			if _, err := u.Take(ctx, schema, []int64{n}); err == nil {
				t.Fatal("a row past the end was taken")
			}
		})
	}
}
