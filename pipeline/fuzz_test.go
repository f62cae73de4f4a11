package pipeline

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
)

// FuzzPlanAndTaskManifests: a tampered or truncated plan.json, or a
// tampered map task manifest, makes map, reduce and commit fail with a
// classified error (never a panic, never exit 1 "internal error") or
// succeed. Seeded with a real plan and task manifest.
func FuzzPlanAndTaskManifests(f *testing.F) {
	in := testutil.Generate(f, gen.Options{Rows: 3_000, Files: 2, Seed: 50})
	out := filepath.Join(f.TempDir(), "out")
	ctx := context.Background()
	o := distOpts(in, out)
	res, _, err := PlanJob(ctx, o, 64<<10)
	if err != nil {
		f.Fatal(err)
	}
	local := RunOptions{Parallel: 1}
	for i := 0; i < res.MapTasks; i++ {
		if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
			f.Fatal(err)
		}
	}
	planData, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(plan.FileName)))
	if err != nil {
		f.Fatal(err)
	}
	done, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(mapDoneName(0))))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(planData, done)
	f.Add(planData[:len(planData)/2], done)
	f.Add(planData, done[:len(done)/3])
	f.Add([]byte("{}"), []byte("{}"))
	// A slice with fewer values or parts than slice keys (found by the
	// fuzzer: reduce indexed past them).
	f.Add(mutateSlice(f, planData, func(s map[string]any) { s["values"] = []any{} }), done)
	f.Add(mutateSlice(f, planData, func(s map[string]any) { s["parts"] = []any{} }), done)
	f.Add(mutateSlice(f, planData, func(s map[string]any) { s["rows"], s["start"] = -5, -7 }), done)
	planRel, err := filepath.Rel(out, filepath.FromSlash(res.Plan))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, p, d []byte) {
		// Each input gets its own copy of the mapped output: commit
		// consumes the plan, and one input must not change the next.
		dir := filepath.Join(t.TempDir(), "out")
		if err := os.CopyFS(dir, os.DirFS(out)); err != nil {
			t.Fatal(err)
		}
		planURL := filepath.Join(dir, planRel)
		for name, data := range map[string][]byte{plan.FileName: p, mapDoneName(0): d} {
			if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// Bounded: a plan can ask for a lot of work (that is not a crash).
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, step := range []func() error{
			func() error { _, err := ReduceTask(tctx, planURL, 0, local); return err },
			func() error { _, err := CommitJob(tctx, planURL, local); return err },
		} {
			err := step()
			if err == nil {
				continue
			}
			if c := errs.ClassOf(err); strings.Contains(err.Error(), "panic") || (c == errs.Internal && !strings.Contains(err.Error(), "internal:") && !strings.Contains(err.Error(), "check failed")) {
				t.Fatalf("%v (class %v)", err, c)
			}
		}
	})
}

// mutateSlice returns plan.json with its first slice changed by edit.
func mutateSlice(f *testing.F, data []byte, edit func(map[string]any)) []byte {
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		f.Fatal(err)
	}
	sl, _ := p["slices"].([]any)
	if len(sl) == 0 {
		f.Fatal("the seed plan has no slices")
	}
	edit(sl[0].(map[string]any))
	out, err := json.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	return out
}
