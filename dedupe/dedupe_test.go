package dedupe

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/arrowmem"
)

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

var flat = arrow.NewSchema([]arrow.Field{
	{Name: "user", Type: arrow.PrimitiveTypes.Int64},                  // query-level
	{Name: "item", Type: arrow.PrimitiveTypes.Int64},                  // item-level
	{Name: "qid", Type: arrow.PrimitiveTypes.Int64},                   // the key
	{Name: "ctx", Type: arrow.BinaryTypes.String, Nullable: true},     // query-level, nulls
	{Name: "emb", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},   // query-level list
	{Name: "click", Type: arrow.PrimitiveTypes.Int32, Nullable: true}, // item-level
}, nil)

// rows returns sorted flat rows of nq queries; perturb changes ctx on one row.
func rows(nq int, perturb bool) arrow.RecordBatch {
	r := rand.New(rand.NewPCG(1, 2))
	b := array.NewRecordBuilder(memory.DefaultAllocator, flat)
	defer b.Release()
	n := 0
	for q := 0; q < nq; q++ {
		items := 1 + r.IntN(9)
		user := r.Int64N(50)
		ctxNull := r.IntN(4) == 0
		ctx := []string{"a", "b", "c"}[r.IntN(3)]
		emb := []float32{float32(q), float32(user)}
		for i := 0; i < items; i++ {
			b.Field(0).(*array.Int64Builder).Append(user)
			b.Field(1).(*array.Int64Builder).Append(r.Int64N(1000))
			b.Field(2).(*array.Int64Builder).Append(int64(q))
			switch {
			case perturb && q == nq/2 && i == 1:
				b.Field(3).(*array.StringBuilder).Append("different")
			case ctxNull:
				b.Field(3).AppendNull()
			default:
				b.Field(3).(*array.StringBuilder).Append(ctx)
			}
			lb := b.Field(4).(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Float32Builder).AppendValues(emb, nil)
			if r.IntN(5) == 0 {
				b.Field(5).AppendNull()
			} else {
				b.Field(5).(*array.Int32Builder).Append(int32(r.IntN(2)))
			}
			n++
		}
	}
	return b.NewRecordBatch()
}

// split cuts rec into batches at random points.
func split(rec arrow.RecordBatch, seed uint64) []arrow.RecordBatch {
	r := rand.New(rand.NewPCG(seed, 9))
	var out []arrow.RecordBatch
	for s := int64(0); s < rec.NumRows(); {
		e := min(s+1+int64(r.IntN(13)), rec.NumRows())
		out = append(out, rec.NewSlice(s, e))
		s = e
	}
	return out
}

func TestDetectPackUnpack(t *testing.T) {
	ctx := context.Background()
	rec := rows(200, false)
	defer rec.Release()
	d := NewDetector(flat, []int{2})
	for _, part := range split(rec, 1) {
		if err := d.Add(part, nil); err != nil {
			t.Fatal(err)
		}
	}
	isQuery := d.Constant()
	want := []bool{true, false, true, true, true, false}
	for i := range want {
		if isQuery[i] != want[i] {
			t.Fatalf("column %s: query-level %v, want %v", flat.Field(i).Name, isQuery[i], want[i])
		}
	}
	l, err := NewLayout(flat, []int{2}, isQuery)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Packed.String(); !strings.Contains(got, "items: type=list<element: struct<item: int64, click: int32") {
		t.Fatalf("packed schema %s", got)
	}
	p := NewPacker(l)
	var packed []arrow.RecordBatch
	for _, part := range split(rec, 2) {
		out, err := p.Add(ctx, part)
		if err != nil {
			t.Fatal(err)
		}
		packed = append(packed, out...)
	}
	if out, _ := p.Flush(ctx); out != nil {
		packed = append(packed, out)
	}
	if p.Queries != 200 || p.Items != rec.NumRows() {
		t.Fatalf("packed %d queries, %d items; want 200, %d", p.Queries, p.Items, rec.NumRows())
	}
	// Unpack restores the rows in order.
	var back []string
	var fp fingerprint.Sum
	for _, pk := range packed {
		u, err := Unpack(ctx, l, pk)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := fingerprint.Record(u)
		fp.Add(s)
		for i := 0; i < int(u.NumRows()); i++ {
			back = append(back, rowString(u, i))
		}
	}
	orig, _ := fingerprint.Record(rec)
	if fp != orig {
		t.Fatalf("unpacked fingerprint %v, original %v", fp, orig)
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		if back[i] != rowString(rec, i) {
			t.Fatalf("row %d: %s, want %s", i, back[i], rowString(rec, i))
		}
	}
}

