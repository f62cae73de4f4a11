package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
	"github.com/relayout/relayout/writer"
)

// distOpts are small sizes so a small table makes several files
// (partitions) and several map tasks.
func distOpts(in, out string) RunOptions {
	return RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"},
		RowGroupBytes: 1 << 20, MinRowGroupBytes: 128 << 10, FileBytes: 2 << 20}
}

// runDistributed runs plan, then the map tasks and the reduce tasks on
// `workers` goroutines each (tasks handed out in order), then commit. With
// more than one worker the key pass runs as tasks too (plan --key-tasks,
// the key tasks, plan --keys), and the plan must be byte-identical to the
// one plan writes alone.
func runDistributed(t *testing.T, o RunOptions, mapBytes int64, workers int) *PlanResult {
	t.Helper()
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	var res *PlanResult
	var err error
	if workers == 1 {
		if res, _, err = PlanJob(ctx, o, mapBytes); err != nil {
			t.Fatalf("plan: %v", err)
		}
	} else {
		res = planWithKeyTasks(t, o, mapBytes, workers)
	}
	runSteps(t, workers, func(step func(n int, task func(int) error)) {
		step(res.MapTasks, func(i int) error { _, err := MapTask(ctx, res.Plan, i, local); return err })
		step(res.DetectTasks, func(j int) error { _, err := DetectTask(ctx, res.Plan, j, local); return err })
		step(res.ReduceTasks, func(j int) error { _, err := ReduceTask(ctx, res.Plan, j, local); return err })
	})
	if _, err := CommitJob(ctx, res.Plan, local); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return res
}

// runSteps hands body a step runner: it runs a step's n tasks on
// `workers` goroutines (handed out in order) and fails the test on the
// first task error.
func runSteps(t *testing.T, workers int, body func(step func(n int, task func(int) error))) {
	t.Helper()
	step := func(n int, task func(int) error) {
		next := make(chan int)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := task(i); err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("task %d: %w", i, err)
						}
						mu.Unlock()
					}
				}
			}()
		}
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		if first != nil {
			t.Fatal(first)
		}
	}
	body(step)
}

// planWithKeyTasks plans o with the key pass as tasks on `workers`
// goroutines (in reverse order, the last one twice: a retried task) and
// checks that plan.json and the encoding sample are byte-identical to what
// PlanJob writes for the same options.
func planWithKeyTasks(t *testing.T, o RunOptions, mapBytes int64, workers int) *PlanResult {
	t.Helper()
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	// The reference plan, at a sibling output (paths in plan.json are the
	// inputs', not the output's).
	path, query, _ := strings.Cut(o.Output, "?")
	refOut := strings.TrimSuffix(path, "/") + ".plan-alone"
	if query != "" {
		refOut += "?" + query
	}
	ro := o
	ro.Output = refOut
	if _, _, err := PlanJob(ctx, ro, mapBytes); err != nil {
		t.Fatalf("plan: %v", err)
	}
	kr, err := KeyPlanJob(ctx, o, mapBytes)
	if err != nil {
		t.Fatalf("plan --key-tasks: %v", err)
	}
	if kr.KeyTasks < 1 {
		t.Fatalf("%d key tasks", kr.KeyTasks)
	}
	runSteps(t, workers, func(step func(n int, task func(int) error)) {
		step(kr.KeyTasks+1, func(i int) error {
			_, err := KeysTask(ctx, kr.Keys, max(kr.KeyTasks-1-i, 0), local)
			return err
		})
	})
	res, _, err := PlanFromKeys(ctx, kr.Keys, local)
	if err != nil {
		t.Fatalf("plan --keys: %v", err)
	}
	checkKeyTaskSample(t, kr.Keys, local)
	for _, name := range []string{plan.FileName, plan.SampleFileName} {
		want, werr := os.ReadFile(filepath.Join(refOut, name))
		got, gerr := os.ReadFile(filepath.Join(o.Output, name))
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("plan --keys wrote another %s than plan (%d bytes, %v; plan's %d bytes, %v)", name, len(got), gerr, len(want), werr)
		}
	}
	os.RemoveAll(refOut)
	return res
}

// checkKeyTaskSample checks that the key task of the first non-empty row
// group stored the encoding sample and that the plan's sample is a copy of
// it (the merge read no rows for it); an input without rows has none.
func checkKeyTaskSample(t *testing.T, keysURL string, local RunOptions) {
	t.Helper()
	ctx := context.Background()
	lk, err := loadKeys(ctx, keysURL, local)
	if err != nil {
		t.Fatal(err)
	}
	st := lk.sampleTask()
	if st < 0 {
		return
	}
	data, err := storage.Get(ctx, lk.out, keysDoneName(st))
	if err != nil {
		t.Fatal(err)
	}
	d, err := openDone(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lk.Tasks {
		other, err := storage.Get(ctx, lk.out, keysDoneName(i))
		if err != nil {
			t.Fatal(err)
		}
		if od, _ := openDone(other); i != st && od.Sample != "" {
			t.Errorf("key task %d stored a sample too (the sample task is %d)", i, st)
		}
	}
	if d.Sample == "" || d.SampleRowBytes <= 0 {
		t.Fatalf("key task %d (the first with rows) stored no encoding sample: %+v", st, d)
	}
	stored, err := storage.Get(ctx, lk.out, d.Sample)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := storage.Get(ctx, lk.out, plan.SampleFileName)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, copied) || workFileHash(xxhash.Sum64(copied)) != d.SampleHash {
		t.Fatalf("the plan's sample (%d bytes) is not key task %d's (%d bytes, hash %s)", len(copied), st, len(stored), d.SampleHash)
	}
}

