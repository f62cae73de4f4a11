package fingerprint

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/arrowmem"
)

var schema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	{Name: "pt", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32}, arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Float64, Nullable: true}), Nullable: true},
	{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64), Nullable: true},
}, nil)

type row struct {
	id    int64
	name  *string
	score *float32
	tags  []string // nil = null list
	x     int32
	y     *float64
	m     map[string]int64
}

func str(s string) *string   { return &s }
func f32(f float32) *float32 { return &f }
func f64(f float64) *float64 { return &f }

func rows() []row {
	return []row{
		{id: 1, name: str("a"), score: f32(1.5), tags: []string{"x", "y"}, x: 1, y: f64(2), m: map[string]int64{"k": 1}},
		{id: 2, name: nil, score: f32(0), tags: []string{}, x: 2, y: nil, m: nil},
		{id: 3, name: str(""), score: nil, tags: nil, x: 3, y: f64(-0.0), m: map[string]int64{}},
		{id: 1, name: str("a"), score: f32(1.5), tags: []string{"x", "y"}, x: 1, y: f64(2), m: map[string]int64{"k": 1}},
	}
}

func record(rs []row) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rs {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.name == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(*r.name)
		}
		if r.score == nil {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float32Builder).Append(*r.score)
		}
		lb := b.Field(3).(*array.ListBuilder)
		if r.tags == nil {
			lb.AppendNull()
		} else {
			lb.Append(true)
			for _, tg := range r.tags {
				lb.ValueBuilder().(*array.StringBuilder).Append(tg)
			}
		}
		sb := b.Field(4).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Int32Builder).Append(r.x)
		if r.y == nil {
			sb.FieldBuilder(1).AppendNull()
		} else {
			sb.FieldBuilder(1).(*array.Float64Builder).Append(*r.y)
		}
		mb := b.Field(5).(*array.MapBuilder)
		if r.m == nil {
			mb.AppendNull()
		} else {
			mb.Append(true)
			for k, v := range r.m {
				mb.KeyBuilder().(*array.StringBuilder).Append(k)
				mb.ItemBuilder().(*array.Int64Builder).Append(v)
			}
		}
	}
	return b.NewRecordBatch()
}

