package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
)

// mountTmpfs mounts a tmpfs of size bytes at a new folder and unmounts it
// when the test ends.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		testutil.Missing(t, "cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

func pages(n int64) int64 { return (n + 4095) / 4096 }

// treeFiles lists every file under dir (names relative to it), hidden and
// temporary ones included.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestDiskFullWhileManifestIsWritten: a disk with room for the data files
// and half the manifest. The run must fail with exit 4 and leave no
// manifest (before the fix: a truncated manifest.json, then exit 5 on every
// retry), no data and no temporary file; once the disk has room, the retry
// commits an output byte-identical to a run on a roomy disk.
func TestDiskFullWhileManifestIsWritten(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 5})
	ref := filepath.Join(t.TempDir(), "ref")
	smallRun(t, in, ref, nil)
	var dataPages int64
	for _, f := range testutil.Files(t, filepath.Join(ref, "parquet")) {
		st, _ := os.Stat(f)
		dataPages += pages(st.Size())
	}
	mst, err := os.Stat(filepath.Join(ref, manifests.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if pages(mst.Size()) < 4 {
		t.Fatalf("manifest is %d bytes: too small to cut in half by pages", mst.Size())
	}
	// Data, the lease (one page) and half the manifest.
	size := (dataPages + 1 + pages(mst.Size())/2) * 4096
	disk := mountTmpfs(t, size)
	out := filepath.Join(disk, "out")
	run := func() error {
		_, err := Run(context.Background(), RunOptions{
			Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"},
			RowGroupBytes: 512 << 10, MinRowGroupBytes: 64 << 10, FileBytes: 1 << 20,
		})
		return err
	}
	err = run()
	if !errs.Is(err, errs.Transient) || !strings.Contains(err.Error(), "manifest.json") {
		t.Fatalf("run on a full disk: %v (class %v), want exit 4 naming manifest.json", err, errs.ClassOf(err))
	}
	if left := treeFiles(t, out); len(left) != 0 {
		t.Fatalf("the failed run left %v (want nothing: no manifest, no data, no temporary file, no lease)", left)
	}
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", size*4), disk).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	if err := run(); err != nil {
		t.Fatalf("retry with room: %v (class %v)", err, errs.ClassOf(err))
	}
	a, b := readTree(t, ref), readTree(t, out)
	delete(a, report.FileName)
	delete(b, report.FileName)
	if len(a) != len(b) {
		t.Fatalf("retry wrote %d files, the reference %d", len(b), len(a))
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			t.Fatalf("%s differs from the reference run's", k)
		}
	}
}

