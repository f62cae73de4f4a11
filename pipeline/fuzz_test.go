package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
)

// FuzzPlanAndTaskManifests: a tampered or truncated plan.json, or a
// tampered map or reduce task manifest (the reduce's records of the files
// and shards it checked included), makes map, reduce and commit fail with a
// classified error (never a panic, never exit 1 "internal error") or
// succeed. Seeded with a real plan and task manifest.
func FuzzPlanAndTaskManifests(f *testing.F) {
	in := testutil.Generate(f, gen.Options{Rows: 3_000, Files: 2, Seed: 50})
	out := filepath.Join(f.TempDir(), "out")
	ctx := context.Background()
	o := distOpts(in, out)
	o.Tensors, o.ShardBytes = true, 64<<10
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
	// A reduce task manifest as reduce 0 writes it (on a copy: the
	// fuzzed runs start from the mapped output).
	rdir := filepath.Join(f.TempDir(), "out")
	if err := os.CopyFS(rdir, os.DirFS(out)); err != nil {
		f.Fatal(err)
	}
	planRel, err := filepath.Rel(out, filepath.FromSlash(res.Plan))
	if err != nil {
		f.Fatal(err)
	}
	if _, err := ReduceTask(ctx, filepath.Join(rdir, planRel), 0, local); err != nil {
		f.Fatal(err)
	}
	red, err := os.ReadFile(filepath.Join(rdir, filepath.FromSlash(reduceDoneName(0))))
	if err != nil {
		f.Fatal(err)
	}
	var rd map[string]any
	if err := json.Unmarshal(red, &rd); err != nil {
		f.Fatal(err)
	}
	if len(rd["checked"].([]any)) == 0 || len(rd["shards_checked"].([]any)) == 0 {
		f.Fatalf("the seed reduce recorded no checks: %s", red)
	}
	none := []byte{} // the reduce's own manifest
	f.Add(planData, done, none)
	f.Add(planData[:len(planData)/2], done, none)
	f.Add(planData, done[:len(done)/3], none)
	f.Add([]byte("{}"), []byte("{}"), none)
	// A slice with fewer values or parts than slice keys (found by the
	// fuzzer: reduce indexed past them).
	f.Add(mutateSlice(f, planData, func(s map[string]any) { s["values"] = []any{} }), done, none)
	f.Add(mutateSlice(f, planData, func(s map[string]any) { s["parts"] = []any{} }), done, none)
	f.Add(mutateSlice(f, planData, func(s map[string]any) { s["rows"], s["start"] = -5, -7 }), done, none)
	// A plan without its partitions (found by the fuzzer in CI: commit
	// assembled no reduce tasks, 0 rows written of 3000, and took it for
	// a bug), and one whose partitions leave rows out.
	f.Add(editJSON(f, planData, func(d map[string]any) { delete(d, "partitions") }), done, none)
	f.Add(editJSON(f, planData, func(d map[string]any) { d["partitions"] = d["partitions"].([]any)[1:] }), done, none)
	// The reduce's records: as written, and with checks missing, for
	// other objects, or with keys out of order.
	f.Add(planData, done, red)
	f.Add(planData, done, red[:len(red)/2])
	f.Add(planData, done, editJSON(f, red, func(d map[string]any) { d["shards_checked"] = d["shards_checked"].([]any)[1:] }))
	f.Add(planData, done, editJSON(f, red, func(d map[string]any) { d["checked"] = []any{map[string]any{"path": "parquet/x", "etag": "1"}} }))
	f.Add(planData, done, editJSON(f, red, func(d map[string]any) {
		c := d["checked"].([]any)[0].(map[string]any)
		c["first"], c["last"] = c["last"], "AA=="
	}))
	// A shard whose "rows" key was damaged (found by the fuzzer: commit
	// counted it as 0 samples and took the shortfall for a bug), and one
	// that starts where its neighbour does not end.
	f.Add(planData, done, editJSON(f, red, func(d map[string]any) {
		sh := d["shards"].([]any)[1].(map[string]any)
		sh["r@ws"] = sh["rows"]
		delete(sh, "rows")
	}))
	f.Add(planData, done, editJSON(f, red, func(d map[string]any) {
		sh := d["shards"].([]any)[1].(map[string]any)
		sh["first_row"] = sh["first_row"].(float64) + 1
	}))
	f.Fuzz(func(t *testing.T, p, d, r []byte) {
		// Each input gets its own copy of the mapped output: commit
		// consumes the plan, and one input must not change the next.
		dir := filepath.Join(t.TempDir(), "out")
		// With a reduce manifest to try, start from the reduced copy,
		// modification times kept (with them the ETags its checks
		// recorded), so that commit confirms rather than reads again.
		base := out
		if len(r) > 0 {
			base = rdir
		}
		planURL := fuzzedCopy(t, base, dir, planRel, p, d)
		// Bounded: a plan can ask for a lot of work (that is not a crash).
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, step := range []func() error{
			func() error {
				if len(r) > 0 {
					return os.WriteFile(filepath.Join(dir, filepath.FromSlash(reduceDoneName(0))), sealed(r), 0o644)
				}
				_, err := ReduceTask(tctx, planURL, 0, local)
				return err
			},
			func() error { _, err := CommitJob(tctx, planURL, local); return err },
		} {
			checkClassified(t, step())
		}
	})
}