func sum(t *testing.T, rs ...[]row) Sum {
	t.Helper()
	var s Sum
	for _, part := range rs {
		rec := record(part)
		x, err := Record(rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		s.Add(x)
	}
	return s
}

func TestOrderAndSplitIndependent(t *testing.T) {
	rs := rows()
	a := sum(t, rs)
	b := sum(t, []row{rs[3], rs[1]}, []row{rs[2], rs[0]})
	if a != b {
		t.Fatalf("fingerprint depends on order or batching: %v vs %v", a, b)
	}
	if a.Rows != 4 {
		t.Fatalf("rows = %d", a.Rows)
	}
}

func TestSensitiveToEveryChange(t *testing.T) {
	base := sum(t, rows())
	changes := map[string]func([]row){
		"int":                   func(r []row) { r[0].id = 9 },
		"null string":           func(r []row) { r[1].name = str("") },
		"empty vs null list":    func(r []row) { r[1].tags = nil },
		"list element":          func(r []row) { r[0].tags = []string{"y", "x"} },
		"struct field":          func(r []row) { r[0].y = nil },
		"map value":             func(r []row) { r[0].m = map[string]int64{"k": 2} },
		"float":                 func(r []row) { r[0].score = f32(1.25) },
		"duplicate vs distinct": func(r []row) { r[3].id = 4 },
	}
	for name, ch := range changes {
		rs := rows()
		ch(rs)
		if got := sum(t, rs); got == base {
			t.Errorf("%s: fingerprint unchanged", name)
		}
	}
	// Dropping one of two identical rows changes it (multiset semantics).
	if sum(t, rows()[:3]) == base {
		t.Error("dropping a duplicate row left the fingerprint unchanged")
	}
}

func TestSameValuesDifferentLayout(t *testing.T) {
	// A sliced array, and -0 versus 0, hash as their values.
	rs := rows()
	rec := record(append(rows(), rows()...))
	defer rec.Release()
	sliced := rec.NewSlice(4, 8)
	defer sliced.Release()
	a, _ := Record(sliced)
	if a != sum(t, rs) {
		t.Fatal("a sliced record hashes differently from the same rows")
	}
	rs[2].y = f64(0)
	if sum(t, rs) != sum(t, rows()) {
		t.Fatal("-0 and 0 hash differently")
	}
}

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

// TestValueHashAlone: hashing one value alone, or a slice of an array,
// gives the value's hash in the whole array, for every column type here
// (lists and maps hash only the child values their slice spans).
func TestValueHashAlone(t *testing.T) {
	rec := record(append(rows(), rows()...))
	defer rec.Release()
	db := array.NewDictionaryBuilder(memory.DefaultAllocator, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}).(*array.BinaryDictionaryBuilder)
	defer db.Release()
	for _, v := range []string{"b", "a", "", "b", "c", "a", "b", "c"} {
		if v == "" {
			db.AppendNull()
		} else if err := db.AppendString(v); err != nil {
			t.Fatal(err)
		}
	}
	dict := db.NewArray()
	defer dict.Release()
	cols := append(rec.Columns(), dict)
	names := []string{}
	for _, f := range schema.Fields() {
		names = append(names, f.Name)
	}
	names = append(names, "dictionary")
	for c, col := range cols {
		whole, err := valueHashesOf(col)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < col.Len(); i++ {
			h, err := ValueHash(col, i)
			if err != nil {
				t.Fatal(err)
			}
			if h != whole[i] {
				t.Fatalf("column %s row %d: alone %x, in the array %x", names[c], i, h, whole[i])
			}
		}
		for lo := 0; lo < col.Len(); lo++ {
			for hi := lo; hi <= col.Len(); hi++ {
				part := array.NewSlice(col, int64(lo), int64(hi))
				got, err := valueHashesOf(part)
				part.Release()
				if err != nil {
					t.Fatal(err)
				}
				for k, h := range got {
					if h != whole[lo+k] {
						t.Fatalf("column %s rows [%d, %d): row %d hashes %x, %x in the array", names[c], lo, hi, lo+k, h, whole[lo+k])
					}
				}
			}
		}
	}
}

// valueHashesOf is ValueHashesTo into a new slice.
func valueHashesOf(arr arrow.Array) ([]uint64, error) {
	out := make([]uint64, arr.Len())
	return out, ValueHashesTo(arr, out)
}