// TestOutputHeldByAnotherRun: a live run's lease keeps a second run off the
// output (exit 4, retry later) and nothing of the first run is touched.
// Two runs with different configs started together: exactly one commits,
// the other fails without removing anything, and the committed output
// verifies. Before the fix the second run deleted the first's files.
func TestOutputHeldByAnotherRun(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 6})
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "out")
	loc, err := storage.OpenDir(ctx, out, true)
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := storage.AcquireLease(ctx, loc, "run", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(out, "parquet"), 0o755)
	mine := filepath.Join(out, "parquet", "part-00000.parquet")
	os.WriteFile(mine, []byte("being written by the lease holder"), 0o644)
	_, err = Run(ctx, RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country"}})
	if !errs.Is(err, errs.Transient) || !strings.Contains(err.Error(), "being written by run "+held.RunID()) {
		t.Fatalf("second run: %v (class %v), want exit 4 naming the holder", err, errs.ClassOf(err))
	}
	if data, _ := os.ReadFile(mine); string(data) != "being written by the lease holder" {
		t.Fatal("the refused run touched the holder's file")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	os.Remove(mine)

	// A real race, many times: exactly one run commits each time.
	for trial := 0; trial < testutil.Trials(6); trial++ {
		out := filepath.Join(t.TempDir(), "race")
		errsOf := raceRuns(ctx, in, out)
		ok := 0
		for _, e := range errsOf {
			if e == nil {
				ok++
			} else if c := errs.ClassOf(e); c != errs.Transient && c != errs.Precondition {
				t.Fatalf("trial %d: the losing run failed with %v (class %v), want exit 4 or 5", trial, e, c)
			}
		}
		if ok != 1 {
			t.Fatalf("trial %d: %d runs committed (errors %v, %v), want exactly 1", trial, ok, errsOf[0], errsOf[1])
		}
		res, err := verify.Output(ctx, out, false, 2)
		if err != nil || !res.OK {
			t.Fatalf("trial %d: the committed output does not verify: %+v %v", trial, res, err)
		}
		if _, err := os.Stat(filepath.Join(out, storage.LeaseFileName)); !os.IsNotExist(err) {
			t.Fatalf("trial %d: the lease was left behind", trial)
		}
	}
	t.Logf("%d races of two runs to one local output: exactly one committed each time, the other exit 4 or 5", testutil.Trials(6))
}

// TestStaleLeaseIsTakenOver: a lease whose process is gone (same host) or
// that was not renewed within its TTL (another host) is taken over, and the
// debris it marks is removed (flat and in Hive folders, the emptied
// folders too); a fresh lease from another host is not.
func TestStaleLeaseIsTakenOver(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 7})
	ctx := context.Background()
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	cases := []struct {
		name  string
		lease storage.LeaseInfo
		code  errs.Class
	}{
		{"dead process on this host", storage.LeaseInfo{Host: host, PID: dead.Process.Pid, Renewed: now, TTLSeconds: 3600}, 0},
		{"expired on another host", storage.LeaseInfo{Host: "elsewhere", PID: 1, Renewed: now.Add(-time.Hour), TTLSeconds: 60}, 0},
		{"live on another host", storage.LeaseInfo{Host: "elsewhere", PID: 1, Renewed: now, TTLSeconds: 3600}, errs.Transient},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			os.MkdirAll(filepath.Join(out, "parquet"), 0o755)
			debris := filepath.Join(out, "parquet", "part-00007.parquet")
			os.WriteFile(debris, []byte("a killed run's partial file"), 0o644)
			// A killed run's file in a Hive folder (--output-partitioning
			// hive): before, every retry failed with exit 5 ("which
			// relayout did not write") until someone removed it by hand.
			hiveDir := filepath.Join(out, "parquet", "country=C00", "date=2026-10-01")
			os.MkdirAll(hiveDir, 0o755)
			hiveDebris := filepath.Join(hiveDir, "part-00003.parquet")
			os.WriteFile(hiveDebris, []byte("a killed Hive run's file"), 0o644)
			killedPut := filepath.Join(out, ".manifest.json.12345.tmp") // a manifest write killed midway
			os.WriteFile(killedPut, []byte(`{"format":`), 0o644)
			c.lease.Format, c.lease.RunID, c.lease.Command, c.lease.Started = storage.LeaseFormat, "old", "run", now
			data, _ := json.Marshal(c.lease)
			os.WriteFile(filepath.Join(out, storage.LeaseFileName), data, 0o644)
			_, err := Run(ctx, RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country"}})
			if errs.ClassOf(err) != c.code {
				t.Fatalf("run: %v (class %v), want class %v", err, errs.ClassOf(err), c.code)
			}
			_, statErr := os.Stat(debris)
			if c.code == 0 && !os.IsNotExist(statErr) {
				t.Fatal("the debris of the stale run was not removed")
			}
			if _, err := os.Stat(killedPut); c.code == 0 && !os.IsNotExist(err) {
				t.Fatal("the temporary file of a killed manifest write was left")
			}
			if c.code != 0 && statErr != nil {
				t.Fatal("a refused run removed a live run's file")
			}
			_, hiveErr := os.Stat(filepath.Join(out, "parquet", "country=C00"))
			if c.code == 0 && !os.IsNotExist(hiveErr) {
				t.Fatal("the stale run's Hive file or its emptied folders were left")
			}
			if c.code != 0 && hiveErr != nil {
				t.Fatal("a refused run removed a live run's Hive file")
			}
		})
	}
}