// fuzzedCopy copies the output at base to dir, with the fuzzed plan.json
// p and map task 0's manifest d, and returns the copy's plan URL.
func fuzzedCopy(t *testing.T, base, dir, planRel string, p, d []byte) string {
	t.Helper()
	if err := copyTree(base, dir); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{plan.FileName: p, mapDoneName(0): sealed(d)} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, planRel)
}

// sealed returns a fuzzed task manifest that parses sealed with its
// checksum, so that the fuzzer reaches the checks behind it (a damaged
// checksum is TestTaskManifestChecksum's); one that does not parse as is.
func sealed(data []byte) []byte {
	var d TaskManifest
	if json.Unmarshal(data, &d) != nil {
		return data
	}
	out, err := sealDone(&d)
	if err != nil {
		return data
	}
	return out
}

// checkClassified fails on a panic or an unclassified error: a damaged
// plan or manifest must be bad input, a precondition, or a refused check.
func checkClassified(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if unclassified(err) {
		t.Fatalf("%v (class %v)", err, errs.ClassOf(err))
	}
}

// copyTree copies folder src to dst, modification times kept.
func copyTree(src, dst string) error {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		return os.Chtimes(filepath.Join(dst, rel), st.ModTime(), st.ModTime())
	})
}

// mutateSlice returns plan.json with its first slice changed by edit.
func mutateSlice(f *testing.F, data []byte, edit func(map[string]any)) []byte {
	return editJSON(f, data, func(p map[string]any) {
		sl, _ := p["slices"].([]any)
		if len(sl) == 0 {
			f.Fatal("the seed plan has no slices")
		}
		edit(sl[0].(map[string]any))
	})
}

// editJSON returns a JSON object changed by edit.
func editJSON(f testing.TB, data []byte, edit func(map[string]any)) []byte {
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		f.Fatal(err)
	}
	edit(p)
	out, err := json.Marshal(p)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

