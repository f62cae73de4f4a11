package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
)

// TestKeyTasksRefusals: what the key-task steps refuse, with the class an
// orchestrator's retry policy keys on, and that a merge retried, or a plan
// run over a key plan's leftovers, is harmless.
func TestKeyTasksRefusals(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 41, RowGroupRows: 4 << 10})
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	out := filepath.Join(t.TempDir(), "out")
	o := distOpts(in, out)
	kr, err := KeyPlanJob(ctx, o, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	if kr.KeyTasks < 3 {
		t.Fatalf("%d key tasks; the test wants several", kr.KeyTasks)
	}
	if _, err := KeysTask(ctx, kr.Keys, kr.KeyTasks, local); !errs.Is(err, errs.Usage) {
		t.Errorf("key task %d of %d: %v, want a usage error", kr.KeyTasks, kr.KeyTasks, err)
	}
	if _, err := KeysTask(ctx, out+"/_relayout/plan.json", 0, local); !errs.Is(err, errs.Usage) {
		t.Errorf("keys with a plan URL: %v, want a usage error", err)
	}
	for i := 0; i < kr.KeyTasks; i++ {
		if i == 1 {
			continue
		}
		if _, err := KeysTask(ctx, kr.Keys, i, local); err != nil {
			t.Fatal(err)
		}
	}
	// A key task missing: exit 5, naming it; nothing written.
	if _, _, err := PlanFromKeys(ctx, kr.Keys, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "key task 1 ") {
		t.Fatalf("plan --keys without key task 1: %v, want a precondition naming it", err)
	}
	if _, err := os.Stat(filepath.Join(out, plan.FileName)); !os.IsNotExist(err) {
		t.Fatalf("a failed merge left %s (%v)", plan.FileName, err)
	}
	d, err := KeysTask(ctx, kr.Keys, 1, local)
	if err != nil {
		t.Fatal(err)
	}
	// A damaged summary is corrupt data (exit 3) naming the object and
	// the task to run again, never a retry.
	sum := filepath.Join(out, filepath.FromSlash(d.Summary))
	good, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 0x40
	if err := os.WriteFile(sum, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = PlanFromKeys(ctx, kr.Keys, local)
	var e *errs.Error
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "keys.json.zst") || !errors.As(err, &e) || !strings.Contains(e.Hint, "key task 1") {
		t.Fatalf("plan --keys over a damaged summary: %v, want bad input naming it and the task to run again", err)
	}
	if err := os.WriteFile(sum, good, 0o644); err != nil {
		t.Fatal(err)
	}
	res, _, err := PlanFromKeys(ctx, kr.Keys, local)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(out, plan.FileName))
	if err != nil {
		t.Fatal(err)
	}
	// A merge retried (its orchestrator lost the answer) writes the same plan.
	if _, _, err := PlanFromKeys(ctx, kr.Keys, local); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(out, plan.FileName)); !bytes.Equal(again, first) || res.MapTasks != kr.KeyTasks {
		t.Fatalf("a retried merge wrote another plan (or %d map tasks for %d key tasks)", res.MapTasks, kr.KeyTasks)
	}
	// The inputs changed after the key plan: the key tasks refuse them.
	kr2out := filepath.Join(t.TempDir(), "out2")
	kr2, err := KeyPlanJob(ctx, distOpts(in, kr2out), 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(in, "*.parquet"))
	info, err := os.Stat(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(files[0], info.ModTime(), info.ModTime().Add(1e9)); err != nil {
		t.Fatal(err)
	}
	if _, err := KeysTask(ctx, kr2.Keys, 0, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "changed since the plan") {
		t.Fatalf("key task over a changed input: %v, want a precondition", err)
	}
	// A plain plan over a key plan's leftovers claims them (keys.json
	// marks them as relayout's) and leaves no key task behind.
	if _, _, err := PlanJob(ctx, distOpts(in, kr2out), 256<<10); err != nil {
		t.Fatalf("plan over a key plan's leftovers: %v", err)
	}
	if _, err := os.Stat(filepath.Join(kr2out, KeysFileName)); !os.IsNotExist(err) {
		t.Fatalf("plan left the old key plan (%v)", err)
	}
}