// TestNeverDeletesWhatRelayoutDidNotWrite: an output overlapping an input is
// refused (exit 2) before anything is touched (before the fix, `--input
// X/parquet --output X` deleted the input), and files under parquet/ that no
// manifest, lease or plan marks as relayout's are refused (exit 5), not
// removed, as is a foreign file beside a committed output being overwritten.
func TestNeverDeletesWhatRelayoutDidNotWrite(t *testing.T) {
	ctx := context.Background()
	x := t.TempDir()
	gen.Write(filepath.Join(x, "parquet"), gen.Options{Rows: 3_000, Files: 2, Seed: 8})
	before := treeFiles(t, x)
	for _, c := range []struct{ in, out string }{
		{filepath.Join(x, "parquet"), x},
		{x, filepath.Join(x, "out")},
		{filepath.Join(x, "parquet", "part-00000.parquet"), x},
		{filepath.Join(x, "parquet", "*.parquet"), filepath.Join(x, "parquet")},
		{"file://" + x, "file://" + x + "/parquet/out"},
	} {
		_, err := Run(ctx, RunOptions{Inputs: []string{c.in}, Output: c.out})
		if !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), "overlaps --input") {
			t.Errorf("--input %s --output %s: %v (class %v), want exit 2 (overlap)", c.in, c.out, err, errs.ClassOf(err))
		}
	}
	if after := treeFiles(t, x); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("refused runs changed the input folder: %v -> %v", before, after)
	}
	in := filepath.Join(x, "parquet")

	// Relayout-looking files with no manifest, lease or plan.
	out := filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Join(out, "parquet"), 0o755)
	user := filepath.Join(out, "parquet", "part-00000.parquet")
	os.WriteFile(user, []byte("the user's file"), 0o644)
	_, err := Run(ctx, RunOptions{Inputs: []string{in}, Output: out, Overwrite: true})
	if !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "no manifest, run lease or plan") {
		t.Fatalf("unmarked files: %v (class %v), want exit 5", err, errs.ClassOf(err))
	}
	if _, err := os.Stat(user); err != nil {
		t.Fatal("an unmarked file was deleted")
	}
	if _, err := os.Stat(filepath.Join(out, storage.LeaseFileName)); !os.IsNotExist(err) {
		t.Fatal("a refused run left its lease")
	}

	// A foreign file in a committed output that is overwritten.
	out = filepath.Join(t.TempDir(), "out")
	if _, err := Run(ctx, RunOptions{Inputs: []string{in}, Output: out}); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(out, "parquet", "notes.txt")
	os.WriteFile(notes, []byte("not relayout's"), 0o644)
	_, err = Run(ctx, RunOptions{Inputs: []string{in}, Output: out, Overwrite: true})
	if !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("foreign file: %v (class %v), want exit 5 naming it", err, errs.ClassOf(err))
	}
	if _, err := os.Stat(notes); err != nil {
		t.Fatal("a foreign file was deleted")
	}
	if res, err := verify.Output(ctx, out, false, 1); err != nil || !res.OK {
		t.Fatalf("the refused overwrite damaged the committed output: %+v %v", res, err)
	}
}

// TestCommitRetriedAfterManifestWrite: a commit that crashed after writing
// the manifest (the work prefix still there) is retried: it recognises its
// own manifest, finishes the cleanup and succeeds (before: exit 5, and
// _relayout/ left for good); a commit retried after success succeeds too
// (before: "no plan ... run relayout plan first").
func TestCommitRetriedAfterManifestWrite(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 9})
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "out")
	o := distOpts(in, out)
	res, _, err := PlanJob(ctx, o, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	local := RunOptions{Parallel: 2}
	mapsAndReduces(t, ctx, res, local)
	work := filepath.Join(out, strings.TrimSuffix(plan.WorkPrefix, "/"))
	saved := filepath.Join(t.TempDir(), "work")
	if err := exec.Command("cp", "-a", work, saved).Run(); err != nil {
		t.Fatal(err)
	}
	m1, err := CommitJob(ctx, res.Plan, local)
	if err != nil {
		t.Fatal(err)
	}
	// The crash: the manifest was written, the work prefix not yet removed.
	os.RemoveAll(work)
	if err := exec.Command("cp", "-a", saved, work).Run(); err != nil {
		t.Fatal(err)
	}
	m2, err := CommitJob(ctx, res.Plan, local)
	if err != nil {
		t.Fatalf("commit retried after its manifest write: %v (class %v)", err, errs.ClassOf(err))
	}
	if _, err := os.Stat(work); !os.IsNotExist(err) {
		t.Fatalf("the retried commit left the work prefix: %v", treeFiles(t, work))
	}
	m3, err := CommitJob(ctx, res.Plan, local)
	if err != nil {
		t.Fatalf("commit retried after success: %v (class %v)", err, errs.ClassOf(err))
	}
	if m1.Fingerprint != m2.Fingerprint || m2.Fingerprint != m3.Fingerprint {
		t.Fatal("the retried commits answer with another manifest")
	}
	for _, f := range treeFiles(t, out) {
		if strings.HasSuffix(f, ".tmp") {
			t.Fatalf("temporary file left: %s", f)
		}
	}
	if r, err := verify.Output(ctx, out, false, 1); err != nil || !r.OK {
		t.Fatalf("verify: %+v %v", r, err)
	}
}

