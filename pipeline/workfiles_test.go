package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
)

// TestWorkFilesAreChecked: the schema and the encoding sample the plan
// step stores beside plan.json are Arrow IPC, which arrow-go decodes by
// the counts and lengths in it (a damaged count can be a fatal
// out-of-memory error). plan.json records their hashes, and a task checks
// a file before it decodes it: a damaged or changed one, or a plan that
// records no hash for it, is bad input naming it (exit 3).
func TestWorkFilesAreChecked(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 2, Seed: 53})
	out := filepath.Join(t.TempDir(), "out")
	o := distOpts(in, out)
	o.RowGroupBytes, o.MinRowGroupBytes, o.FileBytes = 32<<10, 8<<10, 64<<10
	res, p, err := PlanJob(ctx, o, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.WorkFiles) != 2 || p.WorkFiles["schema.arrows"] == "" || p.WorkFiles["sample.arrows"] == "" {
		t.Fatalf("plan.json records %v", p.WorkFiles)
	}
	local := RunOptions{Parallel: 1}
	mapsAndDetects(t, ctx, res, local)
	rel := filepath.FromSlash
	flip := func(dir, name string) {
		path := filepath.Join(dir, rel(name))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x40
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	forget := func(key string) func(dir string) {
		return func(dir string) {
			path := filepath.Join(dir, rel(plan.FileName))
			var m map[string]any
			b, err := os.ReadFile(path)
			if err == nil {
				err = json.Unmarshal(b, &m)
			}
			if err != nil {
				t.Fatal(err)
			}
			delete(m["work_files"].(map[string]any), key)
			if b, err = json.Marshal(m); err == nil {
				err = os.WriteFile(path, b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	mapTask := func(dir string) error {
		_, err := MapTask(ctx, filepath.Join(dir, rel(plan.FileName)), 0, local)
		return err
	}
	reduceTask := func(dir string) error {
		_, err := ReduceTask(ctx, filepath.Join(dir, rel(plan.FileName)), 0, local)
		return err
	}
	for _, c := range []struct {
		name string
		edit func(dir string)
		step func(dir string) error
		want string
	}{
		{"as written: map", func(string) {}, mapTask, ""},
		{"as written: reduce", func(string) {}, reduceTask, ""},
		{"schema damaged: map", func(dir string) { flip(dir, plan.SchemaFileName) }, mapTask, "schema.arrows is damaged"},
		{"schema damaged: reduce", func(dir string) { flip(dir, plan.SchemaFileName) }, reduceTask, "schema.arrows is damaged"},
		{"sample damaged: reduce", func(dir string) { flip(dir, plan.SampleFileName) }, reduceTask, "sample.arrows is damaged"},
		{"no hash for the sample", forget("sample.arrows"), reduceTask, "records no hash for"},
		{"no hash for the schema", forget("schema.arrows"), mapTask, "records no hash for"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			if err := copyTree(out, dir); err != nil {
				t.Fatal(err)
			}
			c.edit(dir)
			err := c.step(dir)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if errs.ClassOf(err) != errs.BadInput || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v (class %v), want bad input saying %q", err, errs.ClassOf(err), c.want)
			}
		})
	}
}