// TestKeyTaskSampleDamaged: a key task's stored sample changed before the
// merge is refused (exit 3, naming it) by a packed merge, which reads it
// back, and by the reduce tasks of a flat plan, which copied it; one
// missing stops either merge (exit 5) with the key task to run again.
func TestKeyTaskSampleDamaged(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 43, RowGroupRows: 4 << 10})
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	// keyTasks runs plan --key-tasks and every key task of a fresh output
	// and returns the key plan and the stored sample's path.
	keyTasks := func(packed bool) (*KeyPlanResult, string) {
		out := filepath.Join(t.TempDir(), "out")
		o := distOpts(in, out)
		if packed {
			o.SliceKeys, o.QueryKey = []string{"country"}, []string{"query_id"}
		}
		kr, err := KeyPlanJob(ctx, o, 256<<10)
		if err != nil {
			t.Fatal(err)
		}
		var sample string
		for i := 0; i < kr.KeyTasks; i++ {
			d, err := KeysTask(ctx, kr.Keys, i, local)
			if err != nil {
				t.Fatal(err)
			}
			if d.Sample != "" {
				sample = filepath.Join(out, filepath.FromSlash(d.Sample))
			}
		}
		if sample == "" {
			t.Fatal("no key task stored the encoding sample")
		}
		return kr, sample
	}
	for _, packed := range []bool{true, false} {
		kr, sample := keyTasks(packed)
		os.Remove(sample)
		if _, _, err := PlanFromKeys(ctx, kr.Keys, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "(run key task 0 again)") {
			t.Fatalf("packed=%v: merge without the stored sample: %v, want a precondition naming key task 0", packed, err)
		}
	}
	for _, packed := range []bool{true, false} {
		kr, sample := keyTasks(packed)
		data, err := os.ReadFile(sample)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		if err := os.WriteFile(sample, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, _, err := PlanFromKeys(ctx, kr.Keys, local)
		if packed {
			if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "damaged") || !strings.Contains(err.Error(), "sample.arrows") {
				t.Fatalf("packed merge of a damaged sample: %v, want a bad-input error naming it", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < res.MapTasks; i++ {
			if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ReduceTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("reduce with a damaged sample: %v, want a bad-input error", err)
		}
	}
}

// TestDistributedMatchesRun: plan, map, reduce and commit with 1, 2 and 5
// workers give output byte-identical to relayout run, manifest included,
// and leave no work prefix.
func TestDistributedMatchesRun(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 90_000, Files: 3, Seed: 31, RowGroupRows: 8 << 10})
	base := t.TempDir()
	ref := filepath.Join(base, "run")
	distOpts := func(in, out string) RunOptions {
		o := distOpts(in, out)
		o.Tensors = true // flat samples: shards cut per file as well
		return o
	}
	if _, err := Run(context.Background(), distOpts(in, ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)
	if shards := len(readManifest(t, ref).Tensors.Shards); shards < 3 {
		t.Fatalf("run wrote %d tensor shards; the test wants several", shards)
	}
	sch := reportSchema(t)
	readReport := func(dir string) *report.Report {
		data, err := os.ReadFile(filepath.Join(dir, report.FileName))
		if err != nil {
			t.Fatal(err)
		}
		return checkReportJSON(t, sch, data)
	}
	runRep := readReport(ref)
	for _, workers := range []int{1, 2, 5} {
		out := filepath.Join(base, fmt.Sprintf("dist-%d", workers))
		res := runDistributed(t, distOpts(in, out), 1<<20, workers)
		if res.MapTasks < 3 || res.ReduceTasks < 3 {
			t.Fatalf("plan: %d map and %d reduce tasks; the test wants several of each", res.MapTasks, res.ReduceTasks)
		}
		got := readTree(t, out)
		if len(got) != len(want) {
			t.Fatalf("%d workers: %d files, run wrote %d (%v)", workers, len(got), len(want), keysOf(got))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%d workers: %s differs from run's", workers, k)
			}
		}
		// Commit's report gives the run's figures.
		rep := readReport(out)
		if rep.Command != "commit" || rep.Input != runRep.Input || rep.Output != runRep.Output || rep.ConfigHash != runRep.ConfigHash ||
			!reflect.DeepEqual(rep.Slices, runRep.Slices) || !reflect.DeepEqual(rep.Warnings, runRep.Warnings) {
			t.Fatalf("%d workers: commit's report differs from run's:\n%+v\n%+v", workers, rep.Slices.Totals, runRep.Slices.Totals)
		}
		if rep.SpillBytes == 0 || len(rep.Stages) != 3 {
			t.Fatalf("%d workers: report shuffle %d bytes, stages %+v", workers, rep.SpillBytes, rep.Stages)
		}
	}
}

