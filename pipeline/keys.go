package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/gcerrors"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
)

// The key pass as tasks (docs/distributed.md): `plan --key-tasks` pins the
// inputs and the config and writes keys.json, one key task per map run;
// each `keys --task i` reads its run's key columns and writes a summary;
// `plan --keys` merges the summaries (reading only footers and the
// summaries; the key task of the first non-empty row group stores the
// encoding sample) into the plan.json that `plan` alone would have
// written, byte for byte.

// KeysFileName is the key plan, under the work prefix.
const KeysFileName = plan.WorkPrefix + "keys.json"

// keysFormat names the key plan's format.
const keysFormat = "relayout-keys"

// KeyPlanResult is what `plan --key-tasks` prints.
type KeyPlanResult struct {
	Keys     string `json:"keys"`
	KeyTasks int    `json:"key_tasks"`
}

// keyPlan is keys.json: what the key tasks and the merge need, fixed once.
type keyPlan struct {
	plan.Header
	Rows int64 `json:"rows"`
	// MemoryLimit, MapBytes, MaxItemsPerQuery and the Fit flags are the
	// plan's resources and sizes, as `plan --key-tasks` was given them.
	MemoryLimit      int64 `json:"memory_limit"`
	MapBytes         int64 `json:"map_bytes"`
	MaxItemsPerQuery int64 `json:"max_items_per_query,omitempty"`
	FitRowGroups     bool  `json:"fit_row_groups,omitempty"`
	FitMinRowGroups  bool  `json:"fit_min_row_groups,omitempty"`
	FitFileBytes     bool  `json:"fit_file_bytes,omitempty"`
	UnitRows         int64 `json:"unit_rows,omitempty"`
	ForceFolders     bool  `json:"force_folders,omitempty"`
	Staged           bool  `json:"staged,omitempty"`
	// InputRowGroups is each input file's row-group count: a key task
	// opens only the files of its run and numbers their row groups as the
	// whole table does.
	InputRowGroups []int `json:"input_row_groups"`
	// Tasks are the key tasks: runs [first, end) of the input's row groups
	// (the map tasks' runs).
	Tasks []keyTask `json:"tasks"`
}

