package tensors

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// record builds rows of (id int64, score float64 nullable, emb
// fixed_size_list<float32>[3], tags list<int32>): values a test can work
// out by hand.
func record(t *testing.T, n int) arrow.RecordBatch {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "emb", Type: arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float32)},
		{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(100 + i))
		if i%3 == 2 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.Float64Builder).Append(float64(i) / 4)
		}
		fl := b.Field(2).(*array.FixedSizeListBuilder)
		fl.Append(true)
		for k := 0; k < 3; k++ {
			fl.ValueBuilder().(*array.Float32Builder).Append(float32(i*10 + k))
		}
		ll := b.Field(3).(*array.ListBuilder)
		ll.Append(true)
		for k := 0; k < i%3; k++ { // ragged: 0, 1 or 2 tags
			ll.ValueBuilder().(*array.Int32Builder).Append(int32(i + k))
		}
	}
	return b.NewRecordBatch()
}

func planFor(t *testing.T, rec arrow.RecordBatch, spec *Spec) *Plan {
	t.Helper()
	prof := NewProfile()
	prof.Observe(rec)
	p, err := NewPlan(rec.Schema(), false, spec, prof)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDefaultConversion converts a record with the default spec and reads
// the tensors' bytes back by hand (little-endian, row-major).
func TestDefaultConversion(t *testing.T) {
	rec := record(t, 6)
	defer rec.Release()
	p := planFor(t, rec, &Spec{})
	b := p.NewBuffers()
	if err := p.Append(b, rec, 0, 6); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	idx := map[string]int{}
	for i, ts := range p.Tensors() {
		idx[ts.Name] = i
	}
	data := func(name string) []byte {
		i, ok := idx[name]
		if !ok {
			t.Fatalf("no tensor %q in %v", name, p.Tensors())
		}
		var out []byte
		for _, blk := range b.Blocks(i) {
			out = append(out, blk...)
		}
		if int64(len(out)) != b.Len(i) {
			t.Fatalf("%s: blocks hold %d bytes, Len says %d", name, len(out), b.Len(i))
		}
		return out
	}
	id := data("id")
	if p.Tensors()[idx["id"]].DType != "I64" || len(id) != 6*8 {
		t.Fatalf("id: %s, %d bytes", p.Tensors()[idx["id"]].DType, len(id))
	}
	for i := 0; i < 6; i++ {
		if v := int64(binary.LittleEndian.Uint64(id[8*i:])); v != int64(100+i) {
			t.Errorf("id[%d] = %d", i, v)
		}
	}
	score, valid := data("score"), data("score.valid")
	for i := 0; i < 6; i++ {
		v := math.Float64frombits(binary.LittleEndian.Uint64(score[8*i:]))
		want, ok := float64(i)/4, i%3 != 2
		if !ok {
			want = 0 // nulls take the fill value
		}
		if v != want || (valid[i] == 1) != ok {
			t.Errorf("score[%d] = %v valid %d, want %v valid %v", i, v, valid[i], want, ok)
		}
	}
	emb := data("emb")
	if sh := p.Tensors()[idx["emb"]].Shape; len(sh) != 1 || sh[0] != 3 {
		t.Fatalf("emb shape %v, want [3]", sh)
	}
	for i := 0; i < 6; i++ {
		for k := 0; k < 3; k++ {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(emb[4*(3*i+k):])); v != float32(i*10+k) {
				t.Errorf("emb[%d][%d] = %v", i, k, v)
			}
		}
	}
	// A ragged list is CSR: offsets (n+1) and the values.
	off, vals := data("tags.offsets"), data("tags.values")
	var want []int32
	ends := []int64{0}
	for i := 0; i < 6; i++ {
		for k := 0; k < i%3; k++ {
			want = append(want, int32(i+k))
		}
		ends = append(ends, int64(len(want)))
	}
	if len(vals) != 4*len(want) || len(off) != 8*len(ends) {
		t.Fatalf("tags: %d value bytes, %d offset bytes; want %d values, %d offsets", len(vals), len(off), len(want), len(ends))
	}
	for i, e := range ends {
		if v := int64(binary.LittleEndian.Uint64(off[8*i:])); v != e {
			t.Errorf("tags.offsets[%d] = %d, want %d", i, v, e)
		}
	}
	for i, w := range want {
		if v := int32(binary.LittleEndian.Uint32(vals[4*i:])); v != w {
			t.Errorf("tags.values[%d] = %d, want %d", i, v, w)
		}
	}
}

