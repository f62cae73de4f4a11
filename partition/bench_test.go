package partition

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/arrowmem"
)

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

func BenchmarkAppendKeyStringDate(b *testing.B) {
	const n = 1 << 16
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	db := array.NewDate32Builder(memory.DefaultAllocator)
	for i := 0; i < n; i++ {
		sb.Append(fmt.Sprintf("C%02d", i%40))
		db.Append(arrow.Date32(20000 + i%30))
	}
	s, d := sb.NewArray(), db.NewArray()
	defer s.Release()
	defer d.Release()
	b.ReportAllocs()
	b.ResetTimer()
	var buf []byte
	for i := 0; i < b.N; i++ {
		j := i % n
		buf = AppendKey(AppendKey(buf[:0], s, j), d, j)
	}
}

func BenchmarkPlanLayout(b *testing.B) {
	rows := make([]int64, 10_000)
	for i := range rows {
		rows[i] = int64(1 + (i*7919)%5000)
	}
	sl := slicesOf(rows...)
	o := LayoutOptions{RowGroupBytes: 128 << 20, MinRowGroupBytes: 16 << 20, FileBytes: 1 << 30, RowBytes: 200, FileRowBytes: 50, BoundaryKeys: 1}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		PlanLayout(sl, o)
	}
}
