package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// TestKeyPassInTasksBuildsTheSameHistogram checks the merge a distributed
// key pass needs: the row groups' key summaries read by separate "tasks"
// (input ranges), sent through JSON as a task would hand them over, and
// merged, give exactly BuildWith's histogram, per-row-group counts,
// vectors and query counts.
func TestKeyPassInTasksBuildsTheSameHistogram(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "events")
	if _, err := gen.Write(dir, gen.Options{Rows: 30_000, Files: 3, Seed: 7, RowGroupRows: 4096}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	objs, err := storage.List(ctx, []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := source.Open(ctx, objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	col := func(name string) int {
		i := tbl.Schema.FieldIndices(name)
		if len(i) != 1 {
			t.Fatalf("no column %s", name)
		}
		return i[0]
	}
	sliceCols := []int{col("country"), col("date")}
	o := BuildOptions{QueryCols: []int{col("query_id")}, Vectors: true, Counts: true}
	want, wantEx, err := BuildWith(ctx, tbl, sliceCols, o, 2)
	if err != nil {
		t.Fatal(err)
	}
	n := len(tbl.RowGroups())
	if n < 6 {
		t.Fatalf("%d row groups; the test needs several per task", n)
	}
	// Three tasks over uneven ranges, merged in another order.
	var keys []RowGroupKeys
	for _, r := range [][2]int{{n / 2, n}, {0, 1}, {1, n / 2}} {
		var rgs []int
		for i := r[0]; i < r[1]; i++ {
			rgs = append(rgs, i)
		}
		part, err := ReadKeys(ctx, tbl, rgs, sliceCols, o, 2)
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(part)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var back []RowGroupKeys
		if err := dec.Decode(&back); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, back...)
	}
	got, gotEx, err := BuildFromKeys(ctx, tbl, keys, sliceCols, o)
	if err != nil {
		t.Fatal(err)
	}
	js := func(v any) string {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if a, b := js(got.Slices), js(want.Slices); a != b {
		t.Fatalf("merged histogram differs from BuildWith's:\n%.400s\nwant\n%.400s", a, b)
	}
	if len(want.Slices) < 100 {
		t.Fatalf("only %d slices: the test would not tell much", len(want.Slices))
	}
	if a, b := js(gotEx.Counts), js(wantEx.Counts); a != b {
		t.Errorf("per-row-group counts differ")
	}
	if a, b := js(gotEx.Vectors), js(wantEx.Vectors); a != b {
		t.Errorf("vectors differ")
	}
	g, w := gotEx.Queries, wantEx.Queries
	slices.Sort(g.Items)
	slices.Sort(w.Items)
	if g.Queries != w.Queries || js(g.PerSlice) != js(w.PerSlice) || js(g.Items) != js(w.Items) {
		t.Errorf("query counts: %d queries, want %d", g.Queries, w.Queries)
	}
	for _, k := range keys {
		if len(k.Queries) == 0 {
			t.Fatalf("row group %d carries no queries", k.RowGroup)
		}
	}
	// A missing or repeated row group is refused, not merged short.
	if _, _, err := BuildFromKeys(ctx, tbl, keys[1:], sliceCols, o); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("merge without row group %d: %v, want it named missing", keys[0].RowGroup, err)
	}
	if _, _, err := BuildFromKeys(ctx, tbl, append(keys, keys[0]), sliceCols, o); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("merge with a row group twice: %v", err)
	}
}
