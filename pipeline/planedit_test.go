package pipeline

import (
	"context"
	"fmt"
	"os"
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
	"github.com/relayout/relayout/verify"
)

// TestPlanEditSweep edits plan.json, then map task 0's manifest and, packed,
// detect task 0's (each sealed again), one field at a time, every field each has (array members: the first and the last), the ways an edit by
// hand or a damaged copy would: a number made negative, zero, one more,
// huge; a string emptied; an array emptied, cut at either end or given a
// member twice; a member deleted; a value made null. Each edited plan then
// runs map task 0, every detect task, every reduce task and commit (an edited
// manifest: the steps after the one that writes it), on a fresh
// copy of a mapped output: each step must succeed or fail classified
// (never a panic, never an unclassified internal error). The fuzz targets
// change bytes at random and found such edits only now and then (CI found
// a packed plan's query counts cut short); this tries each of them, for a
// flat plan with tensors and for a packed one.
func TestPlanEditSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: about 1,500 edited files, each through every step (60-100 s on 2 cores); make test runs it")
	}
	ctx := context.Background()
	for _, packed := range []bool{false, true} {
		name := "flat+tensors"
		if packed {
			name = "packed"
		}
		t.Run(name, func(t *testing.T) {
			in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 2, Seed: 52})
			out := filepath.Join(t.TempDir(), "out")
			o := distOpts(in, out)
			o.RowGroupBytes, o.MinRowGroupBytes, o.FileBytes = 32<<10, 8<<10, 64<<10 // several tasks
			if packed {
				o.SliceKeys, o.QueryKey = []string{"country"}, []string{"query_id"}
			} else {
				o.Tensors, o.ShardBytes = true, 64<<10
			}
			res, _, err := PlanJob(ctx, o, 64<<10)
			if err != nil {
				t.Fatal(err)
			}
			local := RunOptions{Parallel: 1}
			mapsAndDetects(t, ctx, res, local)
			files := []string{plan.FileName, mapDoneName(0)}
			if packed {
				files = append(files, detectDoneName(0))
			}
			planRel, err := filepath.Rel(out, filepath.FromSlash(res.Plan))
			if err != nil {
				t.Fatal(err)
			}
			var edits []testutil.JSONEdit
			for _, name := range files {
				var seal func([]byte) []byte
				if name != plan.FileName {
					seal = sealed // past the checksum, to the checks behind it
				}
				edits = append(edits, testutil.FileEdits(t, out, name, seal)...)
			}
			// Two at a time: each runs on its own copy.
			testutil.SweepEdits(t, edits, 2, func(e testutil.JSONEdit) string {
				return runEdited(ctx, t, out, planRel, e, res.DetectTasks, res.ReduceTasks, local)
			})
			t.Logf("%d edits of %v, each through the steps after", len(edits), files)
		})
	}
}

// runEdited runs the steps on a copy of the mapped output with e's file
// edited; it returns what went wrong ("" when every step succeeded or
// failed classified). Map task 0 runs only on an edited plan: it would
// write a manifest of its own over an edited one.
func runEdited(ctx context.Context, t *testing.T, out, planRel string, e testutil.JSONEdit, detectTasks, reduceTasks int, local RunOptions) string {
	return onEditedCopy(ctx, t, out, e, func(tctx context.Context, dir string, s *sweepSteps) {
		planURL := filepath.Join(dir, planRel)
		// Each step after the one that writes the edited file (the plan: all).
		if e.File == plan.FileName {
			// A new attempt, with its own manifest, beside the one it replaces.
			if !s.ok("map", func() error { _, err := MapTask(tctx, planURL, 0, local); return err }) {
				return
			}
		}
		for j := 0; j < detectTasks && !strings.Contains(e.File, "/detect/"); j++ {
			if !s.ok("detect", func() error { _, err := DetectTask(tctx, planURL, j, local); return err }) {
				return
			}
		}
		for j := 0; j < reduceTasks; j++ {
			if !s.ok("reduce", func() error { _, err := ReduceTask(tctx, planURL, j, local); return err }) {
				return
			}
		}
		s.ok("commit", func() error { _, err := CommitJob(tctx, planURL, local); return err })
	})
}