func keysOf(m map[string][]byte) []string { return testutil.SortedKeys(m) }

// TestDistributedOnS3Retries: on the loopback S3 server, a map task that
// died midway (objects of an attempt without its manifest), tasks run twice
// and a reduce re-run after commit's refusal still give run's bytes; commit
// refuses a plan with a missing partition, naming it; a changed input fails
// the tasks.
func TestDistributedOnS3Retries(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 32, RowGroupRows: 8 << 10})
	ref := filepath.Join(t.TempDir(), "run")
	if _, err := Run(context.Background(), distOpts(in, ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)

	params, _ := s3Server(t, "bkt")
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, "s3://bkt/impressions"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "impressions/", in)
	o := distOpts("s3://bkt/impressions/"+params, "s3://bkt/relaid/"+params)
	res, _, err := PlanJob(ctx, o, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The plan URL printed for the tasks keeps the output's query (the
	// endpoint): a task given it reaches the same store.
	plan := "s3://bkt/relaid/_relayout/plan.json" + params
	if res.Plan != plan {
		t.Fatalf("plan URL %s, want %s", res.Plan, plan)
	}
	local := RunOptions{Parallel: 2}
	// A map attempt killed midway: some objects, no manifest.
	if err := loc.Bucket.WriteAll(ctx, "relaid/_relayout/map/m-00000/a-killed/p-00000.arrow", []byte("half an arrow file"), nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < res.MapTasks; i++ {
		if _, err := MapTask(ctx, plan, i, local); err != nil {
			t.Fatal(err)
		}
	}
	d, err := MapTask(ctx, plan, 0, local) // twice: harmless
	if err != nil {
		t.Fatal(err)
	}
	// On an object store a map attempt writes one shuffle object, every
	// unit a byte range of it, and its segment index.
	objs := testutil.BucketTree(t, loc.Bucket, "relaid/_relayout/map/m-00000/a-"+d.Attempt+"/")
	if len(objs) != 3 || len(d.Partitions) < 2 || d.Partitions[0].Path != d.Partitions[1].Path || d.Partitions[1].Offset == 0 {
		t.Fatalf("map attempt wrote %v with segments %+v; want one shuffle object, its index and its task manifest", keysOf(objs), d.Partitions)
	}
	for j := 0; j < res.ReduceTasks; j++ {
		if j == 1 {
			continue // missing: commit must refuse
		}
		if _, err := ReduceTask(ctx, plan, j, local); err != nil {
			t.Fatal(err)
		}
	}
	_, err = CommitJob(ctx, plan, local)
	if !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "reduce task 1") {
		t.Fatalf("commit without partition 1: %v", err)
	}
	if exists, _ := loc.Bucket.Exists(ctx, "relaid/manifest.json"); exists {
		t.Fatal("a refused commit wrote the manifest")
	}
	for _, j := range []int{1, 0} { // the missing one, and one again
		if _, err := ReduceTask(ctx, plan, j, local); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CommitJob(ctx, plan, local); err != nil {
		t.Fatal(err)
	}
	sameObjects(t, "the steps on S3", want, testutil.BucketTree(t, loc.Bucket, "relaid/"))

	// A changed input fails a task of an old plan, naming it.
	res, _, err = PlanJob(ctx, RunOptions{Inputs: o.Inputs, Output: "s3://bkt/other/" + params, SliceKeys: o.SliceKeys, FileBytes: o.FileBytes, RowGroupBytes: o.RowGroupBytes, MinRowGroupBytes: o.MinRowGroupBytes}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	name := "impressions/" + filepath.Base(testutil.Files(t, in)[0])
	if err := loc.Bucket.WriteAll(ctx, name, []byte("PAR1 not the same file PAR1"), nil); err != nil {
		t.Fatal(err)
	}
	_, err = MapTask(ctx, "s3://bkt/other/_relayout/plan.json"+params, 0, local)
	if !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "changed since the plan") {
		t.Fatalf("map over a changed input: %v", err)
	}
}

// TestDistributedHotSlice: a slice holding half the rows spans several
// partitions (files) and still reads as one contiguous run in the final
// slice index; the output is run's.
func TestDistributedHotSlice(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 80_000, Files: 2, Seed: 33, Countries: 2, Days: 1, RowGroupRows: 8 << 10})
	for _, sortKeys := range [][]string{nil, {"user_id"}, {"event_time", "item_id"}} {
		for _, unitRows := range []int64{0, 7_000} {
			t.Run(fmt.Sprint(sortKeys, unitRows), func(t *testing.T) { testHotSlice(t, in, sortKeys, unitRows) })
		}
	}
}

