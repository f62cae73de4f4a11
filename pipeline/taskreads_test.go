package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/storage"
)

// TestReduceReadsItsOwnSegmentRecords: a map task's stored manifest lists
// no segments (they grew with the units, and every reduce task read every
// map task's); its index has a record per unit, and a reduce task reads
// only its own units' records. A record damaged in one map task's index
// fails only the reduce task of that unit's partition (bad input naming
// the index and the unit); every other reduce task completes. Small
// partitions (a Hive folder each) share reduce tasks, each partition with
// its own manifest; commit names the task of a partition without one. The
// map task run again, the output equals run's, byte for byte.
func TestReduceReadsItsOwnSegmentRecords(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 12_000, Files: 3, Countries: 4, Days: 5, Seed: 83, RowGroupRows: 1 << 10})
	base := t.TempDir()
	opts := func(out string) RunOptions {
		o := distOpts(in, out)
		o.OutputPartitioning, o.ForceFolders = "hive", true
		return o
	}
	out, res := runThenPlan(t, base, opts)
	if res.MapTasks < 2 || res.ReduceTasks < 2 {
		t.Fatalf("%d map and %d reduce tasks; the test wants several of each", res.MapTasks, res.ReduceTasks)
	}
	local := RunOptions{Parallel: 2}
	for i := 0; i < res.MapTasks; i++ {
		if _, err := MapTask(ctx, res.Plan, i, local); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := loadPlan(ctx, res.Plan, local)
	if err != nil {
		t.Fatal(err)
	}
	units, _ := lp.Units()
	// Small partitions (a Hive folder each) share reduce tasks of about a
	// map task's rows.
	if len(lp.Partitions) < 2*res.ReduceTasks {
		t.Fatalf("%d reduce tasks for %d partitions of about %d rows, %d map tasks of %d: want them grouped", res.ReduceTasks, len(lp.Partitions), lp.Rows/int64(len(lp.Partitions)), res.MapTasks, lp.Rows/int64(res.MapTasks))
	}
	var d0 *TaskManifest
	for i := 0; i < res.MapTasks; i++ {
		data, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(mapDoneName(i))))
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		d, err := openDone(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := raw["partitions"]; ok || d.Index == nil || d.Index.Units != len(units) || d.Index.Segments == 0 || d.Index.Rows != d.Rows {
			t.Fatalf("map %d's stored manifest: segments listed %v, index %+v (the plan has %d units, the map read %d rows)", i, ok, d.Index, len(units), d.Rows)
		}
		if i == 0 {
			d0 = d
		}
	}
	// Damage the record of the last partition's first unit that map 0
	// wrote a segment for.
	k := len(lp.Partitions) - 1
	lo, hi := lp.PartitionUnits(k)
	segs, err := lp.segmentsOf(ctx, []*TaskManifest{d0}, lo, hi)
	if err != nil || len(segs) == 0 {
		t.Fatalf("map 0's segments of partition %d: %v, %v", k, segs, err)
	}
	u := segs[0].Unit
	idx := filepath.Join(out, filepath.FromSlash(mapAttemptPrefix(0, d0.Attempt)+segmentIndexName))
	data, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != len(units)*partition.IndexRecord {
		t.Fatalf("index of %d bytes for %d units", len(data), len(units))
	}
	data[u*partition.IndexRecord+16]++ // its rows
	if err := os.WriteFile(idx, data, 0o644); err != nil {
		t.Fatal(err)
	}
	kt := lp.PartitionTask(k)
	for j := 0; j < res.ReduceTasks; j++ {
		d, err := ReduceTask(ctx, res.Plan, j, local)
		if j != kt {
			if err != nil {
				t.Fatalf("reduce %d, whose records are whole: %v", j, err)
			}
			// Its partitions' files, each partition with its manifest.
			first, end := lp.TaskPartitions(j)
			for p := first; p < end; p++ {
				if _, err := os.Stat(filepath.Join(out, filepath.FromSlash(reduceDoneName(p)))); err != nil {
					t.Fatalf("reduce task %d wrote no manifest for its partition %d: %v", j, p, err)
				}
			}
			if len(d.Files) != end-first {
				t.Fatalf("reduce task %d of partitions [%d, %d) returned %d files", j, first, end, len(d.Files))
			}
			continue
		}
		if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), segmentIndexName) || !strings.Contains(err.Error(), "unit "+strconv.Itoa(u)) || !strings.Contains(err.Error(), "run map task 0 again") {
			t.Fatalf("reduce %d over a damaged record of unit %d: %v (class %v), want bad input naming the index, the unit and the map task", j, u, err, errs.ClassOf(err))
		}
	}
	// Commit names the task of the partition without a manifest.
	if _, err := CommitJob(ctx, res.Plan, local); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "reduce task "+strconv.Itoa(kt)+" (partition ") {
		t.Fatalf("commit with reduce task %d failed: %v, want exit 5 naming it", kt, err)
	}
	if _, err := MapTask(ctx, res.Plan, 0, local); err != nil {
		t.Fatal(err)
	}
	if _, err := ReduceTask(ctx, res.Plan, kt, local); err != nil {
		t.Fatal(err)
	}
	if _, err := CommitJob(ctx, res.Plan, local); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "distributed", readTree(t, out), readTree(t, filepath.Join(base, "run")))
}