// TestLeaseOnS3: on an S3-protocol server the lease and the manifest are
// conditional creates (If-None-Match: *): of two runs racing to one prefix
// exactly one commits; a fresh lease of another host keeps a run off
// (exit 4), an expired one is taken over.
func TestLeaseOnS3(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 10})
	params, _ := s3Server(t, "bkt")
	ctx := context.Background()
	raceTrials(t, in, func(trial int) string { return fmt.Sprintf("s3://bkt/race-%d/%s", trial, params) })
	t.Logf("%d races of two runs to one S3 prefix: exactly one committed each time", testutil.Trials(3))
	loc, err := storage.OpenDir(ctx, "s3://bkt/held/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, c := range []struct {
		renewed time.Time
		code    errs.Class
	}{{now, errs.Transient}, {now.Add(-time.Hour), 0}} {
		li := storage.LeaseInfo{Format: storage.LeaseFormat, RunID: "other", Command: "run", Host: "elsewhere", PID: 1, Started: c.renewed, Renewed: c.renewed, TTLSeconds: 60}
		data, _ := json.Marshal(li)
		if err := loc.Bucket.WriteAll(ctx, loc.Key(storage.LeaseFileName), data, nil); err != nil {
			t.Fatal(err)
		}
		_, err := Run(ctx, RunOptions{Inputs: []string{in}, Output: "s3://bkt/held/" + params, SliceKeys: []string{"country"}, Overwrite: true})
		if errs.ClassOf(err) != c.code {
			t.Fatalf("lease renewed %v: %v (class %v), want class %v", c.renewed, err, errs.ClassOf(err), c.code)
		}
	}
}

// TestVerifyCatchesManifestEdits: edits to the manifest fields readers rely
// on, each of which plain verify accepted before, now fail it; a stray file
// is a warning.
func TestVerifyCatchesManifestEdits(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 2, Seed: 11})
	out := filepath.Join(t.TempDir(), "out")
	smallRun(t, in, out, nil)
	ctx := context.Background()
	orig, _ := os.ReadFile(filepath.Join(out, manifests.FileName))
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(orig, &m)
		f(m)
		b, _ := json.MarshalIndent(m, "", " ")
		return b
	}
	obj := func(v any, path ...any) map[string]any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				v = v.(map[string]any)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v.(map[string]any)
	}
	num := func(v any) float64 { return v.(float64) }
	cases := map[string]func(m map[string]any){
		"segment offset": func(m map[string]any) { s := obj(m, "slices", 1, "segments", 0); s["offset"] = num(s["offset"]) + 4 },
		"segment length": func(m map[string]any) { s := obj(m, "slices", 1, "segments", 0); s["length"] = num(s["length"]) - 4 },
		"segment first_row": func(m map[string]any) {
			s := obj(m, "slices", 1, "segments", 0)
			s["first_row"] = num(s["first_row"]) + 1
		},
		"row-group offset": func(m map[string]any) { g := obj(m, "files", 0, "row_groups", 0); g["offset"] = num(g["offset"]) + 1 },
		"row-group length": func(m map[string]any) { g := obj(m, "files", 0, "row_groups", 1); g["length"] = num(g["length"]) + 10 },
		"slice-key name": func(m map[string]any) {
			k := obj(m, "slices", 2, "key")
			k["region"] = k["country"]
			delete(k, "country")
		},
		"totals":        func(m map[string]any) { obj(m, "totals")["bytes"] = num(obj(m, "totals")["bytes"]) + 1 },
		"schema name":   func(m map[string]any) { obj(m, "schema", 3)["name"] = "renamed" },
		"schema type":   func(m map[string]any) { obj(m, "schema", 3)["type"] = "float64" },
		"nullable":      func(m map[string]any) { c := obj(m, "schema", 3); c["nullable"] = !c["nullable"].(bool) },
		"unknown field": func(m map[string]any) { m["slice_index_v2"] = true },
	}
	for name, f := range cases {
		os.WriteFile(filepath.Join(out, manifests.FileName), edit(f), 0o644)
		res, err := verify.Output(ctx, out, false, 2)
		if err != nil || res.OK {
			t.Errorf("%s edited: verify says %+v, %v; want a problem", name, res, err)
		}
	}
	os.WriteFile(filepath.Join(out, manifests.FileName), orig, 0o644)
	os.WriteFile(filepath.Join(out, "parquet", "part-99999.parquet"), []byte("stray"), 0o644)
	res, err := verify.Output(ctx, out, false, 2)
	if err != nil || !res.OK || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "part-99999.parquet") {
		t.Fatalf("stray file: %+v, %v; want OK with one warning naming it", res, err)
	}
}

