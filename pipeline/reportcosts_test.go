package pipeline

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestReportFromCheckedFooters: the report's read costs on the output (per
// slice, totals, folders' footers, warnings) are modelled from each file's
// footer while the check has it open; they equal those of a run that does
// not check (--check none), whose report opens every written file again.
// Hive outputs of 80 folders, flat and packed with tensors, spilled too, and
// a flat output of several files with a sort key.
func TestReportFromCheckedFooters(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 24_000, Files: 2, Countries: 8, Days: 10, Seed: 67, RowGroupRows: 4 << 10})
	cases := []struct {
		name string
		set  func(*RunOptions)
	}{
		{"hive", func(o *RunOptions) { o.OutputPartitioning, o.ForceFolders = "hive", true }},
		{"hive spilled", func(o *RunOptions) {
			o.OutputPartitioning, o.ForceFolders, o.UnitRows, o.TmpDir = "hive", true, 6_000, t.TempDir()
		}},
		{"hive packed", func(o *RunOptions) {
			o.OutputPartitioning, o.ForceFolders, o.QueryKey, o.Tensors, o.ShardBytes = "hive", true, []string{"query_id"}, true, 64<<10
		}},
		{"files", func(o *RunOptions) {
			o.FileBytes, o.RowGroupBytes, o.MinRowGroupBytes, o.SortKeys = 256<<10, 64<<10, 16<<10, []string{"user_id"}
		}},
	}
	for _, c := range cases {
		costs := func(check string) ([]byte, int) {
			o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "out"), SliceKeys: []string{"country", "date"}, Parallel: 2, Check: check}
			c.set(&o)
			res, err := Run(context.Background(), o)
			if err != nil {
				t.Fatalf("%s, --check %s: %v", c.name, check, err)
			}
			r := res.Report
			b, err := json.Marshal([]any{r.Slices, r.Warnings, r.Output, r.Packing, r.Transfer})
			if err != nil {
				t.Fatal(err)
			}
			return b, len(res.Manifest.Files)
		}
		checked, files := costs(CheckKeys)
		reopened, _ := costs(CheckNone)
		if files < 5 {
			t.Fatalf("%s: %d files; the test needs several", c.name, files)
		}
		if string(checked) != string(reopened) {
			t.Fatalf("%s: the report from the check's footers\n%s\ndiffers from the one that reopens the files\n%s", c.name, checked, reopened)
		}
	}
}
