package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
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
		t.Skip("-short: the sweep runs every step on some thousand edited plans")
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
			for i := 0; i < res.MapTasks; i++ {
				if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
					t.Fatal(err)
				}
			}
			for j := 0; j < res.DetectTasks; j++ {
				if _, err := DetectTask(ctx, res.Plan, j, local); err != nil {
					t.Fatal(err)
				}
			}
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
				data, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(name)))
				if err != nil {
					t.Fatal(err)
				}
				var doc any
				if err := json.Unmarshal(data, &doc); err != nil {
					t.Fatal(err)
				}
				fe := testutil.JSONEdits(doc, name)
				if len(fe) < 20 {
					t.Fatalf("only %d edits of %s: the sweep lost its reach", len(fe), name)
				}
				fe = append(fe, testutil.JSONEdit{What: name + " as written", Data: data, Baseline: true})
				for i := range fe {
					fe[i].File = name
					if name != plan.FileName {
						fe[i].Data = sealed(fe[i].Data) // past the checksum, to the checks behind it
					}
				}
				edits = append(edits, fe...)
			}
			// Two at a time: each runs on its own copy.
			var wg sync.WaitGroup
			var mu sync.Mutex
			var failed []string
			work := make(chan testutil.JSONEdit)
			for w := 0; w < 2; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for e := range work {
						if msg := runEdited(ctx, t, out, planRel, e, res.DetectTasks, res.ReduceTasks, local); msg != "" {
							mu.Lock()
							failed = append(failed, msg)
							mu.Unlock()
						}
					}
				}()
			}
			for _, e := range edits {
				work <- e
			}
			close(work)
			wg.Wait()
			sort.Strings(failed)
			for i, f := range failed {
				if i == 20 {
					t.Errorf("… and %d more", len(failed)-20)
					break
				}
				t.Error(f)
			}
			t.Logf("%d edits of %v, each through the steps after", len(edits), files)
		})
	}
}

// runEdited runs the steps on a copy of the mapped output with e's file
// edited; it returns what went wrong ("" when every step succeeded or
// failed classified). Map task 0 runs only on an edited plan: it would
// write a manifest of its own over an edited one.
func runEdited(ctx context.Context, t *testing.T, out, planRel string, e testutil.JSONEdit, detectTasks, reduceTasks int, local RunOptions) (msg string) {
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
	planURL := filepath.Join(dir, planRel)
	if os.Getenv("RELAYOUT_SWEEP_TRACE") != "" {
		fmt.Fprintln(os.Stderr, "edit:", e.File, e.What)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second) // generous: a busy machine must not fail it
	defer cancel()
	step := "map"
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("%s: %s panicked: %v", e.What, step, r)
		}
	}()
	check := func(err error) string {
		if err == nil || (!e.Baseline && !unclassified(err)) {
			return ""
		}
		return fmt.Sprintf("%s: %s: %v", e.What, step, err)
	}
	// Each step after the one that writes the edited file (the plan: all).
	if e.File == plan.FileName {
		// A new attempt, with its own manifest, beside the one it replaces.
		if _, err := MapTask(tctx, planURL, 0, local); check(err) != "" {
			return check(err)
		}
	}
	step = "detect"
	for j := 0; j < detectTasks && !strings.Contains(e.File, "/detect/"); j++ {
		if _, err := DetectTask(tctx, planURL, j, local); check(err) != "" {
			return check(err)
		}
	}
	step = "reduce"
	for j := 0; j < reduceTasks; j++ {
		if _, err := ReduceTask(tctx, planURL, j, local); check(err) != "" {
			return check(err)
		}
	}
	step = "commit"
	_, err = CommitJob(tctx, planURL, local)
	return check(err)
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
		t.Skip("-short: the sweep runs the key pass on some hundreds of edited files")
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
			var edits []testutil.JSONEdit
			for _, name := range []string{KeysFileName, keysDoneName(0)} {
				data, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(name)))
				if err != nil {
					t.Fatal(err)
				}
				var doc any
				if err := json.Unmarshal(data, &doc); err != nil {
					t.Fatal(err)
				}
				fe := testutil.JSONEdits(doc, name)
				if len(fe) < 20 {
					t.Fatalf("only %d edits of %s: the sweep lost its reach", len(fe), name)
				}
				fe = append(fe, testutil.JSONEdit{What: name + " as written", Data: data, Baseline: true})
				for i := range fe {
					fe[i].File = name
					if name != KeysFileName {
						fe[i].Data = sealed(fe[i].Data)
					}
				}
				edits = append(edits, fe...)
			}
			var failed []string
			for _, e := range edits {
				if msg := runEditedKeys(ctx, t, out, keysRel, e, kr.KeyTasks, local); msg != "" {
					failed = append(failed, msg)
				}
			}
			for i, f := range failed {
				if i == 20 {
					t.Errorf("… and %d more", len(failed)-20)
					break
				}
				t.Error(f)
			}
			t.Logf("%d edits of keys.json and key task 0's manifest", len(edits))
		})
	}
}

// runEditedKeys runs the key tasks (an edited key plan) and plan --keys on
// a copy of the output with e's file edited; "" when each succeeded or
// failed classified.
func runEditedKeys(ctx context.Context, t *testing.T, out, keysRel string, e testutil.JSONEdit, keyTasks int, local RunOptions) (msg string) {
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
	keysURL := filepath.Join(dir, keysRel)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second) // generous: a busy machine must not fail it
	defer cancel()
	step := "keys"
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("%s: %s panicked: %v", e.What, step, r)
		}
	}()
	check := func(err error) string {
		if err == nil || (!e.Baseline && !unclassified(err)) {
			return ""
		}
		return fmt.Sprintf("%s: %s: %v", e.What, step, err)
	}
	if e.File == KeysFileName {
		for i := 0; i < keyTasks; i++ {
			if _, err := KeysTask(tctx, keysURL, i, local); check(err) != "" {
				return check(err)
			}
		}
	}
	step = "plan --keys"
	_, _, err = PlanFromKeys(tctx, keysURL, local)
	return check(err)
}