// raceRuns starts two runs with different slice keys on one output at
// once and returns their errors.
// raceTrials races two runs (raceRuns) to out(trial) for each of
// testutil.Trials(3) trials: exactly one must commit, the other fail as a
// held output or a committed one (exit 4 or 5), and the output must
// verify.
func raceTrials(t *testing.T, in string, out func(trial int) string) {
	t.Helper()
	ctx := context.Background()
	for trial := 0; trial < testutil.Trials(3); trial++ {
		errsOf := raceRuns(ctx, in, out(trial))
		if (errsOf[0] == nil) == (errsOf[1] == nil) {
			t.Fatalf("trial %d: errors %v and %v, want exactly one run to commit", trial, errsOf[0], errsOf[1])
		}
		for _, e := range errsOf {
			if c := errs.ClassOf(e); e != nil && c != errs.Transient && c != errs.Precondition {
				t.Fatalf("trial %d: the losing run failed with %v (class %v), want exit 4 or 5", trial, e, c)
			}
		}
		if res, err := verify.Output(ctx, out(trial), false, 2); err != nil || !res.OK {
			t.Fatalf("trial %d: verify: %+v %v", trial, res, err)
		}
	}
}

func raceRuns(ctx context.Context, in, out string) []error {
	var wg sync.WaitGroup
	errsOf := make([]error, 2)
	for i, keys := range [][]string{{"country", "date"}, {"date"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errsOf[i] = Run(ctx, RunOptions{Inputs: []string{in}, Output: out, SliceKeys: keys,
				RowGroupBytes: 512 << 10, MinRowGroupBytes: 64 << 10, FileBytes: 1 << 20})
		}()
	}
	wg.Wait()
	return errsOf
}

