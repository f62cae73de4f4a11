package fingerprint

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func BenchmarkRecord(b *testing.B) {
	var rs []row
	for len(rs) < 1<<14 {
		rs = append(rs, rows()...)
	}
	rec := record(rs)
	defer rec.Release()
	b.SetBytes(int64(len(rs)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Record(rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordEventLog hashes a batch shaped like the generated
// impression log's columns: integers, short strings, float32 features and
// a 16-float embedding list per row (the log's largest column).
func BenchmarkRecordEventLog(b *testing.B) {
	const n = 1 << 16
	mem := memory.DefaultAllocator
	ib := array.NewInt64Builder(mem)
	sb := array.NewStringBuilder(mem)
	fb := array.NewFloat32Builder(mem)
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Float32)
	vb := lb.ValueBuilder().(*array.Float32Builder)
	for i := 0; i < n; i++ {
		ib.Append(int64(i) * 7919)
		sb.Append(fmt.Sprintf("C%02d", i%40))
		fb.Append(float32(i) / 3)
		lb.Append(true)
		for j := 0; j < 16; j++ {
			vb.Append(float32(i*j) / 7)
		}
	}
	i64, str, f32, lst := ib.NewArray(), sb.NewArray(), fb.NewArray(), lb.NewArray()
	cols := []arrow.Array{i64, i64, str, str, f32, f32, f32, f32, lst}
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = arrow.Field{Name: fmt.Sprint("c", i), Type: c.DataType()}
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), cols, n)
	defer rec.Release()
	for _, c := range []arrow.Array{i64, str, f32, lst} {
		c.Release()
	}
	b.SetBytes(n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Record(rec); err != nil {
			b.Fatal(err)
		}
	}
}
