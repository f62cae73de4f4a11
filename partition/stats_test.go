package partition

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// TestStatsNeverPruneAPresentValue writes row groups of random values of
// every key type with arrow-go, then checks that for every value present in
// a row group, the statistics say the row group may contain it (a false
// negative would make a pruning reader skip data it needs), and that some
// absent values are pruned (the check is not vacuous).
func TestStatsNeverPruneAPresentValue(t *testing.T) {
	mem := memory.DefaultAllocator
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Millisecond}, Nullable: true},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 20, Scale: 2}, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	p := filepath.Join(t.TempDir(), "stats.parquet")
	f, _ := os.Create(p)
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(parquet.WithStats(true)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for rg := 0; rg < 6; rg++ {
		b := array.NewRecordBuilder(mem, schema)
		center := r.Int64N(1000) - 500
		for i := 0; i < 200; i++ {
			null := r.IntN(15) == 0 && rg%2 == 0
			v := center + r.Int64N(50)
			for c := 0; c < schema.NumFields(); c++ {
				fb := b.Field(c)
				if null {
					fb.AppendNull()
					continue
				}
				switch x := fb.(type) {
				case *array.Int32Builder:
					x.Append(int32(v))
				case *array.Uint32Builder:
					x.Append(uint32(v + 1<<31))
				case *array.Int64Builder:
					x.Append(v << 40)
				case *array.Float64Builder:
					x.Append(float64(v) / 3)
				case *array.StringBuilder:
					x.Append(string(rune('a'+(v+500)%26)) + "x")
				case *array.Date32Builder:
					x.Append(arrow.Date32(v))
				case *array.TimestampBuilder:
					x.Append(arrow.Timestamp(v * 1000))
				case *array.Decimal128Builder:
					x.Append(decimal128.FromI64(v * 101))
				case *array.BooleanBuilder:
					x.Append(v%2 == 0)
				}
			}
		}
		rec := b.NewRecordBatch()
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
		b.Release()
	}
	w.Close()
	f.Close()

	objs, err := storage.List(context.Background(), []string{p})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := source.Open(context.Background(), objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	md, err := tbl.Files[0].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	pruned := 0
	var all [][][]byte // per column, every value's key
	for c := 0; c < schema.NumFields(); c++ {
		all = append(all, nil)
	}
	ranges := make([][]StatsRange, len(tbl.Files[0].RowGroupRows))
	for g := range tbl.Files[0].RowGroupRows {
		rec, err := tbl.Read(context.Background(), source.RowGroupRef{File: tbl.Files[0], RowGroup: g}, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		for c := 0; c < schema.NumFields(); c++ {
			cc, _ := md.RowGroup(g).ColumnChunk(c)
			st, _ := cc.Statistics()
			sr := StatsFor(schema.Field(c).Type, st)
			ranges[g] = append(ranges[g], sr)
			if !sr.MinMax && schema.Field(c).Name != "b" {
				t.Errorf("column %s: no usable statistics", schema.Field(c).Name)
			}
			for i := 0; i < int(rec.NumRows()); i++ {
				k := AppendKey(nil, rec.Column(c), i)
				all[c] = append(all[c], k)
				if !sr.MayContain(k) {
					t.Fatalf("row group %d column %s: statistics exclude a present value (%x)", g, schema.Field(c).Name, k)
				}
			}
		}
		rec.Release()
	}
	for g := range ranges {
		for c := range ranges[g] {
			for _, k := range all[c] {
				if !ranges[g][c].MayContain(k) {
					pruned++
				}
			}
		}
	}
	if pruned == 0 {
		t.Fatal("statistics never pruned anything: the test is vacuous")
	}
}