func TestDetectorReportsPerturbedColumn(t *testing.T) {
	rec := rows(100, true)
	defer rec.Release()
	d := NewDetector(flat, []int{2})
	for _, part := range split(rec, 3) {
		d.Add(part, nil)
	}
	if d.Constant()[3] {
		t.Fatal("perturbed column still query-level")
	}
	c, ok := d.Conflict(3)
	if !ok || c.Column != "ctx" || c.Query[0] != int64(50) || (c.A != "different" && c.B != "different") {
		t.Fatalf("conflict %+v", c)
	}
	if !d.Constant()[0] || !d.Constant()[4] {
		t.Fatal("a constant column was reported varying")
	}
}

func rowString(rec arrow.RecordBatch, i int) string {
	var sb strings.Builder
	for c := 0; c < int(rec.NumCols()); c++ {
		sb.WriteString(rec.Column(c).ValueStr(i))
		sb.WriteByte('|')
	}
	return sb.String()
}

// TestProbeDecidesAsTheFullScan: whatever the number of rows probed one by
// one before a column is hashed whole (none, some, all), and however the
// rows are batched (in key order, or out of order with ord naming the key
// order, as a sorted unit hands them over; or among many other rows that ord
// does not name, as a unit of several partitions hands one over),
// detection finds the same columns and the same conflicts. It failed when
// the full scan restarted without the probe's last hash, and when it read
// the rows without ord.
func TestProbeDecidesAsTheFullScan(t *testing.T) {
	defer func(p int) { probeRows = p }(probeRows)
	rec := rows(300, true)
	defer rec.Release()
	others := rows(2000, false) // other partitions' rows, more than 4x
	defer others.Release()
	type result struct {
		constant  []bool
		conflicts []string
	}
	detect := func(parts []arrow.RecordBatch, shuffled, among bool) result {
		d := NewDetector(flat, []int{2})
		if shuffled {
			// The batches out of order, and ord naming the rows in
			// key order across them, as a sorted unit hands them over.
			perm := rand.New(rand.NewPCG(7, 7)).Perm(len(parts))
			held := make([]arrow.RecordBatch, 0, len(parts)+2)
			at := make([]int64, len(parts)) // where part k starts in held
			var n int64
			if among { // rows ord does not name, before and between
				held = []arrow.RecordBatch{others.NewSlice(0, 5000)}
				n = 5000
			}
			for pos, k := range perm {
				if among && pos == len(perm)/2 {
					held = append(held, others.NewSlice(5000, others.NumRows()))
					n += others.NumRows() - 5000
				}
				held = append(held, parts[k])
				at[k] = n
				n += parts[k].NumRows()
			}
			var ord []int64
			for k, part := range parts {
				for i := int64(0); i < part.NumRows(); i++ {
					ord = append(ord, at[k]+i)
				}
			}
			if err := d.AddBatches(held, ord); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, part := range parts {
				if err := d.Add(part, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		r := result{constant: d.Constant()}
		for c := range flat.Fields() {
			if x, ok := d.Conflict(c); ok {
				r.conflicts = append(r.conflicts, x.String())
			}
		}
		return r
	}
	var want *result
	for _, probe := range []int{0, 1, 2, 7, 256, 1 << 30} {
		probeRows = probe
		for seed, parts := range [][]arrow.RecordBatch{{rec}, split(rec, 4), split(rec, 5), split(rec, 6)} {
			got := detect(parts, seed >= 2, seed == 2)
			if want == nil {
				want = &got
				if want.constant[3] || !want.constant[0] || !want.constant[4] || want.constant[1] {
					t.Fatalf("detection %v", want.constant)
				}
				continue
			}
			if fmt.Sprint(got) != fmt.Sprint(*want) {
				t.Fatalf("probe %d, batching %d: %v, want %v", probe, seed, got, *want)
			}
		}
	}
}

// TestLayoutFromPackedRefusesBadOrders reads a packed schema back with the
// flat order and query key a manifest records, and with orders a damaged
// or edited manifest could hold: a column named twice (another missing)
// and a query key that is not a query-level column. Unpacking with them
// would build a wrong flat table.
func TestLayoutFromPackedRefusesBadOrders(t *testing.T) {
	isQuery := []bool{true, false, true, true, true, false}
	l, err := NewLayout(flat, []int{2}, isQuery)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range flat.Fields() {
		names = append(names, f.Name)
	}
	key := []string{flat.Field(2).Name}
	back, err := LayoutFromPacked(l.Packed, names, key)
	if err != nil || !back.Flat.Equal(flat) || !slices.Equal(back.QueryKey, l.QueryKey) {
		t.Fatalf("as recorded: %v, %v", back, err)
	}
	twice := slices.Clone(names)
	twice[1] = twice[0]
	if _, err := LayoutFromPacked(l.Packed, twice, key); err == nil {
		t.Errorf("flat order %v (%q twice, %q missing): no error", twice, names[0], names[1])
	}
	for _, k := range [][]string{{flat.Field(1).Name}, {"missing"}, {key[0], key[0]}} {
		if _, err := LayoutFromPacked(l.Packed, names, k); err == nil {
			t.Errorf("query key %q: no error", k)
		}
	}
}