// TestReducesShareMergedDetection: the first reduce task of a packed plan
// merges every detect task's result and stores the merge; the others read
// it alone (they complete with every detect manifest gone). A damaged
// merge is not trusted: the next reduce merges the detect manifests again
// (and, with one missing, fails naming it, exit 5), then replaces it. The
// output equals run's, byte for byte.
func TestReducesShareMergedDetection(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 6_000, Files: 2, Seed: 84})
	base := t.TempDir()
	opts := func(out string) RunOptions {
		o := distOpts(in, out)
		o.RowGroupBytes, o.MinRowGroupBytes, o.FileBytes = 32<<10, 8<<10, 64<<10
		o.SliceKeys, o.QueryKey = []string{"country"}, []string{"query_id"}
		return o
	}
	out, res := runThenPlan(t, base, opts)
	if res.ReduceTasks < 3 {
		t.Fatalf("%d reduce tasks; the test wants 3 or more", res.ReduceTasks)
	}
	local := RunOptions{Parallel: 2}
	mapsAndDetects(t, ctx, res, local)
	merged := filepath.Join(out, filepath.FromSlash(detectMergedName))
	if _, err := os.Stat(merged); !os.IsNotExist(err) {
		t.Fatalf("a merged detection before any reduce: %v", err)
	}
	reduce := func(j int) error { _, err := ReduceTask(ctx, res.Plan, j, local); return err }
	if err := reduce(0); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(merged)
	if err != nil {
		t.Fatalf("reduce 0 stored no merged detection: %v", err)
	}
	detects := filepath.Join(out, filepath.FromSlash(path.Dir(path.Dir(detectDoneName(0)))))
	hidden := filepath.Join(base, "detect-manifests")
	if err := os.Rename(detects, hidden); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(detects, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(merged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := reduce(1); err != nil {
		t.Fatalf("reduce 1 with the merge and no detect manifest: %v", err)
	}
	data[len(data)/2] ^= 1
	if err := os.WriteFile(merged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := reduce(2); !errs.Is(err, errs.Precondition) || !strings.Contains(err.Error(), "detect task 0 (partition 0) has not completed") {
		t.Fatalf("reduce 2 over a damaged merge and no detect manifest: %v (class %v), want exit 5 naming detect task 0", err, errs.ClassOf(err))
	}
	if err := os.RemoveAll(detects); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(hidden, detects); err != nil {
		t.Fatal(err)
	}
	for j := 2; j < res.ReduceTasks; j++ {
		if err := reduce(j); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := os.ReadFile(merged); err != nil || bytes.Equal(again, data) {
		t.Fatalf("the damaged merge was not replaced (%v)", err)
	}
	if _, err := CommitJob(ctx, res.Plan, local); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "distributed", readTree(t, out), readTree(t, filepath.Join(base, "run")))
}

// runThenPlan runs the job of opts into base/run, then plans it
// (64 KiB map tasks) into base/dist, whose path it returns.
func runThenPlan(t *testing.T, base string, opts func(out string) RunOptions) (string, *PlanResult) {
	t.Helper()
	ctx := context.Background()
	if _, err := Run(ctx, opts(filepath.Join(base, "run"))); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(base, "dist")
	res, _, err := PlanJob(ctx, opts(out), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	return out, res
}

// TestGroupedTasksReadRecordsOnce: a detect or reduce task of several
// small partitions (Hive folders) reads its segment records, and a detect
// task its digest records and digests, once for all its partitions: a
// ranged GET per map task, counted on the S3 server's side, not one per
// partition and map task. The output equals run's.
func TestGroupedTasksReadRecordsOnce(t *testing.T) {
	ctx := context.Background()
	in := testutil.Generate(t, gen.Options{Rows: 12_000, Files: 3, Countries: 4, Days: 15, Seed: 85, RowGroupRows: 1 << 10})
	opts := func(in, out string) RunOptions {
		o := distOpts(in, out)
		o.OutputPartitioning, o.ForceFolders = "hive", true
		o.QueryKey = []string{"query_id"}
		return o
	}
	ref := filepath.Join(t.TempDir(), "run")
	if _, err := Run(ctx, opts(in, ref)); err != nil {
		t.Fatal(err)
	}
	params, _, counts := s3ServerCounting(t, "bkt")
	loc, err := storage.OpenDir(ctx, "s3://bkt/in"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "in/", in)
	res, _, err := PlanJob(ctx, opts("s3://bkt/in/"+params, "s3://bkt/out/"+params), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := loadPlan(ctx, res.Plan, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parts, maps := int64(len(lp.Partitions)), int64(res.MapTasks)
	if res.MapTasks < 2 || parts < 3*int64(res.ReduceTasks) || res.DetectTasks != res.ReduceTasks {
		t.Fatalf("%d map, %d detect and %d reduce tasks for %d partitions; the test wants several map tasks and partitions grouped", res.MapTasks, res.DetectTasks, res.ReduceTasks, parts)
	}
	local := RunOptions{Parallel: 2}
	mapsAndDetects(t, ctx, res, local)
	tasks := int64(res.DetectTasks)
	t.Logf("%d partitions, %d map tasks, %d detect and reduce tasks; detect GETs: %s %d, %s %d, %s %d", parts, maps, tasks,
		segmentIndexName, counts.getsOf(segmentIndexName), digestIndexName, counts.getsOf(digestIndexName), digestFileName, counts.getsOf(digestFileName))
	for name, most := range map[string]int64{segmentIndexName: tasks * maps, digestIndexName: tasks * maps, digestFileName: tasks * maps} {
		if got := counts.getsOf(name); got > most || got == 0 {
			t.Errorf("the detect tasks read %s %d times; want at most %d (a GET per task and map task), not per partition (%d)", name, got, most, parts*maps)
		}
	}
	// Damaged records and digests are refused as when read per partition:
	// a record of a partition inside a task of several, then its digests.
	var k, p int
	for k = 0; k < res.DetectTasks; k++ {
		if first, end := lp.TaskPartitions(k); end-first > 2 {
			p = first + 1
			break
		}
	}
	data, err := loc.Bucket.ReadAll(ctx, "out/"+mapDoneName(0))
	if err != nil {
		t.Fatal(err)
	}
	d0, err := openDone(data)
	if err != nil {
		t.Fatal(err)
	}
	damage := func(name string, off int64) (restore func()) {
		key := "out/" + mapAttemptPrefix(0, d0.Attempt) + name
		orig, err := loc.Bucket.ReadAll(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Clone(orig)
		bad[off] ^= 0x40
		if err := loc.Bucket.WriteAll(ctx, key, bad, nil); err != nil {
			t.Fatal(err)
		}
		return func() {
			if err := loc.Bucket.WriteAll(ctx, key, orig, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	restore := damage(digestIndexName, int64(p)*partition.IndexRecord+3)
	if _, err := DetectTask(ctx, res.Plan, k, local); !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), digestIndexName) || !strings.Contains(err.Error(), "unit "+strconv.Itoa(p)+":") {
		t.Errorf("detect task %d over a damaged record of partition %d: %v (class %v), want exit 3 naming the index and the partition", k, p, err, errs.ClassOf(err))
	}
	restore()
	idx, err := loc.Bucket.ReadAll(ctx, "out/"+mapAttemptPrefix(0, d0.Attempt)+digestIndexName)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := partition.DecodeIndex(idx[p*partition.IndexRecord:(p+1)*partition.IndexRecord], p, partition.IndexSeed(digestIndexKind, 0))
	if err != nil || len(ents) != 1 {
		t.Fatalf("map 0's digest record of partition %d: %v, %v", p, ents, err)
	}
	restore = damage(digestFileName, ents[0].Offset+1)
	if _, err := DetectTask(ctx, res.Plan, k, local); !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "query digests of partition "+strconv.Itoa(p)+" are damaged") {
		t.Errorf("detect task %d over damaged digests of partition %d: %v (class %v), want exit 3 naming the partition", k, p, err, errs.ClassOf(err))
	}
	restore()
	if _, err := DetectTask(ctx, res.Plan, k, local); err != nil {
		t.Fatal(err)
	}
	// A damaged segment inside a block of adjacent ones (a partition in
	// the middle of reduce task k) fails its task with exit 3 naming the
	// shuffle, as when each segment was read alone.
	u, _ := lp.PartitionUnits(p)
	sidx, err := loc.Bucket.ReadAll(ctx, "out/"+mapAttemptPrefix(0, d0.Attempt)+segmentIndexName)
	if err != nil {
		t.Fatal(err)
	}
	sents, err := partition.DecodeIndex(sidx[u*partition.IndexRecord:(u+1)*partition.IndexRecord], u, partition.IndexSeed(segmentIndexKind, 0))
	if err != nil || len(sents) != 1 || sents[0].Length == 0 {
		t.Fatalf("map 0's segment record of unit %d: %v, %v", u, sents, err)
	}
	restore = damage("shuffle.arrows", sents[0].Offset+sents[0].Length/2)
	if _, err := ReduceTask(ctx, res.Plan, k, local); !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "shuffle is damaged") || !strings.Contains(err.Error(), "shuffle.arrows at "+strconv.FormatInt(sents[0].Offset, 10)) {
		t.Errorf("reduce task %d over a damaged segment of partition %d: %v (class %v), want exit 3 naming the shuffle and the segment's offset", k, p, err, errs.ClassOf(err))
	}
	restore()
	before, shuffleGets, fileGets := counts.getsOf(segmentIndexName), counts.getsOf("shuffle.arrows"), counts.getsEnding(".parquet")
	for j := 0; j < res.ReduceTasks; j++ {
		if _, err := ReduceTask(ctx, res.Plan, j, local); err != nil {
			t.Fatal(err)
		}
	}
	if got, most := counts.getsOf(segmentIndexName)-before, int64(res.ReduceTasks)*maps; got > most || got == 0 {
		t.Errorf("the reduce tasks read %s %d times; want at most %d (a GET per task and map task), not per partition (%d)", segmentIndexName, got, most, parts*maps)
	}
	// Their segments, adjacent in each map task's object, are read by
	// blocks (partition.SegmentBlocks): a GET per task and map task here,
	// where each task's segments fit a block.
	if got, most := counts.getsOf("shuffle.arrows")-shuffleGets, int64(res.ReduceTasks)*maps; got > most || got == 0 {
		t.Errorf("the reduce tasks read the shuffle objects %d times; want at most %d (a GET per task and map task), not per partition (%d)", got, most, parts*maps)
	}
	// Each small file written is read back once, whole, for its check
	// (verify reads a small object whole, then from memory).
	var files int64
	for j := range lp.Partitions {
		files += int64(len(lp.Partitions[j].Files))
	}
	if got := counts.getsEnding(".parquet") - fileGets; got != files {
		t.Errorf("the reduce tasks' checks read their %d files with %d GETs; want one each", files, got)
	}
	fileGets = counts.getsEnding(".parquet")
	if _, err := CommitJob(ctx, res.Plan, local); err != nil {
		t.Fatal(err)
	}
	// Commit confirms the checked files (a HEAD each) and opens each once
	// for the report's cost model; it reads the inputs' footers too.
	inputs := int64(len(testutil.Files(t, in)))
	if got := counts.getsEnding(".parquet") - fileGets; got != files+inputs {
		t.Errorf("commit read the %d files and %d inputs with %d GETs; want one each", files, inputs, got)
	}
	sameObjects(t, "grouped tasks on S3", readTree(t, ref), testutil.BucketTree(t, loc.Bucket, "out/"))
}