// TestMapTaskOpensOnlyItsFiles: a map task lists the inputs but opens (and
// checks the pins of) only the files its row groups are in, so its cost
// does not grow with the table's other files; reduce tasks open none (they
// read the plan's schema). Damage to another file is that file's map
// task's error, and commit's, never this one's.
func TestMapTaskOpensOnlyItsFiles(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 4, Seed: 43, RowGroupRows: 4 << 10})
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	out := filepath.Join(t.TempDir(), "out")
	res, p, err := PlanJob(ctx, distOpts(in, out), 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	last := len(p.Inputs) - 1
	if p.Maps[0].RowGroups[len(p.Maps[0].RowGroups)-1][0] == last {
		t.Fatalf("map task 0 reaches the last file; the test needs it not to")
	}
	files, _ := filepath.Glob(filepath.Join(in, "*.parquet"))
	if err := os.WriteFile(files[last], []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := MapTask(ctx, res.Plan, 0, local); err != nil {
		t.Fatalf("map task 0, which does not read the damaged file: %v", err)
	}
	if _, err := MapTask(ctx, res.Plan, res.MapTasks-1, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), filepath.Base(files[last])) {
		t.Fatalf("the last map task, which reads it: %v, want a precondition naming it", err)
	}
	if _, err := CommitJob(ctx, res.Plan, local); !errs.Is(err, errs.Precondition) {
		t.Fatalf("commit: %v, want a precondition", err)
	}
}

// TestCommitConfirmsWhatReducesChecked: every reduce task, flat or packed,
// reads its files and tensor shards back and records each one's ETag (and
// a file's first and last keys); commit then only confirms them (size and
// ETag), reads again anything rewritten since, refuses what was damaged,
// and commits the same bytes as run.
func TestCommitConfirmsWhatReducesChecked(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 47, RowGroupRows: 4 << 10})
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	for _, tc := range []struct {
		name   string
		packed bool
	}{{"flat", false}, {"packed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			o := func(out string) RunOptions {
				x := distOpts(in, out)
				x.Tensors, x.ShardBytes = true, 256<<10
				if tc.packed {
					x.QueryKey = []string{"query_id"}
				}
				return x
			}
			ref := filepath.Join(base, "run")
			if _, err := Run(ctx, o(ref)); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(base, "out")
			res, _, err := PlanJob(ctx, o(out), 256<<10)
			if err != nil {
				t.Fatal(err)
			}
			if res.ReduceTasks < 2 {
				t.Fatalf("%d reduce tasks; the test wants several", res.ReduceTasks)
			}
			mapsAndDetects(t, ctx, res, local)
			owner := map[string]int{} // shard path -> reduce task
			for j := 0; j < res.ReduceTasks; j++ {
				d, err := ReduceTask(ctx, res.Plan, j, local)
				if err != nil {
					t.Fatal(err)
				}
				if len(d.Checked) != len(d.Files) || len(d.ShardsChecked) != len(d.Shards) {
					t.Fatalf("reduce %d recorded %d file and %d shard checks for %d files and %d shards", j, len(d.Checked), len(d.ShardsChecked), len(d.Files), len(d.Shards))
				}
				for k, c := range d.Checked {
					if c.Path != d.Files[k].Path || c.ETag == "" || c.First == nil || c.Last == nil {
						t.Fatalf("reduce %d recorded %+v for %s, want its ETag and keys", j, c, d.Files[k].Path)
					}
				}
				for k, c := range d.ShardsChecked {
					if c.Path != d.Shards[k].Path || c.ETag == "" {
						t.Fatalf("reduce %d recorded %+v for shard %s, want its ETag", j, c, d.Shards[k].Path)
					}
					owner[c.Path] = j
				}
			}
			if len(owner) < 2 {
				t.Fatalf("%d shards; the test wants several", len(owner))
			}
			part := func(k int) string { return filepath.Join(out, "parquet", fmt.Sprintf("part-%05d.parquet", k)) }
			var shardPath string // the last shard
			for p := range owner {
				shardPath = max(shardPath, p)
			}
			shard := filepath.Join(out, filepath.FromSlash(shardPath))
			shardName := path.Base(shardPath)
			noManifest := func() {
				t.Helper()
				if _, err := os.Stat(filepath.Join(out, "manifest.json")); !os.IsNotExist(err) {
					t.Fatalf("a refused commit left a manifest (%v)", err)
				}
			}
			later := time.Now().Add(2 * time.Second)
			// A file damaged after its check: a new ETag, so commit reads
			// it again and refuses it. Put back (a new ETag again, equal
			// bytes), it is read again and passes.
			good := flipByte(t, part(1), later)
			if _, err := CommitJob(ctx, res.Plan, local); err == nil || !strings.Contains(err.Error(), "part-00001.parquet") || !strings.Contains(err.Error(), "xxhash64") {
				t.Fatalf("commit over a file damaged after its check: %v, want the file read again and refused", err)
			}
			noManifest()
			rewrite(t, part(1), good, later.Add(time.Second))
			// The same for a shard.
			st, err := os.Stat(shard)
			if err != nil {
				t.Fatal(err)
			}
			checkedTime := st.ModTime()
			good = flipByte(t, shard, later)
			if _, err := CommitJob(ctx, res.Plan, local); err == nil || !strings.Contains(err.Error(), shardName) || !strings.Contains(err.Error(), "xxhash64") {
				t.Fatalf("commit over a shard damaged after its check: %v, want the shard read again and refused", err)
			}
			noManifest()
			// Damage that keeps the ETag the reduce recorded is not seen:
			// commit confirms the object, it does not read it again (a
			// full verify does).
			rewrite(t, shard, good, checkedTime)
			flipByte(t, shard, checkedTime)
			if _, err := CommitJob(ctx, res.Plan, local); err != nil {
				t.Fatalf("commit: %v", err)
			}
			vr, err := verify.Output(ctx, out, false, 2)
			if err != nil || vr.OK || !strings.Contains(vr.Problem, shardName) {
				t.Fatalf("verify of the committed output with a shard damaged behind commit's back: %+v, %v", vr, err)
			}
			rewrite(t, shard, good, later)
			want, got := readTree(t, ref), readTree(t, out)
			for k, v := range want {
				if k != "_report.json" && !bytes.Equal(got[k], v) {
					t.Fatalf("%s differs from run's", k)
				}
			}
			if vr, err := verify.Output(ctx, out, false, 2); err != nil || !vr.OK {
				t.Fatalf("verify: %+v, %v", vr, err)
			}
		})
	}
}

