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
	"github.com/relayout/relayout/internal/sourcetest"
	"github.com/relayout/relayout/source"
)

// TestKeyPassInTasksBuildsTheSameHistogram checks the merge a distributed
// key pass needs: key summaries of separate "tasks" (uneven input ranges),
// sent through JSON as a task hands them over, and merged in another order,
// give exactly BuildWith's histogram and query counts, and each task's rows
// per slice are the sum of BuildWith's per-row-group counts over its range.
func TestKeyPassInTasksBuildsTheSameHistogram(t *testing.T) {
	tbl, col := openEvents(t, gen.Options{Rows: 30_000, Files: 3, Seed: 7, RowGroupRows: 4096})
	ctx := context.Background()
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
	ranges := [][2]int{{n / 2, n}, {0, 1}, {1, n / 2}}
	var sums []*KeySummary
	for _, r := range ranges {
		part, vectors, err := SummarizeKeys(ctx, tbl, r[0], r[1], sliceCols, BuildOptions{QueryCols: o.QueryCols, Vectors: true}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(vectors) != r[1]-r[0] {
			t.Fatalf("%d vector maps for %d row groups", len(vectors), r[1]-r[0])
		}
		if len(part.Queries) == 0 {
			t.Fatalf("task %v carries no queries", r)
		}
		data, err := json.Marshal(part)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var back KeySummary
		if err := dec.Decode(&back); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, &back)
	}
	got, gotEx, err := BuildFromSummaries(ctx, tbl, sums, sliceCols, BuildOptions{QueryCols: o.QueryCols})
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
	// Task counts, in First order: [0,1), [1,n/2), [n/2,n).
	sorted := [][2]int{ranges[1], ranges[2], ranges[0]}
	for k, r := range sorted {
		sum := map[int32]int64{}
		for i := r[0]; i < r[1]; i++ {
			rg := wantEx.RowGroups[i]
			for j, rk := range rg.IDs {
				sum[rk] += rg.Rows[j]
			}
		}
		if a, b := js(gotEx.TaskCounts[k]), js(sum); a != b {
			t.Errorf("task %v: rows per slice differ from the per-row-group counts summed", r)
		}
	}
	g, w := gotEx.Queries, wantEx.Queries
	slices.Sort(g.Items)
	slices.Sort(w.Items)
	if g.Queries != w.Queries || js(g.PerSlice) != js(w.PerSlice) || js(g.Items) != js(w.Items) {
		t.Errorf("query counts: %d queries, want %d", g.Queries, w.Queries)
	}
	if len(gotEx.Items) != int(w.Queries) {
		t.Errorf("%d query items, want %d", len(gotEx.Items), w.Queries)
	}
	// A missing, overlapping or stale task is refused, not merged short.
	bo := BuildOptions{QueryCols: o.QueryCols}
	if _, _, err := BuildFromSummaries(ctx, tbl, sums[1:], sliceCols, bo); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("merge without task %v: %v, want it named missing", ranges[0], err)
	}
	if _, _, err := BuildFromSummaries(ctx, tbl, append(sums, sums[0]), sliceCols, bo); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("merge with a task twice: %v", err)
	}
	stale := *sums[1]
	stale.Slices = slices.Clone(stale.Slices)
	stale.Slices[0].Rows--
	if _, _, err := BuildFromSummaries(ctx, tbl, []*KeySummary{sums[0], &stale, sums[2]}, sliceCols, bo); err == nil || !strings.Contains(err.Error(), "did the input change") {
		t.Errorf("merge with a task whose rows differ from the footers: %v", err)
	}
}

// openEvents writes the generated event log with o and opens it (closed
// when the test ends); col returns a column's index.
func openEvents(t *testing.T, o gen.Options) (tbl *source.Table, col func(name string) int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "events")
	if _, err := gen.Write(dir, o); err != nil {
		t.Fatal(err)
	}
	tbl = sourcetest.Open(t, dir)
	return tbl, func(name string) int {
		i := tbl.Schema.FieldIndices(name)
		if len(i) != 1 {
			t.Fatalf("no column %s", name)
		}
		return i[0]
	}
}
