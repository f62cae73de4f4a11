package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestInspectCountsAgreeWithDuckDB checks inspect's per-slice rows against
// DuckDB's GROUP BY, checks that it reads only footers and key columns, and
// that re-laying the table out cuts the row groups a pruning reader reads.
func TestInspectCountsAgreeWithDuckDB(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 3, Seed: 8, RowGroupRows: 4096})
	ctx := context.Background()
	before, err := Inspect(ctx, InspectOptions{Inputs: []string{in}, SliceKeys: []string{"country", "date"}})
	if err != nil {
		t.Fatal(err)
	}
	if before.Totals.Rows != 30_000 || before.Totals.Files != 3 || before.Totals.RowGroups < 6 {
		t.Fatalf("totals %+v", before.Totals)
	}
	rows, _ := testutil.DuckDB(t, fmt.Sprintf("select country, strftime(date, '%%Y-%%m-%%d') d, count(*)::BIGINT n from read_parquet('%s/*.parquet') group by all", in))
	want := map[string]float64{}
	for _, r := range rows {
		var n float64
		fmt.Sscan(fmt.Sprint(r["n"]), &n)
		want[fmt.Sprint(r["country"], "/", r["d"])] = n
	}
	if len(want) != len(before.Slices) {
		t.Fatalf("inspect found %d slices, DuckDB %d", len(before.Slices), len(want))
	}
	for _, s := range before.Slices {
		k := fmt.Sprint(s.Key[0].Value, "/", s.Key[1].Value)
		if float64(s.Rows) != want[k] {
			t.Errorf("slice %s: inspect %d rows, DuckDB %v", k, s.Rows, want[k])
		}
		if s.RowGroupsRead < s.RowGroupsTouched {
			t.Errorf("slice %s: reads %d row groups but touches %d", k, s.RowGroupsRead, s.RowGroupsTouched)
		}
	}
	var inBytes int64
	for _, f := range before.Files {
		inBytes += f.Bytes
	}
	if before.Cost.BytesRead*4 > inBytes {
		t.Errorf("inspect read %d of %d bytes: it should read footers and key columns only", before.Cost.BytesRead, inBytes)
	}
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, func(o *RunOptions) { o.RowGroupBytes = 256 << 10; o.MinRowGroupBytes = 16 << 10 })
	after, err := Inspect(ctx, InspectOptions{Inputs: []string{filepath.Join(out, "parquet")}, SliceKeys: []string{"country", "date"}})
	if err != nil {
		t.Fatal(err)
	}
	if after.SliceSummary.MeanRowGroupsRead >= before.SliceSummary.MeanRowGroupsRead/3 {
		t.Errorf("row groups read per slice: before %.1f, after %.1f", before.SliceSummary.MeanRowGroupsRead, after.SliceSummary.MeanRowGroupsRead)
	}
	// Per-column min/max pruning can still read a neighbouring shared row
	// group whose country and date ranges both straddle the slice: at most
	// one on each side.
	var read, touched int
	for _, s := range after.Slices {
		read += s.RowGroupsRead
		touched += s.RowGroupsTouched
		if s.RowGroupsRead > s.RowGroupsTouched+2 {
			t.Errorf("after re-layout, slice %v reads %d row groups but holds rows in %d", s.Key, s.RowGroupsRead, s.RowGroupsTouched)
		}
	}
	if float64(read) > 1.5*float64(touched) {
		t.Errorf("after re-layout slices read %d row groups in all, hold rows in %d", read, touched)
	}
}