// TestOverwriteKeepsTheOldOutputUntilCommit: --overwrite of a committed
// output writes the new files under the staging prefix and swaps them in
// at the commit. A run that fails midway (injected after its first file)
// leaves the old output committed and intact, its manifest byte for byte;
// the next one replaces it with exactly what a fresh run writes, leaving
// no staging files. Local disk and S3.
func TestOverwriteKeepsTheOldOutputUntilCommit(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 21})
	params, _ := s3Server(t, "ow")
	for _, out := range []string{filepath.Join(t.TempDir(), "out"), "s3://ow/out/" + params} {
		old := RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country"}, RowGroupBytes: 256 << 10, FileBytes: 512 << 10}
		if _, err := Run(ctx, old); err != nil {
			t.Fatal(err)
		}
		loc, err := storage.OpenDir(ctx, out, false)
		if err != nil {
			t.Fatal(err)
		}
		oldManifest, err := storage.Get(ctx, loc, manifests.FileName)
		if err != nil {
			t.Fatal(err)
		}
		next := RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"}, RowGroupBytes: 128 << 10,
			FileBytes: 256 << 10, Tensors: true, ShardBytes: 256 << 10, Overwrite: true, FailAfterFiles: 1}
		if _, err := Run(ctx, next); err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("%s: the injected failure did not fail the run: %v", out, err)
		}
		if got, err := storage.Get(ctx, loc, manifests.FileName); err != nil || !bytes.Equal(got, oldManifest) {
			t.Fatalf("%s: a failed overwrite changed or removed the committed manifest (%v)", out, err)
		}
		if res, err := verify.Output(ctx, out, true, 2); err != nil || !res.OK || len(res.Warnings) > 0 {
			t.Fatalf("%s: the old output after a failed overwrite: %+v %v", out, res, err)
		}
		next.FailAfterFiles = 0
		if _, err := Run(ctx, next); err != nil {
			t.Fatal(err)
		}
		fresh := next
		fresh.Output, fresh.Overwrite = filepath.Join(t.TempDir(), "fresh"), false
		if _, err := Run(ctx, fresh); err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(fresh.Output, manifests.FileName))
		got, _ := storage.Get(ctx, loc, manifests.FileName)
		if !bytes.Equal(normaliseInputs(got), normaliseInputs(want)) {
			t.Fatalf("%s: the overwritten output's manifest differs from a fresh run's", out)
		}
		if res, err := verify.Output(ctx, out, true, 2); err != nil || !res.OK || len(res.Warnings) > 0 {
			t.Fatalf("%s: after the overwrite: %+v %v", out, res, err)
		}
		if keys, _ := storage.ListKeys(ctx, loc, plan.WorkPrefix); len(keys) > 0 {
			t.Fatalf("%s: staging files left: %v", out, keys)
		}
	}
}