// FuzzPackedDetect feeds a packed plan's detect and reduce tasks a damaged
// or edited plan.json (its probe) and map task manifest (its query
// digests): they must fail with a classified error (bad input, a
// precondition), never panic or allocate what a count claims.
func FuzzPackedDetect(f *testing.F) {
	in := testutil.Generate(f, gen.Options{Rows: 3_000, Files: 2, Seed: 51})
	out := filepath.Join(f.TempDir(), "out")
	ctx := context.Background()
	o := distOpts(in, out)
	o.SliceKeys, o.QueryKey = []string{"country"}, []string{"query_id"}
	o.RowGroupBytes, o.MinRowGroupBytes, o.FileBytes = 32<<10, 8<<10, 64<<10 // several partitions
	res, _, err := PlanJob(ctx, o, 64<<10)
	if err != nil {
		f.Fatal(err)
	}
	local := RunOptions{Parallel: 1}
	var m0 *TaskManifest
	for i := 0; i < res.MapTasks; i++ {
		d, err := MapTask(ctx, res.Plan, i, local)
		if err != nil {
			f.Fatal(err)
		}
		if i == 0 {
			m0 = d
		}
	}
	// Map task 0's attempt under a fixed name: the seeds the coordinator
	// makes name objects that every fuzzing worker's own setup has too.
	doneFile := filepath.Join(out, filepath.FromSlash(mapDoneName(0)))
	attemptDir := filepath.Dir(filepath.Join(out, filepath.FromSlash(m0.Digest.Path)))
	if err := os.Rename(attemptDir, filepath.Join(filepath.Dir(attemptDir), "a-fuzz")); err != nil {
		f.Fatal(err)
	}
	done, err := os.ReadFile(doneFile)
	if err != nil {
		f.Fatal(err)
	}
	done = bytes.ReplaceAll(done, []byte(filepath.Base(attemptDir)), []byte("a-fuzz"))
	// Its segments' paths follow from the attempt's name (segmentsOf).
	done = bytes.ReplaceAll(done, []byte(`"attempt": "`+m0.Attempt+`"`), []byte(`"attempt": "fuzz"`))
	if err := os.WriteFile(doneFile, done, 0o644); err != nil {
		f.Fatal(err)
	}
	planData, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(plan.FileName)))
	if err != nil {
		f.Fatal(err)
	}
	planRel, err := filepath.Rel(out, filepath.FromSlash(res.Plan))
	if err != nil {
		f.Fatal(err)
	}
	digests := func(edit func(map[string]any)) []byte {
		return editJSON(f, done, func(d map[string]any) { edit(d["query_digests"].(map[string]any)) })
	}
	probe := func(edit func(map[string]any)) []byte {
		return editJSON(f, planData, func(p map[string]any) { edit(p["packing"].(map[string]any)["probe"].(map[string]any)) })
	}
	f.Add(planData, done)
	f.Add(planData, done[:len(done)/2])
	f.Add(planData, digests(func(d map[string]any) { d["partitions"] = -3 }))
	f.Add(planData, digests(func(d map[string]any) { d["partitions"] = 1 << 62 }))
	f.Add(planData, digests(func(d map[string]any) { d["partitions"] = 1 }))
	f.Add(planData, digests(func(d map[string]any) { d["path"] = "../../../etc/passwd" }))
	f.Add(planData, editJSON(f, done, func(d map[string]any) { d["segment_index"].(map[string]any)["units"] = 1 }))
	f.Add(planData, editJSON(f, done, func(d map[string]any) { d["attempt"] = "../x" }))
	f.Add(planData, digests(func(d map[string]any) { d["unusable"] = "x" }))
	f.Add(probe(func(p map[string]any) { p["varying"] = p["varying"].([]any)[1:] }), done)
	f.Add(probe(func(p map[string]any) { p["varying"] = nil }), done)
	f.Add(probe(func(p map[string]any) { p["conflicts"] = nil }), done)
	// The packing's query counts (CI's fuzzer cut one off: the reduce
	// task's check indexed past them).
	packing := func(edit func(map[string]any)) []byte {
		return editJSON(f, planData, func(p map[string]any) { edit(p["packing"].(map[string]any)) })
	}
	f.Add(packing(func(p map[string]any) { p["queries_per_slice"] = p["queries_per_slice"].([]any)[1:] }), done)
	f.Add(packing(func(p map[string]any) { p["queries_per_slice"].([]any)[0] = -1 }), done)
	f.Add(packing(func(p map[string]any) { p["queries_per_slice"].([]any)[0] = 1 << 40 }), done)
	f.Add(packing(func(p map[string]any) { p["queries"] = 7 }), done)
	f.Fuzz(func(t *testing.T, p, d []byte) {
		planURL := fuzzedCopy(t, out, filepath.Join(t.TempDir(), "out"), planRel, p, d)
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for j := 0; j < res.DetectTasks; j++ {
			_, err := DetectTask(tctx, planURL, j, local)
			checkClassified(t, err)
		}
		_, err := ReduceTask(tctx, planURL, 0, local)
		checkClassified(t, err)
	})
}