// TestSpecChangesHashAndCasts: the spec is part of the plan's identity,
// and a cast converts the values.
func TestSpecChangesHashAndCasts(t *testing.T) {
	rec := record(t, 4)
	defer rec.Release()
	a, b := planFor(t, rec, &Spec{}), planFor(t, rec, &Spec{})
	if a.Hash() != b.Hash() {
		t.Fatalf("equal specs hash %s and %s", a.Hash(), b.Hash())
	}
	c := planFor(t, rec, &Spec{Entries: []Entry{{Name: "id", DType: "float32"}}, Drop: []string{"tags"}})
	if c.Hash() == a.Hash() {
		t.Fatal("a different spec gives the same hash")
	}
	for _, ts := range c.Tensors() {
		if ts.Name == "tags.values" || ts.Name == "tags.offsets" {
			t.Fatalf("dropped column still converted: %v", ts.Name)
		}
	}
	buf := c.NewBuffers()
	if err := c.Append(buf, rec, 0, 4); err != nil {
		t.Fatal(err)
	}
	buf.Seal()
	for i, ts := range c.Tensors() {
		if ts.Name != "id" {
			continue
		}
		if ts.DType != "F32" {
			t.Fatalf("id dtype %s, want F32", ts.DType)
		}
		d := buf.Blocks(i)[0]
		if v := math.Float32frombits(binary.LittleEndian.Uint32(d[4:])); v != 101 {
			t.Fatalf("id[1] as float32 = %v", v)
		}
	}
}

// TestSpecErrorsAreConfigErrors: a spec that does not fit the table is a
// ConfigError (the command line's exit 2), naming the column.
func TestSpecErrorsAreConfigErrors(t *testing.T) {
	rec := record(t, 2)
	defer rec.Release()
	for _, spec := range []*Spec{
		{Entries: []Entry{{Name: "x", Column: "missing"}}},
		{Entries: []Entry{{Name: "id", DType: "complex64"}}},
		{Entries: []Entry{{Name: "g", Columns: []string{"id", "tags"}}}},
	} {
		_, err := NewPlan(rec.Schema(), false, spec, NewProfile())
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("spec %+v: error %v, want a ConfigError", spec.Entries, err)
		}
	}
}

// TestNullableFixedListValidIsPerSample: a nullable list column of fixed
// length (as DuckDB writes every list) gets a .valid tensor of one byte per
// sample, the list's validity, shaped [n]; its data is [n, k] with nulls
// filled. (The .valid tensor was planned [n, k] while one byte per sample
// was written: every --tensors run over a DuckDB-written list failed its
// output check.)
func TestNullableFixedListValidIsPerSample(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "emb", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	const n = 5
	for i := 0; i < n; i++ {
		ll := b.Field(0).(*array.ListBuilder)
		if i == 3 {
			ll.AppendNull()
			continue
		}
		ll.Append(true)
		for k := 0; k < 2; k++ {
			ll.ValueBuilder().(*array.Float32Builder).Append(float32(10*i + k))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := planFor(t, rec, &Spec{})
	bufs := p.NewBuffers()
	if err := p.Append(bufs, rec, 0, n); err != nil {
		t.Fatal(err)
	}
	bufs.Seal()
	for i, ts := range p.Tensors() {
		var got []byte
		for _, blk := range bufs.Blocks(i) {
			got = append(got, blk...)
		}
		switch ts.Name {
		case "emb":
			if len(ts.Shape) != 1 || ts.Shape[0] != 2 || len(got) != n*2*4 {
				t.Fatalf("emb: shape %v, %d bytes", ts.Shape, len(got))
			}
		case "emb.valid":
			if len(ts.Shape) != 0 || string(got) != "\x01\x01\x01\x00\x01" {
				t.Fatalf("emb.valid: shape %v, bytes %v; want [] and 1 1 1 0 1", ts.Shape, got)
			}
		default:
			t.Fatalf("unexpected tensor %s", ts.Name)
		}
	}
}