// testHotSlice: a hot slice split over files, with or without sort keys
// (rows of a split slice are then routed by sort key and input position;
// user_id has many ties), and with units smaller than a file (the plan's
// units split slices inside files; run spills into units of its own).
func testHotSlice(t *testing.T, in string, sortKeys []string, unitRows int64) {
	base := t.TempDir()
	o := func(out string) RunOptions {
		x := distOpts(in, out)
		x.SliceKeys = []string{"country"}
		x.SortKeys = sortKeys
		x.UnitRows = unitRows
		x.FileBytes = 1 << 20
		return x
	}
	ref := filepath.Join(base, "run")
	if _, err := Run(context.Background(), o(ref)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(base, "dist")
	res := runDistributed(t, o(out), 512<<10, 3)
	m := readManifest(t, out)
	var hot int
	for i, s := range m.Slices {
		if s.Rows*2 >= m.Totals.Rows-m.Totals.Rows/5 && len(s.Segments) > 0 {
			hot = i
		}
	}
	s := m.Slices[hot]
	files := map[int]bool{}
	next := s.FirstRow
	for _, seg := range s.Segments {
		files[seg.File] = true
		if got := m.Files[seg.File].FirstRow + seg.FirstRow; got != next {
			t.Fatalf("hot slice %v: segment at row %d, want %d (not contiguous)", s.Key, got, next)
		}
		next += seg.Rows
	}
	if next != s.FirstRow+s.Rows || len(files) < 2 || res.ReduceTasks < 2 {
		t.Fatalf("hot slice %v (%d of %d rows) lies in %d files of %d reduce tasks; want several, contiguous", s.Key, s.Rows, m.Totals.Rows, len(files), res.ReduceTasks)
	}
	want, got := readTree(t, ref), readTree(t, out)
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("%s differs from run's", k)
		}
	}
}

// TestDistributedRefusals: what plan and the tasks refuse, with the class
// an orchestrator's retry policy keys on.
func TestDistributedRefusals(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 1, Seed: 34})
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "o")
	res, _, err := PlanJob(ctx, distOpts(in, out), 0)
	if err != nil {
		t.Fatal(err)
	}
	local := RunOptions{Parallel: 2}
	if res.DetectTasks != 0 {
		t.Fatalf("a flat plan has %d detect tasks", res.DetectTasks)
	}
	if _, err := DetectTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), "not packed") {
		t.Fatalf("detect on a flat plan: %v", err)
	}
	if _, err := MapTask(ctx, res.Plan, res.MapTasks, local); !errs.Is(err, errs.Usage) {
		t.Fatalf("map task out of range: %v", err)
	}
	if _, err := ReduceTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "map task 0") {
		t.Fatalf("reduce before the maps: %v", err)
	}
	for i := 0; i < res.MapTasks; i++ {
		if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReduceTask(ctx, res.Plan, 0, RunOptions{Parallel: 2, MemoryLimit: 48 << 20}); !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), "plan again with --memory-limit") {
		t.Fatalf("reduce over the memory limit: %v", err)
	}
	for j := 0; j < res.ReduceTasks; j++ {
		if _, err := ReduceTask(ctx, res.Plan, j, local); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := CommitJob(ctx, res.Plan, local); err != nil {
		t.Fatal(err)
	}
	if _, err := MapTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "no plan") {
		t.Fatalf("map after commit removed the plan: %v", err)
	}
	if _, _, err := PlanJob(ctx, distOpts(in, out), 0); !errs.Is(err, errs.Precondition) {
		t.Fatalf("plan over a committed output: %v", err)
	}
	if r, err := verify.Output(ctx, out, true, 2); err != nil || !r.OK {
		t.Fatalf("verify --deep of the distributed output: %+v %v", r, err)
	}
}

// TestDistributedPacked: a packed plan (--query-key) with a hot slice whose
// queries are split over several files, some files cut inside a query, run
// with 1 and 3 workers, gives run's bytes; reduce refuses to start before
// every detect task, and a column conflict fails as run fails.
func TestDistributedPacked(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 80_000, Files: 2, Seed: 35, Countries: 2, Days: 1, RowGroupRows: 8 << 10})
	for _, unitRows := range []int64{0, 6_000} {
		t.Run(fmt.Sprint(unitRows), func(t *testing.T) { testPacked(t, in, unitRows) })
	}
}