// TestFoldedEqualsValueHashes checks foldValues, RowHashes' fused path for
// common types without nulls, against valueHashes then fold, the path
// every other column takes: for each type, whole and sliced (a list slice
// shares its parent's child array, at an offset), and with a null, where
// foldValues must decline.
func TestFoldedEqualsValueHashes(t *testing.T) {
	mem := memory.DefaultAllocator
	const n = 300
	var cols []arrow.Array
	build := func(b array.Builder, appendAt func(i int)) {
		for i := 0; i < n; i++ {
			appendAt(i)
		}
		cols = append(cols, b.NewArray())
		b.Release()
	}
	i32 := array.NewInt32Builder(mem)
	build(i32, func(i int) { i32.Append(int32(i*7919 - 5000)) })
	i64 := array.NewInt64Builder(mem)
	build(i64, func(i int) { i64.Append(int64(i) << 40) })
	d32 := array.NewDate32Builder(mem)
	build(d32, func(i int) { d32.Append(arrow.Date32(19000 + i%30)) })
	ts := array.NewTimestampBuilder(mem, &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"})
	build(ts, func(i int) { ts.Append(arrow.Timestamp(1_700_000_000_000 + i)) })
	f32 := array.NewFloat32Builder(mem)
	build(f32, func(i int) {
		f32.Append([]float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(i) / 3}[i%4])
	})
	f64 := array.NewFloat64Builder(mem)
	build(f64, func(i int) { f64.Append([]float64{0, math.Copysign(0, -1), math.NaN(), float64(i) / 7}[i%4]) })
	s := array.NewStringBuilder(mem)
	build(s, func(i int) { s.Append(strings.Repeat("x", i%5) + fmt.Sprint(i%40)) })
	lb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Float32)
	vb := lb.ValueBuilder().(*array.Float32Builder)
	build(lb, func(i int) {
		lb.Append(true)
		for j := 0; j < i%5; j++ { // empty lists too
			vb.Append(float32(i*j) / 11)
		}
	})
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	slow := func(c arrow.Array) []uint64 {
		acc := make([]uint64, c.Len())
		tmp := make([]uint64, c.Len())
		for i := range acc {
			acc[i] = seed
		}
		if err := valueHashes(c, tmp, nil); err != nil {
			t.Fatal(err)
		}
		for i := range acc {
			acc[i] = fold(acc[i], tmp[i])
		}
		return acc
	}
	check := func(name string, c arrow.Array, wantFolded bool) {
		t.Helper()
		acc := make([]uint64, c.Len())
		for i := range acc {
			acc[i] = seed
		}
		if got := foldValues(c, acc); got != wantFolded {
			t.Fatalf("%s: foldValues reported %v, want %v", name, got, wantFolded)
		}
		if !wantFolded {
			return
		}
		want := slow(c)
		for i := range acc {
			if acc[i] != want[i] {
				t.Fatalf("%s: row %d folds to %x, valueHashes then fold gives %x", name, i, acc[i], want[i])
			}
		}
	}
	for _, c := range cols {
		name := c.DataType().String()
		check(name, c, true)
		sl := array.NewSlice(c, 17, 250)
		check(name+" sliced", sl, true)
		sl.Release()
		// The same values with one null: the general path's.
		b := array.NewBuilder(mem, c.DataType())
		b.AppendNull()
		for i := 0; i < 5; i++ {
			if err := b.AppendValueFromString(c.ValueStr(i)); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		withNull := b.NewArray()
		b.Release()
		check(name+" with a null", withNull, false)
		withNull.Release()
	}
	// A list whose child holds a null is the general path's as well.
	lb = array.NewListBuilder(mem, arrow.PrimitiveTypes.Float32)
	vb = lb.ValueBuilder().(*array.Float32Builder)
	lb.Append(true)
	vb.Append(1)
	vb.AppendNull()
	nullChild := lb.NewArray()
	lb.Release()
	defer nullChild.Release()
	check("list with a null element", nullChild, false)
}

// TestRowHashesWith: the extra hashes of each group of columns are what
// hashing those columns alone gives, value by value (ValueHash, folded in
// column order, then mixed), and the row hashes stay RowHashes'. Columns
// the fused path folds (id: int64 without nulls) are in groups too.
func TestRowHashesWith(t *testing.T) {
	rec := record(append(rows(), rows()...))
	defer rec.Release()
	n := int(rec.NumRows())
	want, err := RowHashes(rec.Columns(), n)
	if err != nil {
		t.Fatal(err)
	}
	byValue := func(cols []int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			h := seed
			for _, c := range cols {
				v, err := ValueHash(rec.Column(c), i)
				if err != nil {
					t.Fatal(err)
				}
				h = fold(h, v)
			}
			out[i] = mix(h)
		}
		return out
	}
	for _, group := range [][]int{
		{0, -1, 1, 0, -1, 1},
		{-1, 0, -1, -1, -1, -1},
		{0, 0, 0, 0, 0, 0},
		{-1, -1, -1, -1, -1, -1},
	} {
		groups := 0
		for _, g := range group {
			groups = max(groups, g+1)
		}
		extra := make([][]uint64, groups)
		for g := range extra {
			extra[g] = make([]uint64, n)
		}
		got, err := RowHashesWith(rec.Columns(), n, group, extra, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("groups %v: row %d hashes to %x, RowHashes gives %x", group, i, got[i], want[i])
			}
		}
		for g := range extra {
			var cols []int
			for c, gc := range group {
				if gc == g {
					cols = append(cols, c)
				}
			}
			w := byValue(cols)
			for i := range w {
				if extra[g][i] != w[i] {
					t.Fatalf("groups %v: group %d (columns %v), row %d: %x, hashing its values gives %x", group, g, cols, i, extra[g][i], w[i])
				}
			}
		}
		// Rows 0 and 3 are equal: so are their hashes in every group.
		for g := range extra {
			if extra[g][0] != extra[g][3] {
				t.Fatalf("groups %v: equal rows hash differently in group %d", group, g)
			}
		}
	}
	if _, err := RowHashesWith(rec.Columns(), n, []int{0}, [][]uint64{make([]uint64, n)}, nil); err == nil {
		t.Fatal("a group list shorter than the columns was accepted")
	}
}

