package partition

import (
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestSortByRankThenKey checks Sort against a stable sort of the rows by
// (slice rank, sort key as an integer), ties in input order, for several
// batches (one empty) and any parallelism; and that a row whose slice the
// histogram lacks is an error.
func TestSortByRankThenKey(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "country", Type: arrow.BinaryTypes.String},
		{Name: "q", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	countries := []string{"DE", "FR", "US", "JP", "BR", "IN"}
	r := rand.New(rand.NewSource(7))
	type row struct {
		country string
		q       int64
	}
	var rows []row
	var recs []arrow.RecordBatch
	for _, n := range []int{1500, 0, 3000, 7, 2200} {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		for i := 0; i < n; i++ {
			x := row{countries[r.Intn(len(countries))], int64(r.Intn(100)) - 50}
			b.Field(0).(*array.StringBuilder).Append(x.country)
			b.Field(1).(*array.Int64Builder).Append(x.q)
			rows = append(rows, x)
		}
		recs = append(recs, b.NewRecordBatch())
		b.Release()
	}
	defer func() {
		for _, rec := range recs {
			rec.Release()
		}
	}()
	// The slices in a rank order other than their keys' order.
	rank := map[string]int{}
	var hs []Slice
	for i, c := range []string{"US", "DE", "IN", "FR", "JP", "BR"} {
		a := array.NewStringBuilder(memory.DefaultAllocator)
		a.Append(c)
		arr := a.NewArray()
		key := AppendKey(nil, arr, 0)
		arr.Release()
		a.Release()
		hs = append(hs, Slice{Key: key, Parts: [][]byte{key}})
		rank[c] = i
	}
	want := make([]int64, len(rows))
	for i := range want {
		want[i] = int64(i)
	}
	sort.SliceStable(want, func(a, b int) bool {
		x, y := rows[want[a]], rows[want[b]]
		if rank[x.country] != rank[y.country] {
			return rank[x.country] < rank[y.country]
		}
		return x.q < y.q
	})
	h := NewHistogram(hs)
	for _, p := range []int{1, 2, 4} {
		got, err := Sort(h, recs, []int{0}, []int{1}, p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("parallel %d: the order differs from a stable sort by (rank, key)", p)
		}
		// By rank alone (no sort keys): input order within a slice.
		got, err = Sort(h, recs, []int{0}, nil, p)
		if err != nil {
			t.Fatal(err)
		}
		byRank := make([]int64, len(rows))
		for i := range byRank {
			byRank[i] = int64(i)
		}
		sort.SliceStable(byRank, func(a, b int) bool { return rank[rows[byRank[a]].country] < rank[rows[byRank[b]].country] })
		if !slices.Equal(got, byRank) {
			t.Fatalf("parallel %d, no sort keys: the order differs from a stable sort by rank", p)
		}
	}
	if _, err := Sort(NewHistogram(hs[:5]), recs, []int{0}, []int{1}, 2); err == nil || !strings.Contains(err.Error(), "did not see") {
		t.Fatalf("a slice missing from the histogram: %v", err)
	}
}