// sweepSteps runs an edit's steps, keeping the first that went wrong.
type sweepSteps struct {
	e   testutil.JSONEdit
	msg string
}

// ok runs step; it reports whether the sweep goes on: the step succeeded
// (an edit may fail it, classified: then the steps after are not run).
func (s *sweepSteps) ok(name string, step func() error) (goOn bool) {
	defer func() {
		if r := recover(); r != nil {
			s.msg, goOn = fmt.Sprintf("%s: %s panicked: %v", s.e.What, name, r), false
		}
	}()
	err := step()
	if err != nil && (s.e.Baseline || unclassified(err)) {
		s.msg = fmt.Sprintf("%s: %s: %v", s.e.What, name, err)
	}
	return err == nil
}

// onEditedCopy runs steps on a copy of out with e's file written over,
// under a deadline; it returns what went wrong ("" when each step
// succeeded or failed classified).
func onEditedCopy(ctx context.Context, t *testing.T, out string, e testutil.JSONEdit, steps func(tctx context.Context, dir string, s *sweepSteps)) string {
	dir, err := os.MkdirTemp(t.TempDir(), "edit")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	if err := copyTree(out, dir); err != nil {
		return err.Error()
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(e.File)), e.Data, 0o644); err != nil {
		return err.Error()
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second) // generous: a busy machine must not fail it
	defer cancel()
	s := &sweepSteps{e: e}
	steps(tctx, dir, s)
	return s.msg
}

// unclassified reports a panic's error or an internal error that is not
// a refused check: what a damaged plan or manifest must never give.
func unclassified(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "panic") || (errs.ClassOf(err) == errs.Internal && !strings.Contains(msg, "internal:") && !strings.Contains(msg, "check failed"))
}

// TestKeyPlanEditSweep is TestPlanEditSweep for the key pass as tasks
// (plan --key-tasks, keys --task, plan --keys): every field of keys.json
// and of key task 0's manifest (sealed again), edited one at a time; the
// key tasks (an edited key plan) and plan --keys must then succeed or fail
// classified, flat and packed.
func TestKeyPlanEditSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: about 500 edited files through the key pass and plan --keys; make test runs it")
	}
	ctx := context.Background()
	local := RunOptions{Parallel: 1}
	for _, packed := range []bool{false, true} {
		name := "flat"
		if packed {
			name = "packed"
		}
		t.Run(name, func(t *testing.T) {
			in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 2, Seed: 53})
			out := filepath.Join(t.TempDir(), "out")
			o := distOpts(in, out)
			o.RowGroupBytes, o.MinRowGroupBytes, o.FileBytes = 32<<10, 8<<10, 64<<10
			if packed {
				o.SliceKeys, o.QueryKey = []string{"country"}, []string{"query_id"}
			}
			kr, err := KeyPlanJob(ctx, o, 16<<10)
			if err != nil {
				t.Fatal(err)
			}
			if kr.KeyTasks < 2 {
				t.Fatalf("%d key tasks: the sweep wants several", kr.KeyTasks)
			}
			for i := 0; i < kr.KeyTasks; i++ {
				if _, err := KeysTask(ctx, kr.Keys, i, local); err != nil {
					t.Fatal(err)
				}
			}
			keysRel, err := filepath.Rel(out, filepath.FromSlash(kr.Keys))
			if err != nil {
				t.Fatal(err)
			}
			edits := append(testutil.FileEdits(t, out, KeysFileName, nil), testutil.FileEdits(t, out, keysDoneName(0), sealed)...)
			testutil.SweepEdits(t, edits, 1, func(e testutil.JSONEdit) string {
				return runEditedKeys(ctx, t, out, keysRel, e, kr.KeyTasks, local)
			})
			t.Logf("%d edits of keys.json and key task 0's manifest", len(edits))
		})
	}
}

