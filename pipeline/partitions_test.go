package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestSmallPartitionsAtOnce: run writes the many small partitions of a
// Hive output (a file per country/date folder) several at once, in memory
// and spilled, flat and packed with tensors: never more than --parallel,
// their rows together within the rule's limit, and the bytes of every file,
// shard and manifest are those of a run writing one partition at a time
// (--parallel 1). Spilled, the folders share units (a unit is read once for
// all of its folders). A failure injected after some files, with
// partitions in flight, leaves no manifest, file or shard, and the run after
// it writes the same output again.
func TestSmallPartitionsAtOnce(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 24_000, Files: 2, Countries: 8, Days: 10, Seed: 61, RowGroupRows: 4 << 10})
	base := t.TempDir()
	for _, packed := range []bool{false, true} {
		opts := func(out string, parallel int, spill bool) RunOptions {
			o := RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"},
				OutputPartitioning: "hive", ForceFolders: true, Parallel: parallel, Tensors: true, ShardBytes: 64 << 10}
			if packed {
				o.QueryKey = []string{"query_id"}
			}
			if spill {
				o.UnitRows, o.TmpDir = 6_000, t.TempDir()
			}
			return o
		}
		name := map[bool]string{false: "flat", true: "packed"}[packed]
		ref := filepath.Join(base, name+"-p1")
		var mu sync.Mutex
		most := 0
		watch := func(o *RunOptions, parallel int) {
			o.onPartition = func(j, writing int, rows, limit int64) {
				mu.Lock()
				defer mu.Unlock()
				most = max(most, writing)
				if writing > parallel {
					t.Errorf("%s: partition %d started with %d being written, --parallel %d", name, j, writing, parallel)
				}
				if writing > 1 && rows > limit {
					t.Errorf("%s: partition %d started with %d rows being written, more than the %d allowed", name, j, rows, limit)
				}
			}
		}
		o := opts(ref, 1, false)
		watch(&o, 1)
		hiveRun(t, o)
		if most != 1 {
			t.Fatalf("%s: --parallel 1 wrote %d partitions at once", name, most)
		}
		want := readTree(t, ref)
		if n := len(treeFiles(t, filepath.Join(ref, "parquet"))); n < 60 {
			t.Fatalf("%s: %d files; the test needs many small folders", name, n)
		}
		for _, spill := range []bool{false, true} {
			what := name + map[bool]string{false: " in memory", true: " spilled"}[spill]
			out := filepath.Join(base, strings.ReplaceAll(what, " ", "-"))
			o := opts(out, 4, spill)
			most = 0
			watch(&o, 4)
			res := hiveRun(t, o)
			if spill != (res.Report.Units > 1) {
				t.Fatalf("%s: %d units", what, res.Report.Units)
			}
			// Spilled, the folders share units of at most 6,000 rows (a
			// folder a unit would be 80 units): 24,000 rows in 4 to 8.
			if spill && (res.Report.Units < 4 || res.Report.Units > 8) {
				t.Fatalf("%s: %d units for 24,000 rows in units of at most 6,000 rows", what, res.Report.Units)
			}
			if most < 2 {
				t.Fatalf("%s: at most %d partition written at once; small folders should be written several at a time", what, most)
			}
			sameTree(t, what, readTree(t, out), want)
		}
		// A failure after 7 files, others in flight (spilled: in a unit
		// they share): nothing committed or left; the next run writes the
		// reference output.
		for _, spill := range []bool{false, true} {
			what := name + map[bool]string{false: " in memory", true: " spilled"}[spill]
			out := filepath.Join(base, strings.ReplaceAll(what, " ", "-")+"-fail")
			o = opts(out, 4, spill)
			o.FailAfterFiles = 7
			_, err := Run(context.Background(), o)
			if err == nil || !errs.Is(err, errs.Transient) || !strings.Contains(err.Error(), "after 7 files") {
				t.Fatalf("%s: want the injected failure after 7 files, got %v", what, err)
			}
			if _, err := os.Stat(filepath.Join(out, "manifest.json")); !os.IsNotExist(err) {
				t.Fatalf("%s: a failed run left a manifest", what)
			}
			for _, p := range []string{"parquet", "tensors"} {
				if left := treeFiles(t, filepath.Join(out, p)); len(left) != 0 {
					t.Fatalf("%s: a failed run left %d files under %s: %v", what, len(left), p, left[:min(len(left), 3)])
				}
			}
			o.FailAfterFiles, o.Overwrite = 0, true
			hiveRun(t, o)
			sameTree(t, what+" after a failure", readTree(t, out), want)
		}
	}
}
