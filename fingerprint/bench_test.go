package fingerprint

import "testing"

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