type keyTask struct {
	Index int   `json:"index"`
	First int   `json:"first"`
	End   int   `json:"end"`
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

func keysDoneName(i int) string { return fmt.Sprintf("%skeys/k-%05d/_done.json", plan.WorkPrefix, i) }

// KeyPlanJob is `relayout plan --key-tasks`: it claims the output, pins
// the inputs and the config, splits the input into key tasks (one per map
// run) and writes keys.json.
func KeyPlanJob(ctx context.Context, opts RunOptions, mapBytes int64) (*KeyPlanResult, error) {
	pj, err := startPlan(ctx, opts, mapBytes)
	if err != nil {
		return nil, err
	}
	defer pj.claim.release(ctx)
	defer pj.tbl.Close()
	r := pj.opts.resources()
	kp := &keyPlan{Header: plan.NewHeader(keysFormat, pj.opts.layout(pj.tr), pj.tbl, pj.opts.Inputs), Rows: pj.tbl.Rows,
		MemoryLimit: r.MemoryLimit, MapBytes: pj.mapBytes, MaxItemsPerQuery: pj.opts.MaxItemsPerQuery,
		FitRowGroups: r.FitRowGroups, FitMinRowGroups: r.FitMinRowGroups, FitFileBytes: r.FitFileBytes, UnitRows: r.UnitRows,
		ForceFolders: pj.opts.ForceFolders, Staged: pj.staged}
	for _, f := range pj.tbl.Files {
		kp.InputRowGroups = append(kp.InputRowGroups, len(f.RowGroupRows))
	}
	schemaHash, err := putSchema(ctx, pj.out, pj.tbl.Schema)
	if err != nil {
		return nil, err
	}
	kp.WorkFiles = map[string]string{workFileKey(plan.SchemaFileName): schemaHash}
	refs := pj.tbl.RowGroups()
	for i, run := range plan.MapRuns(pj.tbl, pj.mapBytes) {
		t := keyTask{Index: i, First: run[0], End: run[1]}
		for _, ref := range refs[run[0]:run[1]] {
			t.Rows += ref.Rows()
			t.Bytes += plan.RowGroupBytes(ref)
		}
		kp.Tasks = append(kp.Tasks, t)
	}
	data, err := json.MarshalIndent(kp, "", " ")
	if err != nil {
		return nil, err
	}
	if err := pj.claim.put(ctx, KeysFileName, append(data, '\n'), false); err != nil {
		return nil, err
	}
	return &KeyPlanResult{Keys: pj.out.Address(KeysFileName), KeyTasks: len(kp.Tasks)}, nil
}

// loadedKeys is a key plan with the options it records.
type loadedKeys struct {
	*keyPlan
	out  storage.Location
	opts RunOptions
	tr   *tensorRun
}

func loadKeys(ctx context.Context, keysURL string, local RunOptions) (*loadedKeys, error) {
	outURL, err := workFileLocation(keysURL, KeysFileName, "--keys")
	if err != nil {
		return nil, err
	}
	out, err := storage.OpenDir(ctx, outURL, false)
	if err != nil {
		return nil, err
	}
	data, err := storage.Get(ctx, out, KeysFileName)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, errs.Preconditionf("run relayout plan --key-tasks first", "no key plan at %s (plan --key-tasks has not run there, or commit has finished)", out.URL(KeysFileName))
		}
		return nil, err
	}
	var kp keyPlan
	if err := json.Unmarshal(data, &kp); err != nil || kp.Format != keysFormat {
		return nil, errs.BadInputf("%s is not a relayout key plan: %v", out.URL(KeysFileName), err)
	}
	cfg, err := checkHeader(kp.Header, "key plan", out.URL(KeysFileName))
	if err != nil {
		return nil, err
	}
	opts, tr, err := optionsOf(outURL, kp.InputArgs, cfg, kp.MaxItemsPerQuery, local)
	if err != nil {
		return nil, err
	}
	if _, h := configOf(opts, tr); h != kp.ConfigHash {
		return nil, errs.BadInputf("%s: the config does not hash to %s", out.URL(KeysFileName), kp.ConfigHash)
	}
	opts.MemoryLimit, opts.UnitRows, opts.ForceFolders = kp.MemoryLimit, kp.UnitRows, kp.ForceFolders
	opts.autoRowGroupBytes, opts.autoMinRowGroupBytes, opts.autoFileBytes = kp.FitRowGroups, kp.FitMinRowGroups, kp.FitFileBytes
	return &loadedKeys{keyPlan: &kp, out: out, opts: opts, tr: tr}, nil
}

// KeysTask is `relayout keys --task i`: it reads the key columns of key
// task i's row groups and writes their summary (zstd-compressed JSON), then
// its task manifest.
func KeysTask(ctx context.Context, keysURL string, task int, local RunOptions) (*TaskManifest, error) {
	t0 := time.Now()
	lk, err := loadKeys(ctx, keysURL, local)
	if err != nil {
		return nil, err
	}
	if task < 0 || task >= len(lk.Tasks) {
		return nil, errs.Usagef("--task %d: the key plan has key tasks 0 to %d", task, len(lk.Tasks)-1)
	}
	kt := lk.Tasks[task]
	tbl, base, err := lk.openRun(ctx, kt)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	keys, err := resolveKeys(tbl, lk.opts)
	if err != nil {
		return nil, err
	}
	defer lk.opts.adviseHeap(keyPassHeld(tbl, plan.SizesOf(tbl).RowBytes, lk.opts.Parallel))()
	sum, err := plan.KeyTask(ctx, tbl, keys, lk.opts.SliceKeys, kt.First-base, kt.End-base, lk.opts.Parallel)
	if err != nil {
		return nil, err
	}
	// Row groups numbered as in the whole table.
	sum.First, sum.End = kt.First, kt.End
	for i := range sum.Queries {
		sum.Queries[i].RowGroup += int32(base)
	}
	data, err := json.Marshal(sum)
	if err != nil {
		return nil, err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		return nil, err
	}
	data = enc.EncodeAll(data, nil)
	enc.Close()
	attempt := newAttempt()
	name := fmt.Sprintf("%skeys/k-%05d/a-%s/keys.json.zst", plan.WorkPrefix, task, attempt)
	if err := putObject(ctx, lk.out, name, data); err != nil {
		return nil, err
	}
	d := &TaskManifest{Kind: "keys", Task: task, Attempt: attempt, ConfigHash: lk.ConfigHash, Rows: sum.Rows, Summary: name, SummaryBytes: int64(len(data))}
	if task == lk.sampleTask() {
		// The encoding sample, read here, in parallel with the other key
		// tasks, so that the merge reads no rows (reading it was about half
		// the merge's CPU on the scale-out bench, whose merge runs alone).
		fs, err := plan.ReadFitSample(ctx, tbl)
		if err != nil {
			return nil, err
		}
		if fs != nil {
			d.Sample = fmt.Sprintf("%skeys/k-%05d/a-%s/sample.arrows", plan.WorkPrefix, task, attempt)
			d.SampleRowBytes, d.SampleDecodeScale = fs.RowBytes, fs.DecodeScale
			d.SampleHash, err = putSample(ctx, lk.out, d.Sample, fs.Sample)
			fs.Sample.Release()
			if err != nil {
				return nil, err
			}
		}
	}
	d.Seconds = time.Since(t0).Seconds()
	return d, writeDone(ctx, lk.out, fmt.Sprintf("%skeys/k-%05d/a-%s/_task.json", plan.WorkPrefix, task, attempt), keysDoneName(task), d)
}