func testPacked(t *testing.T, in string, unitRows int64) {
	base := t.TempDir()
	o := func(out string) RunOptions {
		x := distOpts(in, out)
		x.SliceKeys = []string{"country"}
		x.QueryKey = []string{"query_id"}
		x.FileBytes = 1 << 20
		x.Tensors, x.ShardBytes = true, 256<<10 // several shards per file
		x.UnitRows = unitRows
		return x
	}
	ref := filepath.Join(base, "run")
	if _, err := Run(context.Background(), o(ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)
	runRep := func(dir string) *report.Report {
		data, err := os.ReadFile(filepath.Join(dir, report.FileName))
		if err != nil {
			t.Fatal(err)
		}
		return checkReportJSON(t, reportSchema(t), data)
	}
	wantRep := runRep(ref)
	for _, workers := range []int{1, 3} {
		out := filepath.Join(base, fmt.Sprintf("dist-%d", workers))
		res := runDistributed(t, o(out), 512<<10, workers)
		if res.DetectTasks != res.ReduceTasks || res.ReduceTasks < 3 {
			t.Fatalf("plan: %d detect and %d reduce tasks; want several, equal", res.DetectTasks, res.ReduceTasks)
		}
		got := readTree(t, out)
		if len(got) != len(want) {
			t.Fatalf("%d workers: %d files, run wrote %d (%v vs %v)", workers, len(got), len(want), keysOf(got), keysOf(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%d workers: %s differs from run's", workers, k)
			}
		}
		rep := runRep(out)
		if !reflect.DeepEqual(rep.Slices, wantRep.Slices) || !reflect.DeepEqual(rep.Packing, wantRep.Packing) || !reflect.DeepEqual(rep.Warnings, wantRep.Warnings) || rep.Output != wantRep.Output {
			t.Fatalf("%d workers: commit's report differs from run's", workers)
		}
	}
	// Shards end with their Parquet file: every file has its own.
	shardFiles := map[string]bool{}
	for k := range want {
		if strings.HasPrefix(k, "tensors/") {
			shardFiles[k[:len("tensors/shard-00000")]] = true
		}
	}
	if mr := readManifest(t, ref); mr.Tensors == nil || len(mr.Tensors.Shards) <= mr.Totals.Files || len(shardFiles) != mr.Totals.Files {
		t.Fatalf("want several shards per file and shards for every one of the %d files: %d shards, under %d file prefixes", mr.Totals.Files, len(mr.Tensors.Shards), len(shardFiles))
	}
	// The hot slice's queries span several files, each a whole query run.
	m := readManifest(t, ref)
	spans := 0
	for _, s := range m.Slices {
		files := map[int]bool{}
		for _, seg := range s.Segments {
			files[seg.File] = true
		}
		spans = max(spans, len(files))
	}
	if spans < 2 {
		t.Fatalf("no slice spans several packed files; the test wants a split hot slice")
	}

	// Reduce before detect; detect before map.
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	out := filepath.Join(base, "order")
	res, plan, err := PlanJob(ctx, o(out), 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0 // file cuts that fell inside a query and moved back
	for f, file := range plan.Layout.Files {
		if plan.Partitions[f].Start < file.Start {
			moved++
		}
	}
	if moved == 0 || len(plan.Cuts) == 0 {
		t.Fatalf("no file cut fell inside a query (%d split slices); the test wants some", len(plan.Cuts))
	}
	units := 0
	for _, pp := range plan.Partitions {
		units += pp.Units
	}
	if unitRows > 0 && units <= len(plan.Partitions) {
		t.Fatalf("unit rows %d: %d units for %d partitions; want several per partition", unitRows, units, len(plan.Partitions))
	}
	t.Logf("%d partitions, %d units, %d starts moved back to a query boundary", len(plan.Partitions), units, moved)
	if _, err := DetectTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "map task 0") {
		t.Fatalf("detect before the maps: %v", err)
	}
	for i := 0; i < res.MapTasks; i++ {
		if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReduceTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "detect task 0") {
		t.Fatalf("reduce before detect: %v", err)
	}

	// A declared query column that varies within a query fails the
	// reduce as it fails run: bad input, the same message.
	bad := func(out string) RunOptions {
		x := o(out)
		x.QueryColumns = []string{"item_id"}
		return x
	}
	_, runErr := Run(ctx, bad(filepath.Join(base, "bad-run")))
	if !errs.Is(runErr, errs.BadInput) {
		t.Fatalf("run with a varying declared query column: %v", runErr)
	}
	res, _, err = PlanJob(ctx, bad(filepath.Join(base, "bad-dist")), 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	mapsAndDetects(t, ctx, res, local)
	_, err = ReduceTask(ctx, res.Plan, res.ReduceTasks-1, local)
	if !errs.Is(err, errs.BadInput) || err.Error() != runErr.Error() {
		t.Fatalf("reduce with a varying declared query column:\n%v\nrun said:\n%v", err, runErr)
	}
}

// TestDistributedQueryCoversFiles: a query larger than several files makes
// the files its range covers empty: run writes none of them and numbers the
// rest down; the distributed steps give the same bytes, with empty reduce
// tasks.
func TestDistributedQueryCoversFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "q.parquet")
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "country", Type: arrow.BinaryTypes.String},
		{Name: "query_id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "item", Type: arrow.PrimitiveTypes.Int64},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	// One country; queries 1..40 of 200 items, query 41 of 60,000 items
	// (several files), then queries 42..80 of 200 items; rows shuffled
	// by query so input order differs from output order.
	sizes := map[int64]int{41: 60_000}
	for q := int64(1); q <= 80; q++ {
		if sizes[q] == 0 {
			sizes[q] = 200
		}
	}
	for i := 0; i < 60_000; i++ {
		for q := int64(80); q >= 1; q-- {
			if i < sizes[q] {
				b.Field(0).(*array.StringBuilder).Append("DE")
				b.Field(1).(*array.Int64Builder).Append(q)
				b.Field(2).(*array.Int64Builder).Append(int64(i))
				b.Field(3).(*array.Float64Builder).Append(float64(i%89) / 7)
			}
		}
	}
	testutil.WriteArrow(t, p, b.NewRecordBatch(), parquet.WithMaxRowGroupLength(8<<10))

	base := t.TempDir()
	o := func(out string) RunOptions {
		return RunOptions{Inputs: []string{p}, Output: out, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
			RowGroupBytes: 128 << 10, MinRowGroupBytes: 32 << 10, FileBytes: 256 << 10, Tensors: true, ShardBytes: 64 << 10}
	}
	ref := filepath.Join(base, "run")
	if _, err := Run(context.Background(), o(ref)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(base, "dist")
	runDistributed(t, o(out), 256<<10, 2)
	_, pl, err := PlanJob(context.Background(), o(filepath.Join(base, "plan")), 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	m := readManifest(t, ref)
	if m.Totals.Files >= len(pl.Partitions) || m.Totals.Rows != 80 {
		t.Fatalf("%d files for %d partitions (%d queries); want the huge query to leave some partitions empty", m.Totals.Files, len(pl.Partitions), m.Totals.Rows)
	}
	want, got := readTree(t, ref), readTree(t, out)
	if len(got) != len(want) {
		t.Fatalf("%d files, run wrote %d (%v vs %v)", len(got), len(want), keysOf(got), keysOf(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("%s differs from run's", k)
		}
	}
	if r, err := verify.Output(context.Background(), out, true, 2); err != nil || !r.OK {
		t.Fatalf("verify --deep: %+v %v", r, err)
	}
}

// TestDistributedOverwriteStages: plan --overwrite of a committed output
// keeps it whole, verifying, until commit: the tasks write under the work
// prefix's next/, and commit swaps the new files in. A commit that crashed
// in the middle of the swap (old files gone, half the new ones moved) is
// retried and finishes with the output a fresh run writes.
func TestDistributedOverwriteStages(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 2, Seed: 141})
	base := t.TempDir()
	out := filepath.Join(base, "out")
	o := distOpts(in, out)
	runDistributed(t, o, 1<<20, 2)
	oldTree := readTree(t, out)

	// The reference: a fresh run with the new config.
	o2 := distOpts(in, filepath.Join(base, "ref"))
	o2.SliceKeys = []string{"date", "country"}
	if _, err := Run(context.Background(), o2); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, o2.Output)

	for _, crash := range []bool{false, true} {
		o2.Output, o2.Overwrite = out, true
		ctx := context.Background()
		local := RunOptions{Parallel: 2}
		var res *PlanResult
		var p *plan.Plan
		var err error
		if crash {
			res, p, err = PlanJob(ctx, o2, 1<<20)
		} else { // the key pass as tasks stages the same way
			kr, kerr := KeyPlanJob(ctx, o2, 1<<20)
			if kerr != nil {
				t.Fatal(kerr)
			}
			for i := 0; i < kr.KeyTasks; i++ {
				if _, err := KeysTask(ctx, kr.Keys, i, local); err != nil {
					t.Fatal(err)
				}
			}
			res, p, err = PlanFromKeys(ctx, kr.Keys, local)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !p.Staged {
			t.Fatalf("crash=%v: the plan over a committed output does not stage", crash)
		}
		mapsAndReduces(t, ctx, res, local)
		// Before the commit, the old output is committed and intact.
		if v, err := verify.Output(ctx, out, true, 2); err != nil || !v.OK {
			t.Fatalf("crash=%v: the old output does not verify before the commit: %+v %v", crash, v, err)
		}
		cur := readTree(t, out)
		for k, v := range oldTree {
			if k != "_report.json" && string(cur[k]) != string(v) {
				t.Fatalf("crash=%v: %s changed before the commit", crash, k)
			}
		}
		if crash {
			// What a commit killed mid-swap leaves: old manifest and files
			// gone, the marker written, one staged file moved.
			lp, err := loadPlan(ctx, res.Plan, local)
			if err != nil {
				t.Fatal(err)
			}
			os.Remove(filepath.Join(out, "manifest.json"))
			os.WriteFile(filepath.Join(out, filepath.FromSlash(swapMarker)), []byte("{}\n"), 0o644)
			os.RemoveAll(filepath.Join(out, "parquet"))
			first := writer.FileName(0)
			os.MkdirAll(filepath.Join(out, "parquet"), 0o755)
			if err := os.Rename(filepath.Join(lp.out.Local, filepath.FromSlash(first)), filepath.Join(out, filepath.FromSlash(first))); err != nil {
				t.Fatal(err)
			}
		}
		var damaged string // a staged file changed behind its recorded ETag
		var undamaged []byte
		var mtime time.Time
		if !crash {
			lp, err := loadPlan(ctx, res.Plan, local)
			if err != nil {
				t.Fatal(err)
			}
			rel := filepath.FromSlash(writer.FileName(0))
			staged := filepath.Join(lp.out.Local, rel)
			st, err := os.Stat(staged)
			if err != nil {
				t.Fatal(err)
			}
			mtime, damaged = st.ModTime(), filepath.Join(out, rel)
			// Damaged after its check (a new ETag): read again and
			// refused before the swap, the old output left committed
			// and whole.
			undamaged = flipByte(t, staged, mtime.Add(2*time.Second))
			if _, err := CommitJob(ctx, res.Plan, local); err == nil || !strings.Contains(err.Error(), "xxhash64") {
				t.Fatalf("commit over a staged file damaged after its check: %v, want it refused", err)
			}
			if v, err := verify.Output(ctx, out, true, 2); err != nil || !v.OK {
				t.Fatalf("the old output does not verify after a refused commit: %+v %v", v, err)
			}
			cur := readTree(t, out)
			for k, v := range oldTree {
				if k != "_report.json" && string(cur[k]) != string(v) {
					t.Fatalf("%s changed in a refused commit", k)
				}
			}
			// Damaged behind the ETag its reduce recorded.
			if err := os.Chtimes(staged, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := CommitJob(ctx, res.Plan, local); err != nil {
			t.Fatalf("crash=%v: commit: %v", crash, err)
		}
		if damaged != "" {
			// The move kept the file's ETag, so commit confirmed what the
			// reduce had read instead of reading it again: the damage is
			// for a full verify to find.
			if v, err := verify.Output(ctx, out, false, 2); err != nil || v.OK {
				t.Fatalf("a staged file damaged behind its ETag: verify after commit says %+v %v, want the damage found", v, err)
			}
			rewrite(t, damaged, undamaged, mtime)
		}
		got := readTree(t, out)
		for k, v := range want {
			g := got[k]
			if k == "manifest.json" {
				v, g = normaliseInputs(v), normaliseInputs(g)
			}
			if string(g) != string(v) {
				t.Fatalf("crash=%v: %s differs from a fresh run's", crash, k)
			}
		}
		if _, err := os.Stat(filepath.Join(out, "_relayout")); err == nil {
			t.Fatalf("crash=%v: the work prefix is left", crash)
		}
		oldTree = got
	}
}

// rewrite writes data to path and sets its modification time (with it, a
// local file's ETag).
func rewrite(t *testing.T, path string, data []byte, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// flipByte changes a byte in the middle of path, keeping its size, sets
// its modification time, and returns the bytes it had.
func flipByte(t *testing.T, path string, mtime time.Time) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 0x01
	rewrite(t, path, bad, mtime)
	return data
}

// reducedJob plans a flat job over 3,000 generated rows (seed) and runs its
// map and reduce tasks: what commit takes. It returns the output folder,
// the plan and the local options the tasks ran with.
func reducedJob(t *testing.T, seed uint64) (string, *PlanResult, RunOptions) {
	t.Helper()
	in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 2, Seed: seed})
	out := filepath.Join(t.TempDir(), "out")
	ctx := context.Background()
	res, _, err := PlanJob(ctx, distOpts(in, out), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	local := RunOptions{Parallel: 2}
	mapsAndReduces(t, ctx, res, local)
	return out, res, local
}

// mapsAndReduces runs every map task of a planned job, then every detect
// task (packed plans), then every reduce task, one after another in this
// process.
func mapsAndReduces(t *testing.T, ctx context.Context, res *PlanResult, local RunOptions) {
	t.Helper()
	mapsAndDetects(t, ctx, res, local)
	for j := 0; j < res.ReduceTasks; j++ {
		if _, err := ReduceTask(ctx, res.Plan, j, local); err != nil {
			t.Fatal(err)
		}
	}
}

// mapsAndDetects runs every map task, then every detect task.
func mapsAndDetects(t *testing.T, ctx context.Context, res *PlanResult, local RunOptions) {
	t.Helper()
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
}

// TestCommitRefusesAPlanThatDoesNotMatchItsMaps: a plan.json whose row
// count disagrees with what its map tasks read (edited, damaged, or the
// inputs changed under it) is bad input naming plan.json (exit 3), not an
// internal error; nothing is committed. Found by FuzzPlanAndTaskManifests.
func TestCommitRefusesAPlanThatDoesNotMatchItsMaps(t *testing.T) {
	ctx := context.Background()
	out, res, local := reducedJob(t, 4)
	path := filepath.Join(out, filepath.FromSlash(plan.FileName))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// As the fuzzer left it: no rows, no partitions; and, so that
	// plan.Check finds an empty plan whole, no slices and no files.
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	p["rows"], p["partitions"], p["slices"] = 0, []any{}, []any{}
	p["layout"].(map[string]any)["Files"] = []any{}
	delete(p, "reduce_task_starts") // a task per partition: none
	edited, _ := json.Marshal(p)
	if err := os.WriteFile(path, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = CommitJob(ctx, res.Plan, local)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "plan.json plans 0 rows, its map tasks read 3000") {
		t.Fatalf("commit of an edited plan: %v (class %v), want bad input naming plan.json", err, errs.ClassOf(err))
	}
	if _, err := os.Stat(filepath.Join(out, manifests.FileName)); !os.IsNotExist(err) {
		t.Fatalf("a manifest was committed: %v", err)
	}
}

// TestTaskManifestChecksum: a task manifest changed in storage (here one
// digit of a map task's fingerprint, as the fuzzer changed it in CI, which
// commit then took for lost rows: exit 1) is refused as damaged, bad input
// naming it with the task to run again (exit 3); nothing is committed.
// Sealed again, the same change is what the row check exists for: exit 1,
// "row check failed", nothing committed.
func TestTaskManifestChecksum(t *testing.T) {
	ctx := context.Background()
	out, res, local := reducedJob(t, 5)
	path := filepath.Join(out, filepath.FromSlash(mapDoneName(0)))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := openDone(data)
	if err != nil {
		t.Fatalf("a manifest as written: %v", err)
	}
	fp := []byte(`"fingerprint": "` + d.Hash + `"`)
	i := bytes.Index(data, fp)
	if i < 0 {
		t.Fatalf("no %s in %s", fp, data)
	}
	damaged := bytes.Clone(data)
	k := i + len(`"fingerprint": "`) + 8
	damaged[k] = "01"[(damaged[k]-'0'+1)%2] // another hex digit, either way
	if err := os.WriteFile(path, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = CommitJob(ctx, res.Plan, local)
	if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), mapDoneName(0)) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("commit over a damaged map manifest: %v (class %v), want bad input naming it", err, errs.ClassOf(err))
	}
	if err := os.WriteFile(path, sealed(damaged), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = CommitJob(ctx, res.Plan, local)
	if !errs.Is(err, errs.Internal) || !strings.Contains(err.Error(), "row check failed") {
		t.Fatalf("commit over a resealed map manifest whose fingerprint differs: %v (class %v)", err, errs.ClassOf(err))
	}
	if _, err := os.Stat(filepath.Join(out, manifests.FileName)); !os.IsNotExist(err) {
		t.Fatalf("a manifest was committed: %v", err)
	}
	// A manifest without its checksum (another writer, or cut short) is
	// refused the same way.
	if err := os.WriteFile(path, data[len(checksumField)+16:], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReduceTask(ctx, res.Plan, 0, local); !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("reduce over a map manifest without its checksum: %v (class %v)", err, errs.ClassOf(err))
	}
}

// TestTasksShareSampleAndEncodings: the tasks of one plan in one process
// (a --task list) decode its sample and choose its encodings once; another
// plan's sample is its own.
func TestTasksShareSampleAndEncodings(t *testing.T) {
	ctx := context.Background()
	local := RunOptions{Parallel: 2}
	load := func(seed uint64) (*loadedPlan, *loadedPlan) {
		in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 1, Seed: seed})
		res, _, err := PlanJob(ctx, distOpts(in, filepath.Join(t.TempDir(), "out")), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		a, err := loadTask(ctx, res.Plan, local, "reduce", 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := loadTask(ctx, res.Plan, local, "reduce", 0)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	schema, err := func() (*arrow.Schema, error) {
		a, _ := load(61)
		return a.schema(ctx)
	}()
	if err != nil {
		t.Fatal(err)
	}
	encOf := func(lp *loadedPlan) (arrow.RecordBatch, *writer.Encodings) {
		s, err := lp.sample(ctx, schema)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		e, err := lp.encodings(s, schema)
		if err != nil {
			t.Fatal(err)
		}
		return s, e
	}
	a, b := load(61)
	sa, ea := encOf(a)
	sb, eb := encOf(b)
	if sa != sb || ea != eb {
		t.Fatalf("two tasks of one plan: samples %p %p, encodings %p %p; want one of each", sa, sb, ea, eb)
	}
	c, _ := load(62)
	sc, ec := encOf(c)
	if sc == sa || ec == ea || c.sampleKey == a.sampleKey {
		t.Fatalf("another input's plan shares the first plan's sample or encodings")
	}
}