// TestVerifyCatchesDescriptionEdits edits, one at a time, the fields of a
// committed manifest that describe the data without being byte ranges or
// row counts: a packed output's column lists, item counts and sizes, the
// sort and query keys, the recorded config, the inputs' rows, and the
// tensor section's description of itself. Each edit keeps the manifest
// well-formed and plausible; verify's quick check must report each one,
// and pass the manifest as written.
func TestVerifyCatchesDescriptionEdits(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 6_000, Files: 2, Seed: 23})
	type jm = map[string]any
	at := func(v any, path ...any) any {
		for _, p := range path {
			switch k := p.(type) {
			case string:
				v = v.(jm)[k]
			case int:
				v = v.([]any)[k]
			}
		}
		return v
	}
	obj := func(v any, path ...any) jm { return at(v, path...).(jm) }
	list := func(v any, path ...any) []any { return at(v, path...).([]any) }
	num := func(v any) float64 { return v.(float64) }
	for _, c := range []struct {
		name  string
		mod   func(*RunOptions)
		edits map[string]func(m jm)
		// deep are edits only the deep check can see (it counts each
		// slice's items from the rows): the quick one passes them.
		deep map[string]func(m jm)
	}{
		{"packed+tensors", func(o *RunOptions) {
			o.SliceKeys, o.QueryKey, o.Tensors, o.ShardBytes, o.BlockSamples = []string{"country"}, []string{"query_id"}, true, 64<<10, 100
		},
			map[string]func(m jm){
				"query_columns reordered": func(m jm) {
					q := list(m, "packing", "query_columns")
					q[1], q[2] = q[2], q[1]
				},
				"an item column called a query column": func(m jm) {
					p := obj(m, "packing")
					p["query_columns"] = append(list(p, "query_columns"), list(p, "item_columns")[0])
					p["item_columns"] = list(p, "item_columns")[1:]
				},
				"flat_columns naming one twice": func(m jm) { f := list(m, "packing", "flat_columns"); f[1] = f[0] },
				"query_key another query column": func(m jm) {
					obj(m, "packing")["query_key"] = []any{list(m, "packing", "query_columns")[4]}
				},
				"sort_keys emptied":          func(m jm) { m["sort_keys"] = []any{} },
				"a slice's items one more":   func(m jm) { s := obj(m, "slices", 1); s["items"] = num(s["items"]) + 1 },
				"items_per_query max below":  func(m jm) { d := obj(m, "packing", "items_per_query"); d["max"] = num(d["min"]) },
				"bytes_after one more":       func(m jm) { p := obj(m, "packing"); p["bytes_after"] = num(p["bytes_after"]) + 1 },
				"a tensor's transform":       func(m jm) { obj(m, "tensors", "schema", 2)["transform"] = "float32 as F32" },
				"a tensor's level":           func(m jm) { obj(m, "tensors", "schema", 3)["level"] = "item" },
				"tensors.sample":             func(m jm) { obj(m, "tensors")["sample"] = "row" },
				"tensors.format":             func(m jm) { obj(m, "tensors")["format"] = "npz" },
				"a shard slice entry longer": func(m jm) { e := obj(m, "tensors", "shards", 1, "slices", 0); e["rows"] = num(e["rows"]) + 1 },
				"a shard's header hash dropped": func(m jm) {
					delete(obj(m, "tensors", "shards", 2), "header_xxhash64")
				},
				"config zstd level":  func(m jm) { obj(m, "config")["zstd_level"] = 9.0 },
				"config_hash":        func(m jm) { m["config_hash"] = "0123456789abcdef" },
				"config tensors off": func(m jm) { delete(obj(m, "config"), "tensors") },
				"input rows moved": func(m jm) {
					a, b := obj(m, "inputs", 0), obj(m, "inputs", 1)
					a["rows"], b["rows"] = num(a["rows"])+1, num(b["rows"])+1
				},
				"fingerprint algorithm": func(m jm) { obj(m, "fingerprint")["algorithm"] = "relayout-rowhash-v2" },
			},
			map[string]func(m jm){
				"an item moved between slices": func(m jm) {
					a, b := obj(m, "slices", 1), obj(m, "slices", 2)
					a["items"], b["items"] = num(a["items"])+1, num(b["items"])-1
				},
			}},
		{"flat+sort keys", func(o *RunOptions) { o.SliceKeys, o.SortKeys = []string{"country"}, []string{"user_id"} },
			map[string]func(m jm){
				"sort_keys emptied":     func(m jm) { m["sort_keys"] = []any{} },
				"sort_keys another key": func(m jm) { m["sort_keys"] = []any{"session_id"} },
				"items in a flat slice": func(m jm) { obj(m, "slices", 0)["items"] = 7.0 },
				"slice_keys in config":  func(m jm) { obj(m, "config")["slice_keys"] = []any{"device"} },
			}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			smallRun(t, in, out, c.mod)
			orig, err := os.ReadFile(filepath.Join(out, manifests.FileName))
			if err != nil {
				t.Fatal(err)
			}
			write := func(f func(jm)) {
				var m jm
				if err := json.Unmarshal(orig, &m); err != nil {
					t.Fatal(err)
				}
				if f != nil {
					f(m)
				}
				b, _ := json.MarshalIndent(m, "", "  ")
				if err := os.WriteFile(filepath.Join(out, manifests.FileName), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// As written (decoded and written again by another tool, keys
			// sorted and indented otherwise), the manifest passes.
			write(nil)
			if res, err := verify.Output(ctx, out, false, 2); err != nil || !res.OK {
				t.Fatalf("the manifest as written: %+v, %v", res, err)
			}
			for name, f := range c.edits {
				write(f)
				res, err := verify.Output(ctx, out, false, 2)
				if err != nil || res.OK {
					t.Errorf("%s: verify says %+v, %v; want a problem", name, res, err)
				} else {
					t.Logf("%s: %s", name, res.Problem)
				}
			}
			for name, f := range c.deep {
				write(f)
				if res, err := verify.Output(ctx, out, false, 2); err != nil || !res.OK {
					t.Errorf("%s: the quick check says %+v, %v; it cannot see this edit", name, res, err)
				}
				res, err := verify.Output(ctx, out, true, 2)
				if err != nil || res.OK {
					t.Errorf("%s: verify --deep says %+v, %v; want a problem", name, res, err)
				} else {
					t.Logf("%s (deep): %s", name, res.Problem)
				}
			}
			write(nil)
			if res, err := verify.Output(ctx, out, true, 2); err != nil || !res.OK {
				t.Fatalf("the manifest as written, deep: %+v, %v", res, err)
			}
		})
	}
}