// openRun opens only the input files that hold key task kt's row groups
// (checking their pins), placed and typed as in the whole table, and
// returns the whole table's index of the opened table's first row group.
func (lk *loadedKeys) openRun(ctx context.Context, kt keyTask) (*source.Table, int, error) {
	if len(lk.InputRowGroups) != len(lk.Inputs) {
		return nil, 0, errs.BadInputf("%s: %d row-group counts for %d inputs", lk.out.URL(KeysFileName), len(lk.InputRowGroups), len(lk.Inputs))
	}
	// Files a..b-1 hold row groups [first, end); base is file a's first.
	a, b, base, rg := -1, 0, 0, 0
	for i, n := range lk.InputRowGroups {
		if a < 0 && rg+n > kt.First {
			a, base = i, rg
		}
		if rg < kt.End {
			b = i + 1
		}
		rg += n
	}
	if kt.End <= kt.First || a < 0 { // an empty run (an empty input)
		tbl, err := openPinned(ctx, lk.InputArgs, lk.Inputs, lk.opts.hive, nil, lk.opts.MemoryLimit)
		return tbl, 0, err
	}
	own := make([]int, b-a)
	for k := range own {
		own[k] = a + k
	}
	tbl, err := openOwn(ctx, lk.out, lk.Header, lk.out.URL(KeysFileName), lk.opts.hive, own, lk.InputRowGroups, lk.opts.MemoryLimit)
	return tbl, base, err
}

// sampleTask is the key task whose run holds the input's first non-empty
// row group, which reads the encoding sample; -1 for an input without
// rows.
func (lk *loadedKeys) sampleTask() int {
	for i, t := range lk.Tasks {
		if t.Rows > 0 {
			return i
		}
	}
	return -1
}

// fitSample is the encoding sample the sample task stored, as
// plan.AnalyzeSummaries takes it, and where it is; nil, nil where the
// merge must read it itself (an input without rows). Its rows are read
// back (and checked against their hash) only for a packed plan, whose
// detection probe needs them; the plan copies the object.
func (lk *loadedKeys) fitSample(ctx context.Context, dones []*TaskManifest, keys plan.Keys) (*plan.FitSample, *storedSample, error) {
	st := lk.sampleTask()
	if st < 0 || dones[st].Sample == "" {
		return nil, nil, nil
	}
	d := dones[st]
	fs := &plan.FitSample{RowBytes: d.SampleRowBytes, DecodeScale: d.SampleDecodeScale}
	hint := fmt.Sprintf("run key task %d again", st)
	stored := &storedSample{name: d.Sample, hash: d.SampleHash, hint: hint}
	if len(keys.Query) == 0 {
		return fs, stored, nil
	}
	url := lk.out.URL(d.Sample)
	data, err := storage.Get(ctx, lk.out, d.Sample)
	if storage.IsNotFound(err) {
		return nil, nil, errs.Preconditionf(hint, "the encoding sample %s is missing", url)
	}
	if err != nil {
		return nil, nil, err
	}
	if _, err := checkWorkFile(data, url, d.SampleHash, lk.out.URL(keysDoneName(st)), hint); err != nil {
		return nil, nil, err
	}
	if fs.Sample, err = decodeSample(data, url, nil); err != nil {
		return nil, nil, errs.WithHint(err, hint)
	}
	return fs, stored, nil
}

