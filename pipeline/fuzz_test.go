package pipeline

import (
	"context"
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
	planPath := filepath.Join(out, filepath.FromSlash(plan.FileName))
	donePath := filepath.Join(out, filepath.FromSlash(mapDoneName(0)))
	plan, _ := os.ReadFile(planPath)
	done, _ := os.ReadFile(donePath)
	f.Add(plan, done)
	f.Add(plan[:len(plan)/2], done)
	f.Add(plan, done[:len(done)/3])
	f.Add([]byte("{}"), []byte("{}"))
	f.Fuzz(func(t *testing.T, p, d []byte) {
		os.WriteFile(planPath, p, 0o644)
		os.WriteFile(donePath, d, 0o644)
		defer func() {
			os.WriteFile(planPath, plan, 0o644)
			os.WriteFile(donePath, done, 0o644)
		}()
		// Bounded: a plan can ask for a lot of work (that is not a crash).
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, step := range []func() error{
			func() error { _, err := ReduceTask(tctx, res.Plan, 0, local); return err },
			func() error { _, err := CommitJob(tctx, res.Plan, local); return err },
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