// TestExactHashes: exact hashes tell a -0 from a 0 and NaNs of different
// bits apart, at the top level and inside lists and structs, and are h(v)
// for every other value; an exact group of RowHashesWith leaves the row
// hashes (the fingerprint) as RowHashes gives them.
func TestExactHashes(t *testing.T) {
	negZero := math.Copysign(0, -1)
	nan1, nan2 := math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0xfff8000000000000)
	vals := []float64{0, negZero, nan1, nan2, 1.5, negZero, 0, nan1}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32},
		{Name: "list", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Float64})},
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, v := range vals {
		b.Field(0).(*array.Float64Builder).Append(v)
		b.Field(1).(*array.Float32Builder).Append(float32(v))
		lb := b.Field(2).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float32Builder).Append(float32(v))
		sb := b.Field(3).(*array.StructBuilder)
		sb.Append(true)
		sb.FieldBuilder(0).(*array.Float64Builder).Append(v)
		b.Field(4).(*array.Int64Builder).Append(int64(i % 2))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	n := len(vals)
	sameBits := func(i, j int) bool { return math.Float64bits(vals[i]) == math.Float64bits(vals[j]) }
	for c := 0; c < 4; c++ {
		col := rec.Column(c)
		exact := make([]uint64, n)
		if err := ExactValueHashesTo(col, exact); err != nil {
			t.Fatal(err)
		}
		byValue := make([]uint64, n)
		if err := ValueHashesTo(col, byValue); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			one, err := ExactValueHash(col, i)
			if err != nil || one != exact[i] {
				t.Fatalf("%s[%d]: ExactValueHash %x (%v), ExactValueHashesTo %x", sc.Field(c).Name, i, one, err, exact[i])
			}
			if special := vals[i] != vals[i] || (vals[i] == 0 && math.Signbit(vals[i])); !special && exact[i] != byValue[i] {
				t.Fatalf("%s[%d] = %v: exact hash %x, h(v) %x", sc.Field(c).Name, i, vals[i], exact[i], byValue[i])
			}
			for j := 0; j < n; j++ {
				if (exact[i] == exact[j]) != sameBits(i, j) {
					t.Fatalf("%s: values %d and %d (%x, %x): exact hashes equal %v", sc.Field(c).Name, i, j, math.Float64bits(vals[i]), math.Float64bits(vals[j]), exact[i] == exact[j])
				}
			}
		}
		if byValue[0] != byValue[1] || byValue[2] != byValue[3] {
			t.Fatalf("%s: h(v) tells -0 from 0 or one NaN from another", sc.Field(c).Name)
		}
	}
	want, err := RowHashes(rec.Columns(), n)
	if err != nil {
		t.Fatal(err)
	}
	extra := [][]uint64{make([]uint64, n), make([]uint64, n)}
	got, err := RowHashesWith(rec.Columns(), n, []int{1, 1, 1, 1, 0}, extra, []bool{false, true})
	if err != nil {
		t.Fatal(err)
	}
	exactRows, err := ExactRowHashes(rec.Columns()[:4], n)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("row %d: an exact group changed the row hash", i)
		}
		if extra[1][i] != exactRows[i] {
			t.Fatalf("row %d: the exact group's hash %x, ExactRowHashes %x", i, extra[1][i], exactRows[i])
		}
		for j := 0; j < n; j++ {
			if (exactRows[i] == exactRows[j]) != sameBits(i, j) {
				t.Fatalf("rows %d and %d: exact row hashes equal %v", i, j, exactRows[i] == exactRows[j])
			}
		}
	}
}