// summaries reads every key task's summary and manifest, in task order; a
// task that has not completed fails the merge (exit 5), naming it.
func (lk *loadedKeys) summaries(ctx context.Context) ([]*partition.KeySummary, []*TaskManifest, error) {
	sums := make([]*partition.KeySummary, len(lk.Tasks))
	dones := make([]*TaskManifest, len(lk.Tasks))
	dec, err := zstd.NewReader(nil)
	if err != nil {
		return nil, nil, err
	}
	defer dec.Close()
	err = par.ForEach(ctx, len(lk.Tasks), 16, func(i int) error {
		done := keysDoneName(i)
		data, err := storage.Get(ctx, lk.out, done)
		if err != nil {
			if gcerrors.Code(err) == gcerrors.NotFound {
				return errs.Preconditionf("run the missing key task, then plan --keys again", "key task %d (of %d) has not completed (no %s)", i, len(lk.Tasks), lk.out.URL(done))
			}
			return err
		}
		d, err := openDone(data)
		if err != nil || d.Kind != "keys" || d.Summary == "" {
			return errs.BadInputf("%s is not a key task's manifest (%v): run key task %d again", lk.out.URL(done), err, i)
		}
		if d.ConfigHash != lk.ConfigHash {
			return errs.Preconditionf("re-run the task under the current key plan", "%s belongs to another plan (config %s, the key plan's %s)", lk.out.URL(done), d.ConfigHash, lk.ConfigHash)
		}
		raw, err := storage.Get(ctx, lk.out, d.Summary)
		if err != nil {
			if gcerrors.Code(err) == gcerrors.NotFound {
				return errs.Preconditionf("run the key task again", "key task %d's summary %s is missing", i, lk.out.URL(d.Summary))
			}
			return err
		}
		plain, err := dec.DecodeAll(raw, nil) // safe for concurrent use

		if err != nil {
			return errs.WithHint(errs.BadInputf("%s: %v", lk.out.URL(d.Summary), err), fmt.Sprintf("run key task %d again", i))
		}
		jd := json.NewDecoder(bytes.NewReader(plain))
		jd.UseNumber() // slice values print back exactly as the key pass read them
		var s partition.KeySummary
		if err := jd.Decode(&s); err != nil {
			return errs.WithHint(errs.BadInputf("%s: %v", lk.out.URL(d.Summary), err), fmt.Sprintf("run key task %d again", i))
		}
		kt := lk.Tasks[i]
		if s.First != kt.First || s.End != kt.End {
			return errs.WithHint(errs.BadInputf("%s covers row groups [%d, %d); key task %d is [%d, %d)", lk.out.URL(d.Summary), s.First, s.End, i, kt.First, kt.End), fmt.Sprintf("run key task %d again", i))
		}
		sums[i], dones[i] = &s, d
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return sums, dones, nil
}

// PlanFromKeys is `relayout plan --keys`: it merges the key tasks'
// summaries into the plan (plan.json), exactly as `plan` would write it
// from the same inputs and options, reading no key columns itself.
func PlanFromKeys(ctx context.Context, keysURL string, local RunOptions) (*PlanResult, *plan.Plan, error) {
	lk, err := loadKeys(ctx, keysURL, local)
	if err != nil {
		return nil, nil, err
	}
	opts := lk.opts
	lease, _, err := storage.AcquireLease(ctx, lk.out, "plan", leaseTTL)
	if err != nil {
		return nil, nil, err
	}
	// A failed merge leaves the key tasks' summaries for the next try.
	claim := &outputClaim{out: lk.out, target: lk.out, lease: lease}
	defer claim.release(ctx)
	tbl, err := openPinned(ctx, lk.InputArgs, lk.Inputs, opts.hive, nil, opts.MemoryLimit)
	if err != nil {
		return nil, nil, err
	}
	defer tbl.Close()
	keys, err := resolveKeys(tbl, opts)
	if err != nil {
		return nil, nil, err
	}
	sums, dones, err := lk.summaries(ctx)
	if err != nil {
		return nil, nil, err
	}
	fs, stored, err := lk.fitSample(ctx, dones, keys)
	if err != nil {
		return nil, nil, err
	}
	ks, err := plan.AnalyzeSummaries(ctx, tbl, keys, sums, fs, opts.layout(lk.tr), opts.resources())
	if err != nil {
		return nil, nil, err
	}
	pj := &planJob{opts: opts, tr: lk.tr, mapBytes: lk.MapBytes, out: lk.out, claim: claim, staged: lk.Staged, tbl: tbl, keys: keys, in: ks.Sizes, stored: stored}
	return pj.finish(ctx, ks)
}