// TestHugePagesOption: --huge-pages takes auto (the default), on and off,
// and anything else is a usage error naming the three.
func TestHugePagesOption(t *testing.T) {
	base := RunOptions{Inputs: []string{"in"}, Output: "out"}
	for _, v := range []string{"", HugePagesAuto, HugePagesOn, HugePagesOff} {
		o := base
		o.HugePages = v
		got, err := o.withDefaults()
		if err != nil {
			t.Fatalf("--huge-pages %q: %v", v, err)
		}
		if want := cmp.Or(v, HugePagesAuto); got.HugePages != want {
			t.Fatalf("--huge-pages %q became %q, want %q", v, got.HugePages, want)
		}
	}
	o := base
	o.HugePages = "always"
	if _, err := o.withDefaults(); !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), "auto, on or off") {
		t.Fatalf("--huge-pages always: %v", err)
	}
}

// TestTasksListNoInput: map and key tasks ask the store for their own
// input files (a HEAD each), never for a listing of the input (one LIST
// request per 1,000 objects, for every task). An object added to the input
// after the plan is read by no task; commit, which lists the input,
// refuses it.
func TestTasksListNoInput(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 4, Seed: 53, RowGroupRows: 4 << 10})
	ctx := context.Background()
	params, _, counts := s3ServerCounting(t, "bkt")
	loc, err := storage.OpenDir(ctx, "s3://bkt/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "in/", in)
	local := RunOptions{Parallel: 2}
	o := distOpts("s3://bkt/in/"+params, "s3://bkt/out/"+params)
	inputListings := func(step string) {
		t.Helper()
		for _, p := range counts.listings() {
			if strings.HasPrefix(p, "in") {
				t.Errorf("%s listed the input (prefix %q)", step, p)
			}
		}
	}
	kr, err := KeyPlanJob(ctx, o, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	counts.listings()
	for k := 0; k < kr.KeyTasks; k++ {
		if _, err := KeysTask(ctx, kr.Keys, k, local); err != nil {
			t.Fatal(err)
		}
	}
	inputListings("the key tasks")
	res, _, err := PlanFromKeys(ctx, kr.Keys, local)
	if err != nil {
		t.Fatal(err)
	}
	if res.MapTasks < 2 {
		t.Fatalf("%d map tasks; the test needs several", res.MapTasks)
	}
	data, _ := os.ReadFile(testutil.Files(t, in)[0])
	if err := loc.Bucket.WriteAll(ctx, "in/zz-added-after-the-plan.parquet", data, nil); err != nil {
		t.Fatal(err)
	}
	counts.listings()
	for k := 0; k < res.MapTasks; k++ {
		if _, err := MapTask(ctx, res.Plan, k, local); err != nil {
			t.Fatalf("map task %d: %v", k, err)
		}
	}
	inputListings("the map tasks")
	for k := 0; k < res.ReduceTasks; k++ {
		if _, err := ReduceTask(ctx, res.Plan, k, local); err != nil {
			t.Fatalf("reduce task %d: %v", k, err)
		}
	}
	if _, err := CommitJob(ctx, res.Plan, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "changed since the plan") {
		t.Fatalf("commit over an input with an object added: %v, want a precondition", err)
	}
	if err := loc.Bucket.Delete(ctx, "in/zz-added-after-the-plan.parquet"); err != nil {
		t.Fatal(err)
	}
	if _, err := CommitJob(ctx, res.Plan, local); err != nil {
		t.Fatalf("commit over the pinned input: %v", err)
	}
}