// runEditedKeys runs the key tasks (an edited key plan) and plan --keys on
// a copy of the output with e's file edited; "" when each succeeded or
// failed classified.
func runEditedKeys(ctx context.Context, t *testing.T, out, keysRel string, e testutil.JSONEdit, keyTasks int, local RunOptions) string {
	return onEditedCopy(ctx, t, out, e, func(tctx context.Context, dir string, s *sweepSteps) {
		keysURL := filepath.Join(dir, keysRel)
		for i := 0; i < keyTasks && e.File == KeysFileName; i++ {
			if !s.ok("keys", func() error { _, err := KeysTask(tctx, keysURL, i, local); return err }) {
				return
			}
		}
		s.ok("plan --keys", func() error { _, _, err := PlanFromKeys(tctx, keysURL, local); return err })
	})
}

// TestVerifyManifestEditSweep edits every field of a committed output's
// manifest.json (flat with tensors, packed with tensors) one at a time and
// runs relayout verify's check over it (quick; deep too for the content
// fingerprint and the manifest as written): it must report a
// problem or pass, never panic or fail unclassified; the manifest as
// written must pass. The edits it passes are logged: the ones that do not
// describe data (the report's figures, the config echo).
func TestVerifyManifestEditSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: verifies about 1,650 edited outputs (about 30 s on 2 cores); make test runs it")
	}
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 2, Seed: 55})
	for _, packed := range []bool{false, true} {
		name := "flat+tensors"
		o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "out"), SliceKeys: []string{"country"}, Tensors: true,
			ShardBytes: 32 << 10, BlockSamples: 100, FileBytes: 64 << 10, RowGroupBytes: 32 << 10, MinRowGroupBytes: 8 << 10, Parallel: 1}
		if packed {
			name, o.QueryKey = "packed+tensors", []string{"query_id"}
		}
		t.Run(name, func(t *testing.T) {
			if _, err := Run(ctx, o); err != nil {
				t.Fatal(err)
			}
			edits := testutil.FileEdits(t, o.Output, manifests.FileName, nil)
			var mu sync.Mutex
			var passed []string
			testutil.SweepEdits(t, edits, 1, func(e testutil.JSONEdit) string {
				dir := filepath.Join(t.TempDir(), "edit")
				defer os.RemoveAll(dir)
				if err := testutil.LinkTree(o.Output, dir); err != nil {
					return err.Error()
				}
				if err := os.Remove(filepath.Join(dir, manifests.FileName)); err != nil {
					return err.Error()
				}
				if err := os.WriteFile(filepath.Join(dir, manifests.FileName), e.Data, 0o644); err != nil {
					return err.Error()
				}
				ok, msg := verifyEdited(ctx, dir, e)
				if ok && msg == "" && !e.Baseline {
					mu.Lock()
					passed = append(passed, e.What)
					mu.Unlock()
				}
				return msg
			})
			t.Logf("%d edits of %s; verify passed %d of them: %s", len(edits), manifests.FileName, len(passed), strings.Join(passed, "; "))
		})
	}
}

// verifyEdited runs verify.Output over dir, quick then (fingerprint edits
// and the baseline) deep: ok when each passed; msg says what went wrong (a panic, an unclassified error, or the
// baseline refused).
func verifyEdited(ctx context.Context, dir string, e testutil.JSONEdit) (ok bool, msg string) {
	deep := false
	defer func() {
		if r := recover(); r != nil {
			ok, msg = false, fmt.Sprintf("%s: verify (deep %v) panicked: %v", e.What, deep, r)
		}
	}()
	ok = true
	for _, deep = range []bool{false, true} {
		// Deep (every value decoded) only where it adds a check: the
		// content fingerprint; the rest is the quick check's.
		if deep && !e.Baseline && !strings.Contains(e.What, ".fingerprint") {
			continue
		}
		res, err := verify.Output(ctx, dir, deep, 1)
		switch {
		case err != nil && (e.Baseline || unclassified(err)):
			return false, fmt.Sprintf("%s: verify (deep %v): %v", e.What, deep, err)
		case err != nil:
			ok = false
		case e.Baseline && !res.OK:
			return false, fmt.Sprintf("%s: verify (deep %v): %s", e.What, deep, res.Problem)
		default:
			ok = ok && res.OK
		}
	}
	return ok, ""
}
