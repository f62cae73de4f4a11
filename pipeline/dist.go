package pipeline

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/cespare/xxhash/v2"
	"gocloud.dev/gcerrors"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
	"github.com/relayout/relayout/verify"
	"github.com/relayout/relayout/writer"
)

// PlanResult is what plan reports for XCom or Argo output parameters.
type PlanResult struct {
	Plan     string `json:"plan"`
	MapTasks int    `json:"map_tasks"`
	// DetectTasks is the detect step's task count: one per partition for
	// packed plans, 0 otherwise.
	DetectTasks int `json:"detect_tasks"`
	ReduceTasks int `json:"reduce_tasks"`
}

// TaskManifest is a task's manifest, written last: what it read or wrote.
type TaskManifest struct {
	// Checksum is the xxhash64 of the manifest as written with this field
	// empty (sealDone): a manifest damaged in storage is refused as such
	// rather than taken for lost rows or a bug.
	Checksum   string `json:"checksum"`
	Kind       string `json:"kind"` // keys, map, detect or reduce
	Task       int    `json:"task"`
	Attempt    string `json:"attempt"`
	ConfigHash string `json:"config_hash"`
	Rows       int64  `json:"rows"`
	Hash       string `json:"fingerprint,omitempty"` // map and reduce
	// Partitions is a map task's unit segments, in memory (run reads
	// them there); its stored manifest has its Index instead.
	Partitions []partition.Segment `json:"partitions,omitempty"`
	Index      *SegmentIndex       `json:"segment_index,omitempty"` // map
	Files      []manifests.File    `json:"files,omitempty"`         // reduce
	Detection  *dedupe.Detection   `json:"detection,omitempty"`     // detect
	// Digest is a packed map task's query digests (digest.go);
	// DetectedBy says how a detect task decided ("digests" or "rows"),
	// DigestsUnused why not by digests, when it read rows.
	Digest        *QueryDigest        `json:"query_digests,omitempty"`
	DetectedBy    string              `json:"detected_by,omitempty"`
	DigestsUnused string              `json:"digests_unused,omitempty"`
	Profile       map[string][2]int64 `json:"profile,omitempty"` // map with tensors: list lengths seen
	Shards        []writer.Shard      `json:"shards,omitempty"`  // reduce with tensors
	Queries       int64               `json:"queries,omitempty"` // packed reduce
	// Checked is what a reduce task found when it read its files back
	// (verify.Checked, one per file), ShardsChecked the same for its tensor
	// shards: commit then only confirms them.
	Checked       []verify.Checked `json:"checked,omitempty"`
	ShardsChecked []verify.Checked `json:"shards_checked,omitempty"`
	// Summary names a key task's summary object, SummaryBytes its size.
	Summary      string `json:"summary,omitempty"`
	SummaryBytes int64  `json:"summary_bytes,omitempty"`
	// The key task of the input's first non-empty row group also reads
	// the encoding sample (plan.ReadFitSample), so that the merge reads no
	// rows: Sample names the object it stored (the bytes plan stores as
	// its sample), SampleHash is their xxhash64 (workFileHash), and
	// SampleRowBytes and SampleDecodeScale are what it measured.
	Sample            string  `json:"sample,omitempty"`
	SampleHash        string  `json:"sample_hash,omitempty"`
	SampleRowBytes    float64 `json:"sample_row_bytes,omitempty"`
	SampleDecodeScale float64 `json:"sample_decode_scale,omitempty"`
	Seconds           float64 `json:"seconds"`

	// What writePartition wrote with, for the reduce task's own check.
	outSchema *arrow.Schema
	tensors   *tensors.Plan
}

func (d TaskManifest) sum() (fingerprint.Sum, error) {
	h, err := strconv.ParseUint(d.Hash, 16, 64)
	return fingerprint.Sum{Rows: d.Rows, Hash: h}, err
}

func mapDoneName(i int) string { return fmt.Sprintf("%smap/m-%05d/_done.json", plan.WorkPrefix, i) }

// mapAttemptPrefix is where map task i's attempt writes its objects.
func mapAttemptPrefix(i int, attempt string) string {
	return fmt.Sprintf("%smap/m-%05d/a-%s/", plan.WorkPrefix, i, attempt)
}

// SegmentIndex describes a map task's segment index (partition.EncodeIndex),
// stored as segments.bin under the attempt's prefix beside its shuffle: a
// record per unit of the plan, which reduce and detect tasks read by range
// for their own units. The stored manifest lists no segments: a manifest
// that did grew with the units, and every reduce task read every map
// task's (a Hive output of 1,200 folders: 200 KB of JSON per map task for
// each of 1,200 reduce tasks).
type SegmentIndex struct {
	Units    int   `json:"units"`    // records: the plan's units
	Segments int   `json:"segments"` // units with a segment
	Rows     int64 `json:"rows"`
	Bytes    int64 `json:"bytes"` // the shuffle's bytes (commit's spill figure)
	// OneObject: every segment is a range of the attempt's one shuffle
	// object (an object store); otherwise each is a file of its own.
	OneObject bool `json:"one_object"`
}

// segmentIndexName is the index's name under a map attempt's prefix;
// segmentIndexKind seeds its records' checks (partition.IndexSeed).
const (
	segmentIndexName = "segments.bin"
	segmentIndexKind = "segments"
)

// validAttempt reports whether an attempt name from a manifest is one
// newAttempt makes: letters, digits and dashes, so that the paths made of
// it stay under the attempt's prefix.
func validAttempt(a string) bool {
	if a == "" || len(a) > 64 {
		return false
	}
	for _, c := range a {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}
func reduceDoneName(j int) string {
	return fmt.Sprintf("%sreduce/r-%05d/_done.json", plan.WorkPrefix, j)
}
func detectDoneName(j int) string {
	return fmt.Sprintf("%sdetect/d-%05d/_done.json", plan.WorkPrefix, j)
}

func newAttempt() string {
	var b [6]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// PlanJob is `relayout plan`: it reads footers and key columns, fixes the
// layout, the partitions and the map split, and writes plan.json under the
// output's work prefix.
func PlanJob(ctx context.Context, opts RunOptions, mapBytes int64) (*PlanResult, *plan.Plan, error) {
	pj, err := startPlan(ctx, opts, mapBytes)
	if err != nil {
		return nil, nil, err
	}
	defer pj.claim.release(ctx)
	defer pj.tbl.Close()
	defer pj.opts.adviseHeap(keyPassHeld(pj.tbl, pj.in.RowBytes, pj.opts.Parallel))()
	ks, err := plan.AnalyzeSized(ctx, pj.tbl, pj.keys, pj.in, pj.opts.layout(pj.tr), pj.opts.resources())
	if err != nil {
		return nil, nil, err
	}
	return pj.finish(ctx, ks)
}

// planJob is a plan step under way: its options, the output it claimed
// and the opened input.
type planJob struct {
	opts     RunOptions
	tr       *tensorRun
	mapBytes int64
	out      storage.Location
	claim    *outputClaim
	staged   bool
	tbl      *source.Table
	keys     plan.Keys
	in       plan.Sizes
	// stored is the encoding sample a key task stored (plan --keys), to
	// be copied as the plan's; nil: the plan stores ks.Sample.
	stored *storedSample
}

// storedSample is an encoding sample a key task stored under the work
// prefix: its name there, its hash (workFileHash), and what to do when it
// is missing (run that key task again).
type storedSample struct {
	name, hash, hint string
}

// startPlan checks the options, claims the output for a plan (or a key
// plan) and opens the input.
func startPlan(ctx context.Context, opts RunOptions, mapBytes int64) (*planJob, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	tr, err := newTensorRun(opts)
	if err != nil {
		return nil, err
	}
	if mapBytes <= 0 {
		mapBytes = plan.DefaultMapBytes
	}
	out, err := storage.OpenDir(ctx, opts.Output, true)
	if err != nil {
		return nil, err
	}
	// The plan holds the output's lease while it prepares it and writes
	// plan.json; plan.json then marks the work as relayout's, and the
	// commit's conditional create of the manifest is the commit point.
	// Overwriting a committed output stages: it stays whole until commit.
	claim, err := claimOutput(ctx, out, opts.Inputs, opts.Overwrite, true, "plan", plan.WorkPrefix) // and an old work prefix
	if err != nil {
		return nil, err
	}
	staged := claim.target.Prefix != out.Prefix || claim.target.Local != out.Local
	claim.target, claim.prefixes = out, []string{plan.WorkPrefix} // a failed plan removes its work prefix, staged files and all
	tbl, keys, in, _, err := openTable(ctx, &opts)
	if err != nil {
		claim.release(ctx)
		return nil, err
	}
	return &planJob{opts: opts, tr: tr, mapBytes: mapBytes, out: out, claim: claim, staged: staged, tbl: tbl, keys: keys, in: in}, nil
}

// finish fixes the plan from its key pass and writes plan.json (and the
// encoding sample) under the work prefix.
func (pj *planJob) finish(ctx context.Context, ks *plan.KeyPass) (*PlanResult, *plan.Plan, error) {
	opts := pj.opts
	opts.fitted(ks)
	if err := checkFolders(ks.Hist, opts, ks.Sizes.FileRowBytes); err != nil {
		return nil, nil, err
	}
	p, err := plan.Build(ctx, pj.tbl, pj.keys, ks, opts.layout(pj.tr), opts.resources(), opts.Inputs, pj.mapBytes)
	if err != nil {
		return nil, nil, err
	}
	if ks.First != nil { // the plan step reads no rows
		ks.First.Release()
		ks.First = nil
	}
	if p.Packing != nil && ks.Sample != nil {
		p.Packing.Probe = probeDetection(ks.Sample, pj.keys)
	}
	if ks.Sample != nil || pj.stored != nil {
		// Stored once, so reduce tasks need not each read the input's
		// first row group again; meanwhile the schema, so that they need
		// no input footer at all. A key task's sample is copied.
		var sampleHash string
		sampled := make(chan error, 1)
		go func() {
			var err error
			if st := pj.stored; st != nil {
				sampleHash = st.hash
				err = copyObject(ctx, pj.out, st.name, pj.out, plan.SampleFileName)
				if storage.IsNotFound(err) {
					err = errs.Preconditionf(st.hint, "the encoding sample %s is missing", pj.out.URL(st.name))
				}
			} else {
				sampleHash, err = putSample(ctx, pj.out, plan.SampleFileName, ks.Sample)
			}
			sampled <- err
		}()
		schemaHash, err := putSchema(ctx, pj.out, pj.tbl.Schema)
		if serr := <-sampled; err == nil {
			err = serr
		}
		if ks.Sample != nil {
			ks.Sample.Release()
		}
		if err != nil {
			return nil, nil, err
		}
		p.WorkFiles = map[string]string{workFileKey(plan.SchemaFileName): schemaHash, workFileKey(plan.SampleFileName): sampleHash}
	} else {
		schemaHash, err := putSchema(ctx, pj.out, pj.tbl.Schema)
		if err != nil {
			return nil, nil, err
		}
		p.WorkFiles = map[string]string{workFileKey(plan.SchemaFileName): schemaHash}
	}
	p.Staged = pj.staged
	data, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return nil, nil, err
	}
	if err := pj.claim.put(ctx, plan.FileName, append(data, '\n'), false); err != nil {
		return nil, nil, err
	}
	res := &PlanResult{Plan: pj.out.Address(plan.FileName), MapTasks: len(p.Maps), ReduceTasks: p.ReduceTaskCount()}
	if p.Packing != nil {
		res.DetectTasks = p.ReduceTaskCount()
	}
	return res, p, nil
}

// loadedPlan is a plan with what every task derives from it.
type loadedPlan struct {
	*plan.Plan
	out  storage.Location
	opts RunOptions
	hist *partition.Histogram
	// tensors is the plan's tensor config (nil: no tensors).
	tensors *plan.TensorOptions
	// work holds the work prefix (_relayout/): the output for distributed
	// runs, a local temporary folder when run executes the plan.
	work storage.Location
	// final is the output itself: out, or out's owner when out is the
	// staging prefix of a plan that overwrites a committed output.
	final storage.Location
	// enc caches the column encodings per output schema (encodings).
	encMu sync.Mutex
	enc   map[string]*writer.Encodings
	// sampleKey is the xxhash64 of the stored sample's bytes (sample),
	// which keys the process's caches of it and its encodings.
	sampleKey uint64
	// bins, when set (run, spilling with small pieces), is each unit's bin
	// in a two-pass shuffle (partition.Bins); binned are the second pass's
	// segments, which the reduce reads instead of the map tasks'.
	bins   []int
	binned []partition.Segment
	// schemaMu guards schemaOf, the plan's stored schema once read
	// (schema): a reduce reads it for the detection and for its partition.
	schemaMu sync.Mutex
	schemaOf *arrow.Schema
	// taskSegs and taskDigests, when set, are a detect or reduce task's
	// segment and digest records, read once for all its partitions
	// (preloadSegments, preloadDigests).
	taskSegs    *taskSegments
	taskDigests *taskDigests
}

// schema reads the table's schema the plan stored, once per loaded plan.
func (lp *loadedPlan) schema(ctx context.Context) (*arrow.Schema, error) {
	lp.schemaMu.Lock()
	defer lp.schemaMu.Unlock()
	if lp.schemaOf == nil {
		s, err := readSchema(ctx, lp.work, lp.WorkFiles, lp.work.URL(plan.FileName))
		if err != nil {
			return nil, err
		}
		lp.schemaOf = s
	}
	return lp.schemaOf, nil
}

// planLocation splits a plan URL (<output>/_relayout/plan.json, with the
// URL's query parameters, if any, after it) into the output's URL.
func planLocation(planURL string) (string, error) {
	return workFileLocation(planURL, plan.FileName, "--plan")
}

// workFileLocation splits the URL of a file under the work prefix (name,
// e.g. _relayout/plan.json), with the URL's query parameters after it,
// into the output's URL; flag names the option that passed it.
func workFileLocation(fileURL, name, flag string) (string, error) {
	base, query, _ := strings.Cut(fileURL, "?")
	if !strings.HasSuffix(base, "/"+name) {
		return "", errs.Usagef("%s must name %s under the output (got %s)", flag, name, fileURL)
	}
	out := strings.TrimSuffix(base, "/"+name)
	if query != "" {
		out += "?" + query
	}
	return out, nil
}

// errNoPlan is wrapped by loadPlan's error when plan.json is missing.
var errNoPlan = errors.New("plan has not run there, or commit has finished")

// planOutput opens the output location of a plan URL.
func planOutput(ctx context.Context, planURL string) (string, storage.Location, error) {
	outURL, err := planLocation(planURL)
	if err != nil {
		return "", storage.Location{}, err
	}
	out, err := storage.OpenDir(ctx, outURL, false)
	return outURL, out, err
}

// committedManifest reads the manifest committed at the plan's output, or
// nil when there is none.
func committedManifest(ctx context.Context, planURL string) (*manifests.Manifest, error) {
	_, out, err := planOutput(ctx, planURL)
	if err != nil {
		return nil, err
	}
	data, err := storage.Get(ctx, out, manifests.FileName)
	if err != nil {
		if storage.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	m, err := manifests.Decode(data)
	if err != nil {
		return nil, errs.BadInputf("%s: %v", out.URL(manifests.FileName), err)
	}
	return m, nil
}

func loadPlan(ctx context.Context, planURL string, local RunOptions) (*loadedPlan, error) {
	outURL, out, err := planOutput(ctx, planURL)
	if err != nil {
		return nil, err
	}
	data, err := storage.Get(ctx, out, plan.FileName)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, errs.Preconditionf("run relayout plan first", "no plan at %s: %w", out.URL(plan.FileName), errNoPlan)
		}
		return nil, err
	}
	p, err := decodePlan(out.URL(plan.FileName), data)
	if err != nil {
		return nil, err
	}
	cfg, err := checkHeader(p.Header, "plan", out.URL(plan.FileName))
	if err != nil {
		return nil, err
	}
	var maxItems int64
	if p.Packing != nil {
		maxItems = p.Packing.MaxItems
	}
	opts, tr, err := optionsOf(outURL, p.InputArgs, cfg, maxItems, local)
	if err != nil {
		return nil, err
	}
	if _, h := configOf(opts, tr); h != p.ConfigHash {
		return nil, errs.BadInputf("%s: the config does not hash to %s", out.URL(plan.FileName), p.ConfigHash)
	}
	slices := make([]partition.Slice, len(p.Slices))
	for i, s := range p.Slices {
		if len(s.Parts) != len(opts.SliceKeys) || len(s.Values) != len(opts.SliceKeys) {
			return nil, errs.BadInputf("%s: slice %d has %d parts and %d values for %d slice keys", out.URL(plan.FileName), i, len(s.Parts), len(s.Values), len(opts.SliceKeys))
		}
		var key []byte
		for _, part := range s.Parts {
			key = append(key, part...)
		}
		slices[i] = partition.Slice{Key: key, Parts: s.Parts, Values: s.Values, Rows: s.Rows, Start: s.Start, InputRowGroups: s.InputRowGroups}
	}
	lp := &loadedPlan{Plan: p, out: out, work: out, final: out, opts: opts, hist: partition.NewHistogram(slices), tensors: cfg.Tensors}
	if p.Staged {
		lp.out = stageOf(out) // the tasks write there; commit swaps
	}
	return lp, nil
}

// decodedPlan is the plan this process decoded last, by its bytes'
// xxhash64: the tasks of a list (--task 0-N) share it, checked and with
// its units cut, and read only its bytes again. A Hive output of 1,200
// folders has a plan of 550 KB, which took each of its reduce tasks 10 ms
// to decode and 3 ms to cut into units.
var decodedPlan struct {
	sync.Mutex
	sum uint64
	p   *plan.Plan
}

// decodePlan decodes and checks plan.json's bytes (read from url), or
// returns the plan the process decoded from the same bytes. The plan is
// shared: nothing changes it once decoded.
func decodePlan(url string, data []byte) (*plan.Plan, error) {
	sum := xxhash.Sum64(data)
	decodedPlan.Lock()
	defer decodedPlan.Unlock()
	if decodedPlan.p != nil && decodedPlan.sum == sum {
		return decodedPlan.p, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // slice values print back exactly as the run prints them
	var p plan.Plan
	if err := dec.Decode(&p); err != nil {
		return nil, errs.BadInputf("%s is not a relayout plan: %v", url, err)
	}
	if p.Format != plan.Format {
		return nil, errs.BadInputf("%s is not a relayout plan: format %q, want %q", url, p.Format, plan.Format)
	}
	if err := p.Check(); err != nil {
		return nil, errs.BadInputf("%s: %v", url, err)
	}
	p.Units() // cut once, before tasks share it
	decodedPlan.sum, decodedPlan.p = sum, &p
	return &p, nil
}

// checkHeader refuses a plan file (what: plan, key plan) of another
// relayout version and decodes its config.
func checkHeader(h plan.Header, what, url string) (plan.Options, error) {
	if h.FormatVersion != plan.FormatVersion || h.RelayoutVersion != version.Version {
		return plan.Options{}, errs.Preconditionf("run every step with the same relayout version",
			"%s %s was written by relayout %s (plan format %d); this is relayout %s", what, url, h.RelayoutVersion, h.FormatVersion, version.Version)
	}
	cfg, err := plan.DecodeConfig(h.Config)
	if err != nil {
		return plan.Options{}, errs.BadInputf("%s: config: %v", url, err)
	}
	return cfg, nil
}

// optionsOf rebuilds the run options a plan (or key plan) records: its
// config, inputs and output, with this process's local resources.
func optionsOf(outURL string, inputArgs []string, cfg plan.Options, maxItems int64, local RunOptions) (RunOptions, *tensorRun, error) {
	opts := RunOptions{
		Inputs: inputArgs, Output: outURL, SliceKeys: cfg.SliceKeys, SortKeys: cfg.SortKeys,
		RowGroupBytes: cfg.RowGroupBytes, MinRowGroupBytes: cfg.MinRowGroupBytes, RowGroupRows: cfg.RowGroupRows,
		FileBytes: cfg.FileBytes, BoundaryKeys: cfg.BoundaryKeys, ZstdLevel: cfg.ZstdLevel, PageBytes: cfg.PageBytes,
		MemoryLimit: local.MemoryLimit, TmpDir: local.TmpDir, Parallel: local.Parallel, Log: local.Log, HugePages: local.HugePages, Together: local.Together,
		QueryKey: cfg.QueryKey, QueryColumns: cfg.QueryColumns, ItemOrder: cfg.ItemOrder, OnQueryConflict: cfg.OnQueryConflict,
		MaxItemsPerQuery: maxItems, hive: cfg.Hive,
	}
	if cfg.HiveKeys > 0 {
		opts.OutputPartitioning, opts.HiveKeys = "hive", cfg.HiveKeys
	}
	if cfg.Tensors != nil {
		opts.Tensors, opts.ShardBytes, opts.BlockSamples, opts.ShardBlocks = true, cfg.Tensors.ShardBytes, cfg.Tensors.BlockSamples, cfg.Tensors.ShardBlocks
	}
	if cfg.BoundaryKeys == 0 {
		opts.BoundaryKeys = BoundaryKeysOff
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return opts, nil, err
	}
	var tr *tensorRun
	if cfg.Tensors != nil {
		tr = &tensorRun{spec: cfg.Tensors.Spec}
	}
	return opts, tr, nil
}

// tensorRun is the plan's tensor run with a profile (nil without tensors).
func (lp *loadedPlan) tensorRun(prof *tensors.Profile) *tensorRun {
	if lp.tensors == nil {
		return nil
	}
	return &tensorRun{spec: lp.tensors.Spec, prof: prof}
}

// openInputs opens the plan's inputs, failing if any changed since the plan.
func (lp *loadedPlan) openInputs(ctx context.Context, counts *storage.Counters) (*source.Table, error) {
	return openPinned(ctx, lp.InputArgs, lp.Inputs, lp.opts.hive, counts, lp.opts.MemoryLimit)
}

// openMapInputs opens only the input files map task reads, placed as in
// the whole table (file indices, row offsets from the pins) and with the
// plan's schema: a task's cost does not grow with the input's other files'
// footers. Those files' pins are commit's to check.
func (lp *loadedPlan) openMapInputs(ctx context.Context, task int) (*source.Table, error) {
	var own []int
	for _, rg := range lp.Maps[task].RowGroups {
		if rg[0] < 0 || rg[0] >= len(lp.Inputs) {
			return nil, errs.BadInputf("plan: map %d names input file %d of %d", task, rg[0], len(lp.Inputs))
		}
		if len(own) == 0 || own[len(own)-1] != rg[0] {
			own = append(own, rg[0])
		}
	}
	if len(own) == 0 { // an empty input's one map task
		return lp.openInputs(ctx, nil)
	}
	return openOwn(ctx, lp.work, lp.Header, lp.work.URL(plan.FileName), lp.opts.hive, own, nil, lp.opts.MemoryLimit)
}

// openOwn opens only the pinned input files own (indices into pins, in
// order), checking their pins (and, with rowGroups, their row-group
// counts), placed at the file indices and row offsets they have in the
// whole table and typed with the plan's schema (stored under work): what a
// map or key task reads. It asks for those files alone (a stat or HEAD
// each), not for a listing of the input: at 200,000 input files a listing
// is 200 requests per task. Objects added to the input since the plan are
// not read by any task; commit, which lists the input, refuses them.
func openOwn(ctx context.Context, work storage.Location, h plan.Header, planURL string, hiveSpec string, own []int, rowGroups []int, memoryLimit int64) (*source.Table, error) {
	pins := h.Inputs
	offsets := make([]int64, len(pins)+1)
	for i, pin := range pins {
		offsets[i+1] = offsets[i] + pin.Rows
	}
	paths := make([]string, len(own))
	subPins := make([]manifests.Input, len(own))
	for k, i := range own {
		paths[k], subPins[k] = pins[i].Path, pins[i]
	}
	sub, err := storage.Pinned(ctx, h.InputArgs, paths)
	if err != nil {
		if storage.IsNotFound(err) {
			return nil, errs.Preconditionf("re-run relayout plan", "an input is gone since the plan: %v", err)
		}
		return nil, err
	}
	if err := checkPins(sub, subPins); err != nil {
		return nil, err
	}
	schema, err := readSchema(ctx, work, h.WorkFiles, planURL)
	if err != nil {
		return nil, err
	}
	tbl, err := openObjects(ctx, sub, nil, string(hiveMode(hiveSpec)), hiveSpec, memoryLimit)
	if err != nil {
		return nil, err
	}
	for k, i := range own {
		f := tbl.Files[k]
		if f.Rows != pins[i].Rows || (rowGroups != nil && len(f.RowGroupRows) != rowGroups[i]) {
			tbl.Close()
			return nil, errs.Preconditionf("re-run relayout plan", "input %s holds %d rows in %d row groups; the plan pinned %d rows", f.Obj.URL, f.Rows, len(f.RowGroupRows), pins[i].Rows)
		}
		tbl.Place(k, i, offsets[i])
	}
	if err := tbl.Adopt(schema); err != nil {
		tbl.Close()
		return nil, err
	}
	return tbl, nil
}

// hiveMode is the Hive partitioning mode that reads a plan's inputs with
// its resolved spec ("" for none).
func hiveMode(spec string) hive.Mode {
	if spec != "" {
		return hive.On
	}
	return hive.Off
}

// checkPins fails if an object differs from its pin (storage.Object's
// SameVersion: size and ETag, and the mtime where there is no ETag).
func checkPins(objs []storage.Object, pins []manifests.Input) error {
	for i, o := range objs {
		pin := pins[i]
		if o.URL != pin.Path || !o.SameVersion(pin.Bytes, pin.ETag, pin.MTime) {
			return errs.Preconditionf("re-run relayout plan", "input %s changed since the plan (size %d, etag %q, mtime %s; pinned %d, %q, %s)",
				o.URL, o.Size, o.ETag, o.MTime, pin.Bytes, pin.ETag, pin.MTime)
		}
	}
	return nil
}

// openPinned lists the input arguments and opens them (with the Hive
// partitioning spec hiveSpec, "" for none), failing if any object differs
// from its pin.
func openPinned(ctx context.Context, inputArgs []string, pins []manifests.Input, hiveSpec string, counts *storage.Counters, memoryLimit int64) (*source.Table, error) {
	objs, err := storage.List(ctx, inputArgs)
	if err != nil {
		return nil, err
	}
	if len(objs) != len(pins) {
		return nil, errs.Preconditionf("re-run relayout plan", "the input changed since the plan: %d objects, the plan pinned %d", len(objs), len(pins))
	}
	if err := checkPins(objs, pins); err != nil {
		return nil, err
	}
	return openObjects(ctx, objs, counts, string(hiveMode(hiveSpec)), hiveSpec, memoryLimit)
}

func (lp *loadedPlan) readDone(ctx context.Context, name string) (*TaskManifest, error) {
	data, err := storage.Get(ctx, lp.work, name)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, nil
		}
		return nil, err
	}
	d, err := openDone(data)
	if err != nil {
		return nil, errs.WithHint(errs.BadInputf("%s: %v", lp.work.URL(name), err), "run the task again")
	}
	if d.ConfigHash != lp.ConfigHash {
		return nil, errs.Preconditionf("re-run the task under the current plan", "%s belongs to another plan (config %s, the plan's %s)", lp.work.URL(name), d.ConfigHash, lp.ConfigHash)
	}
	return d, nil
}

// readDones reads the task manifests name(0) to name(n-1), 16 at once
// (a store's latency, not its bandwidth, bounds each: commit read a Hive
// output's 1,200 one after another, 12 s at 10 ms a request); a missing
// one is nil. Of several errors, the lowest task's is returned (par.ForEach),
// as a loop would have.
func (lp *loadedPlan) readDones(ctx context.Context, n int, name func(int) string) ([]*TaskManifest, error) {
	out := make([]*TaskManifest, n)
	err := par.ForEach(ctx, n, 16, func(i int) error {
		var err error
		out[i], err = lp.readDone(ctx, name(i))
		return err
	})
	if err != nil {
		return nil, storage.Classify(err)
	}
	return out, nil
}

// checksumField opens a sealed manifest's checksum: it is the first field.
var checksumField = []byte("{\n \"checksum\": \"")

// sealDone marshals a task manifest with its checksum: the xxhash64 of
// the bytes with the checksum empty.
func sealDone(d *TaskManifest) ([]byte, error) {
	c := *d
	c.Checksum = ""
	data, err := json.MarshalIndent(&c, "", " ")
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(data, checksumField) {
		return nil, fmt.Errorf("internal: a task manifest does not start with its checksum")
	}
	sum := fmt.Sprintf("%016x", xxhash.Sum64(data))
	return slices.Concat(checksumField, []byte(sum), data[len(checksumField):]), nil
}

// openDone parses a sealed task manifest, checking its checksum first.
func openDone(data []byte) (*TaskManifest, error) {
	n := len(checksumField)
	if !bytes.HasPrefix(data, checksumField) || len(data) < n+16 {
		return nil, fmt.Errorf("it does not start with its checksum: damaged, not a task manifest, or written by a relayout before 2026-12-04")
	}
	want := string(data[n : n+16])
	got := fmt.Sprintf("%016x", xxhash.Sum64(slices.Concat(checksumField, data[n+16:])))
	if got != want {
		return nil, fmt.Errorf("damaged: its checksum is %s, its bytes hash to %s", want, got)
	}
	var d TaskManifest
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// loadTask loads the plan and checks the task index against the step's
// task count.
func loadTask(ctx context.Context, planURL string, local RunOptions, step string, task int) (*loadedPlan, error) {
	lp, err := loadPlan(ctx, planURL, local)
	if err != nil {
		return nil, err
	}
	if err := lp.checkTask(planURL, step, task); err != nil {
		return nil, err
	}
	return lp, nil
}

// stepTasks returns how many tasks the plan has for a step (map, detect,
// reduce); a detect step of a plan that does not pack is an error.
func (lp *loadedPlan) stepTasks(planURL, step string) (int, error) {
	switch step {
	case "map":
		return len(lp.Maps), nil
	case "detect":
		if lp.Packing == nil {
			return 0, errs.Usagef("plan %s is not packed (no --query-key): it has no detect step; run reduce after map", planURL)
		}
	}
	return lp.ReduceTaskCount(), nil // detect and reduce: a group of partitions each
}

// checkTask refuses a task index the plan lacks for the step.
func (lp *loadedPlan) checkTask(planURL, step string, task int) error {
	n, err := lp.stepTasks(planURL, step)
	if err != nil {
		return err
	}
	if task < 0 || task >= n {
		return errs.Usagef("--task %d: the plan has %s tasks 0 to %d", task, step, n-1)
	}
	return nil
}

// StepTasks returns how many tasks the plan has for a step (map, detect or
// reduce).
func StepTasks(ctx context.Context, planURL string, step string, local RunOptions) (int, error) {
	lp, err := loadPlan(ctx, planURL, local)
	if err != nil {
		return 0, err
	}
	return lp.stepTasks(planURL, step)
}

// CheckTasks checks task indices of a step (map, detect or reduce)
// against the plan, before a worker runs several of them (exit 2 naming
// the first out of range, as the task itself would).
func CheckTasks(ctx context.Context, planURL string, step string, tasks []int, local RunOptions) error {
	lp, err := loadPlan(ctx, planURL, local)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if err := lp.checkTask(planURL, step, t); err != nil {
			return err
		}
	}
	return nil
}

// MapTask is `relayout map --task i`: it reads the task's row groups once
// and writes their rows, routed to the plan's units, as one Arrow IPC object
// per unit, then its task manifest.
func MapTask(ctx context.Context, planURL string, task int, local RunOptions) (*TaskManifest, error) {
	lp, err := loadTask(ctx, planURL, local, "map", task)
	if err != nil {
		return nil, err
	}
	tbl, err := lp.openMapInputs(ctx, task)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	tbl.DecodeScale = lp.DecodeScale // row groups sliced as the plan sliced them
	keys, err := resolveKeys(tbl, lp.opts)
	if err != nil {
		return nil, err
	}
	return lp.mapRows(ctx, tbl, keys, task, lp.opts.Parallel, true)
}

// writeDone writes a task manifest at its attempt path, then at the task's
// fixed name: the task's commit point.
func writeDone(ctx context.Context, out storage.Location, attemptName, doneName string, d *TaskManifest) error {
	data, err := sealDone(d)
	if err != nil {
		return err
	}
	d.Checksum = string(data[len(checksumField) : len(checksumField)+16])
	if err := putObject(ctx, out, attemptName, data); err != nil {
		return err
	}
	return putObject(ctx, out, doneName, data)
}

// unitBytes is the decoded bytes a detect or reduce task of partition j
// holds at once: its largest unit. A task is a fresh process, so every page
// of its heap is faulted in (adviseHeap).
func (lp *loadedPlan) unitBytes(j int) int64 {
	return int64(float64(min(lp.Partitions[j].Rows, lp.UnitRows)) * lp.RowBytes * decodedPerInput)
}

// DetectTask is `relayout detect --task t` (packed plans): for each
// partition of task t (plan.TaskPartitions), it reads the partition,
// sorted, and records which columns vary inside a query, so that every
// reduce task decides the query-level columns over all rows. Each
// partition gets its own task manifest; it returns their sum.
func DetectTask(ctx context.Context, planURL string, task int, local RunOptions) (*TaskManifest, error) {
	lp, err := loadTask(ctx, planURL, local, "detect", task)
	if err != nil {
		return nil, err
	}
	// Refused as a reduce task is (a task that reads rows holds a unit).
	if err := lp.checkUnitMemory(task, "detect"); err != nil {
		return nil, err
	}
	// The map tasks' digests first: when they agree, no row is read.
	maps, schema, err := lp.mapsAndSchema(ctx)
	if err != nil {
		return nil, err
	}
	first, end := lp.TaskPartitions(task)
	// A task of several partitions reads its records once for all.
	if err := lp.preloadDigests(ctx, maps, first, end); err != nil {
		return nil, err
	}
	if err := lp.preloadSegments(ctx, maps, first, end); err != nil {
		return nil, err
	}
	var sum *TaskManifest
	for j := first; j < end; j++ {
		d, err := lp.detectPartition(ctx, j, maps, schema)
		if err != nil {
			return nil, err
		}
		sum = sumTasks(sum, d, task)
	}
	return sum, nil
}

// detectPartition is a detect task's work for partition j.
func (lp *loadedPlan) detectPartition(ctx context.Context, j int, maps []*TaskManifest, schema *arrow.Schema) (*TaskManifest, error) {
	t0 := time.Now()
	det, ok, why, err := lp.detectByDigests(ctx, j, maps, schema)
	if err != nil {
		return nil, err
	}
	var rows int64
	by := "digests"
	if ok {
		lo, hi := lp.PartitionUnits(j)
		segs, err := lp.segmentsOf(ctx, maps, lo, hi)
		if err != nil {
			return nil, err
		}
		for _, s := range segs {
			rows += s.Rows
		}
	} else {
		by = "rows"
		pr, err := lp.openPartitionOf(ctx, j, maps, schema)
		if err != nil {
			return nil, err
		}
		defer pr.close()
		defer lp.opts.adviseHeap(lp.unitBytes(j))()
		if det, rows, err = pr.detect(ctx); err != nil {
			return nil, err
		}
	}
	attempt := newAttempt()
	d := &TaskManifest{Kind: "detect", Task: j, Attempt: attempt, ConfigHash: lp.ConfigHash, Rows: rows, Detection: &det,
		DetectedBy: by, DigestsUnused: why, Seconds: time.Since(t0).Seconds()}
	return d, writeDone(ctx, lp.work, fmt.Sprintf("%sdetect/d-%05d/a-%s/_task.json", plan.WorkPrefix, j, attempt), detectDoneName(j), d)
}

// sumTasks adds partition manifest d to sum, the manifest task prints
// for its partitions (nil for none yet): files, shards and their checks
// in order, rows, queries and seconds summed, detections merged.
func sumTasks(sum, d *TaskManifest, task int) *TaskManifest {
	if sum == nil {
		c := *d
		c.Task = task
		if d.Detection != nil {
			var det dedupe.Detection // a copy: the sum merges into it
			det.Merge(*d.Detection)
			c.Detection = &det
		}
		return &c
	}
	sum.Rows += d.Rows
	sum.Queries += d.Queries
	sum.Seconds += d.Seconds
	sum.Files = append(sum.Files, d.Files...)
	sum.Shards = append(sum.Shards, d.Shards...)
	sum.Checked = append(sum.Checked, d.Checked...)
	sum.ShardsChecked = append(sum.ShardsChecked, d.ShardsChecked...)
	if d.Detection != nil && sum.Detection != nil {
		sum.Detection.Merge(*d.Detection)
	}
	if d.DetectedBy != "" && !strings.Contains(sum.DetectedBy, d.DetectedBy) {
		sum.DetectedBy += "," + d.DetectedBy
	}
	if sum.DigestsUnused == "" {
		sum.DigestsUnused = d.DigestsUnused
	}
	return sum
}

// detectMergedName is every detect task's result merged, written by the
// first task that merges them (detection).
var detectMergedName = plan.WorkPrefix + "detect/_merged.json"

// detection merges every detect task's result, in partition order.
// It also returns the tasks' summed seconds. Every reduce task needs all
// of them: the first to merge them stores the merge (sealed, as a task
// manifest), and the others read that one object instead of a manifest
// per partition (partitions² reads over the job). A stored merge that is
// damaged, another plan's or of another task count is merged again and
// replaced; writing it is best effort.
func (lp *loadedPlan) detection(ctx context.Context) (dedupe.Detection, float64, error) {
	var det dedupe.Detection
	var secs float64
	schema, err := lp.schema(ctx)
	if err != nil {
		return det, 0, err
	}
	if m, err := lp.readDone(ctx, detectMergedName); err == nil && m != nil && m.Kind == "detect-merged" &&
		m.Task == len(lp.Partitions) && m.Detection != nil && m.Detection.CheckColumns(schema.NumFields()) == nil {
		return withProbe(*m.Detection, lp.Packing.Probe), m.Seconds, nil
	}
	// Read several at once, merged in partition order.
	dones, err := lp.readDones(ctx, len(lp.Partitions), detectDoneName)
	if err != nil {
		return det, 0, err
	}
	for j, d := range dones {
		if d == nil || d.Detection == nil {
			return det, 0, errs.Preconditionf("run every detect task first", "detect task %d (partition %d) has not completed (no %s)", lp.PartitionTask(j), j, lp.work.URL(detectDoneName(j)))
		}
		if err := d.Detection.CheckColumns(schema.NumFields()); err != nil {
			return det, 0, errs.WithHint(errs.BadInputf("%s: %v", lp.work.URL(detectDoneName(j)), err), "run the detect task again")
		}
		det.Merge(*d.Detection)
		secs += d.Seconds
	}
	merged := &TaskManifest{Kind: "detect-merged", Task: len(lp.Partitions), ConfigHash: lp.ConfigHash, Detection: &det, Seconds: secs}
	if data, err := sealDone(merged); err == nil {
		if err := putObject(ctx, lp.work, detectMergedName, data); err != nil {
			lp.opts.Log.Debug("the merged detection was not stored; the next task merges again", "err", err)
		}
	}
	return withProbe(det, lp.Packing.Probe), secs, nil
}

// ReduceTask is `relayout reduce --task t`: for each partition of task t
// (plan.TaskPartitions), it reads the partition from every map task's
// output, orders it (and packs it) as run does, writes its files and then
// its task manifest. It returns the sum of their manifests.
func ReduceTask(ctx context.Context, planURL string, task int, local RunOptions) (*TaskManifest, error) {
	lp, err := loadTask(ctx, planURL, local, "reduce", task)
	if err != nil {
		return nil, err
	}
	var det dedupe.Detection
	if lp.Packing != nil {
		// Every detect task first: a missing one fails before any read.
		if det, _, err = lp.detection(ctx); err != nil {
			return nil, err
		}
	}
	// What every partition with rows reads first, once per task.
	first, end := lp.TaskPartitions(task)
	var heap int64 // the largest unit it holds
	for j := first; j < end; j++ {
		if lp.Packing == nil || len(lp.Partitions[j].Files) > 0 {
			heap = max(heap, lp.unitBytes(j))
		}
	}
	// A task is a fresh process: every page of its heap is faulted in,
	// from the sample and the segments it reads first on.
	defer lp.opts.adviseHeap(heap)()
	var maps []*TaskManifest
	var schema *arrow.Schema
	var sample arrow.RecordBatch
	for j := first; j < end; j++ {
		if lp.Packing != nil && len(lp.Partitions[j].Files) == 0 {
			continue // a query covers its range: no file, nothing read
		}
		if schema != nil {
			continue
		}
		if err := lp.checkUnitMemory(j, "reduce"); err != nil {
			return nil, err
		}
		if maps, schema, err = lp.mapsAndSchema(ctx); err != nil {
			return nil, err
		}
		if sample, err = lp.sample(ctx, schema); err != nil {
			return nil, err
		}
		if sample != nil {
			defer sample.Release()
		}
	}
	if schema != nil {
		if err := lp.preloadSegments(ctx, maps, first, end); err != nil {
			return nil, err
		}
	}
	reader := func(j int) (*partitionReader, error) { return lp.openPartitionOf(ctx, j, maps, schema) }
	// Its partitions are written as run writes them (small ones several
	// at once); each is checked, then its manifest written, beside the
	// writes of the partitions after it (checksAtOnce in flight: a check
	// of a small partition on an object store is a few requests whose
	// latency bounds it). A failed check stops the writes; the lowest
	// partition's error is returned.
	n := end - first
	done := make([]*TaskManifest, n)
	failed := make([]error, n)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stop   error
		checks = make(chan struct{}, checksAtOnce)
	)
	t0 := time.Now()
	_, err = lp.writePartitions(ctx, reader, false, det, sample, first, end, func(j int, d *TaskManifest) error {
		mu.Lock()
		err := stop
		mu.Unlock()
		if err != nil {
			return err
		}
		d.Task, d.Attempt, d.Seconds = j, newAttempt(), time.Since(t0).Seconds()
		t0 = time.Now()
		checks <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-checks }()
			err := lp.checkAndCommitPartition(ctx, j, d)
			if err != nil {
				mu.Lock()
				stop = cmp.Or(stop, err)
				mu.Unlock()
			}
			done[j-first], failed[j-first] = d, err
		}()
		return nil
	})
	wg.Wait()
	for _, e := range failed { // the lowest partition's, as in order
		if e != nil {
			return nil, e
		}
	}
	if err != nil {
		return nil, err
	}
	var sum *TaskManifest
	for _, d := range done {
		if d != nil {
			sum = sumTasks(sum, d, task)
		}
	}
	return sum, nil
}

// checksAtOnce is how many written partitions a reduce task checks and
// commits at once, beside its writes.
const checksAtOnce = 8

// checkAndCommitPartition reads partition j's written files back and
// checks them (checkPartition, checkShards), then writes its manifest.
func (lp *loadedPlan) checkAndCommitPartition(ctx context.Context, j int, d *TaskManifest) error {
	if len(lp.Partitions[j].Files) > 0 || lp.Packing == nil {
		var err error
		if d.Checked, err = lp.checkPartition(ctx, j, d); err != nil {
			return err
		}
		if d.ShardsChecked, err = lp.checkShards(ctx, j, d); err != nil {
			return err
		}
	}
	return writeDone(ctx, lp.work, fmt.Sprintf("%sreduce/r-%05d/a-%s/_task.json", plan.WorkPrefix, j, d.Attempt), reduceDoneName(j), d)
}

// checkPartition reads a reduce task's files back and checks them as
// commit would (verify.Part), against the manifest of the
// partition alone: its files, with the slices clipped to its rows (to its
// queries, packed: a packed reduce numbers its rows from 0, and its
// manifest has the partition's queries and items). It returns what commit
// needs to trust them without reading them again.
func (lp *loadedPlan) checkPartition(ctx context.Context, task int, d *TaskManifest) ([]verify.Checked, error) {
	pp := lp.Partitions[task]
	// Its rows among the output's (the slices are clipped to them), and
	// the row its files start at.
	start, rows, all, first := pp.Start, pp.Rows, lp.hist.Slices, pp.Start
	if lp.Packing != nil {
		start, rows, all, first = lp.firstQuery(task), pp.Queries, slicesInQueries(lp.hist, lp.Packing.PerSlice), 0
	}
	if len(d.Files) == 0 || d.Files[0].FirstRow != first {
		return nil, fmt.Errorf("internal: reduce task %d wrote %d files starting at row %d, want %d", task, len(d.Files), firstRow(d.Files), first)
	}
	files := slices.Clone(d.Files)
	for k := range files {
		files[k].FirstRow -= first
	}
	var sl []partition.Slice
	for _, s := range all {
		lo, hi := max(s.Start, start), min(s.Start+s.Rows, start+rows)
		if hi > lo {
			c := s
			c.Start, c.Rows = lo-start, hi-lo
			sl = append(sl, c)
		}
	}
	fp, err := d.sum()
	if err != nil {
		return nil, err
	}
	schema := d.outSchema
	m := buildManifest(source.SchemaOnly(schema), schema, sl, files, lp.Config, lp.ConfigHash, lp.opts, fp)
	if lp.Packing != nil {
		m.SortKeys = nonNil(lp.opts.QueryKey)
		m.Packing = &manifests.Packing{Queries: pp.Queries, Items: fp.Rows}
	}
	vr, err := verify.Part(ctx, lp.out, m, lp.opts.Parallel)
	if err != nil {
		return nil, err
	}
	if !vr.OK {
		if strings.HasPrefix(vr.Problem, "manifest:") {
			// The plan's slices and layout disagree (plan.json edited or
			// damaged): the files are as the plan said, the plan is not.
			return nil, errs.WithHint(errs.BadInputf("%s does not describe partition %d consistently (%s)", lp.work.URL(plan.FileName), task, vr.Problem), "plan again (relayout plan) and rerun the tasks")
		}
		return nil, fmt.Errorf("reduce task %d: output check failed: its files do not read back as written (%s); nothing of it was committed: run it again", task, vr.Problem)
	}
	return vr.Checked, nil
}

// firstQuery is the packed output's row (query) partition task starts at.
func (lp *loadedPlan) firstQuery(task int) int64 {
	var q int64
	for _, p := range lp.Partitions[:task] {
		q += p.Queries
	}
	return q
}

// checkShards reads a reduce task's tensor shards back and checks each as
// commit would (verify.Shards), returning what commit needs to trust them.
func (lp *loadedPlan) checkShards(ctx context.Context, task int, d *TaskManifest) ([]verify.Checked, error) {
	if len(d.Shards) == 0 {
		return nil, nil
	}
	mt := &manifests.Tensors{SpecHash: d.tensors.Hash(), Schema: d.tensors.Tensors()}
	for _, s := range d.Shards {
		mt.Shards = append(mt.Shards, s.Shard)
	}
	checked, problem, err := verify.Shards(ctx, lp.out, mt, lp.opts.Parallel)
	if err != nil {
		return nil, err
	}
	if problem != "" {
		return nil, fmt.Errorf("reduce task %d: output check failed: its shards do not read back as written (%s); nothing of it was committed: run it again", task, problem)
	}
	return checked, nil
}

func firstRow(files []manifests.File) int64 {
	if len(files) == 0 {
		return -1
	}
	return files[0].FirstRow
}

// CommitJob is `relayout commit`: it requires every task manifest, checks
// rows and fingerprints, writes manifest.json exactly as run writes it, and
// removes the work prefix.
func CommitJob(ctx context.Context, planURL string, local RunOptions) (*manifests.Manifest, error) {
	t0 := time.Now()
	lp, err := loadPlan(ctx, planURL, local)
	if errors.Is(err, errNoPlan) {
		// A commit retried after it succeeded (its cleanup removed the
		// plan): the committed manifest is the answer.
		if m, merr := committedManifest(ctx, planURL); merr == nil && m != nil {
			return m, nil
		}
	}
	if err != nil {
		return nil, err
	}
	rep := report.New("commit", lp.opts.MemoryLimit, lp.opts.Parallel, lp.opts.TmpDir)
	rep.ConfigHash = lp.ConfigHash
	var mapSeconds, detectSeconds, reduceSeconds float64
	maps, err := lp.mapDones(ctx, "run the missing task, then commit again")
	if err != nil {
		return nil, err
	}
	for _, d := range maps {
		mapSeconds += d.Seconds
		if d.Index != nil {
			if d.Index.Rows != d.Rows {
				return nil, errs.WithHint(errs.BadInputf("%s: its segments hold %d rows, it read %d", lp.work.URL(mapDoneName(d.Task)), d.Index.Rows, d.Rows), "run the map task again")
			}
			rep.SpillBytes += d.Index.Bytes
		}
	}
	reduces, err := lp.readDones(ctx, len(lp.Partitions), reduceDoneName)
	if err != nil {
		return nil, err
	}
	for j, d := range reduces {
		if d == nil {
			return nil, errs.Preconditionf("run the missing task, then commit again", "reduce task %d (partition %d of %d) has not completed (no %s)", lp.PartitionTask(j), j, len(lp.Partitions), lp.work.URL(reduceDoneName(j)))
		}
		reduceSeconds += d.Seconds
	}
	var det dedupe.Detection
	if lp.Packing != nil {
		if det, detectSeconds, err = lp.detection(ctx); err != nil {
			return nil, err
		}
	}
	tbl, err := lp.openInputs(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	m, queries, shards, err := lp.assemble(tbl, maps, reduces, det)
	if err != nil {
		return nil, err
	}
	// Files and shards a reduce task read back are only confirmed (size
	// and ETag: unchanged since); anything rewritten since, or without a
	// check on record (a task manifest of an earlier version), is read
	// again.
	prior := verify.Prior{Files: []verify.Checked{}, Shards: []verify.Checked{}}
	for _, d := range reduces {
		if prior.Files != nil && len(d.Checked) == len(d.Files) {
			prior.Files = append(prior.Files, d.Checked...)
		} else {
			prior.Files = nil
		}
		if prior.Shards != nil && len(d.ShardsChecked) == len(d.Shards) {
			prior.Shards = append(prior.Shards, d.ShardsChecked...)
		} else {
			prior.Shards = nil
		}
	}
	check := func() error {
		vr, err := verify.ManifestChecked(ctx, lp.out, m, prior, lp.opts.Parallel)
		if err != nil {
			return err
		}
		if !vr.OK {
			return fmt.Errorf("output check failed, nothing committed: %s", vr.Problem)
		}
		return nil
	}
	if lp.Staged {
		// Committed already by this plan (a retried commit)? Else move the
		// staged files in: from here the old output is gone and the new one
		// not yet committed (a retry finishes the move).
		if old, err := storage.Get(ctx, lp.final, manifests.FileName); err == nil {
			if data, _ := manifests.Marshal(m); bytes.Equal(old, data) {
				lp.out = lp.final
			}
		}
		if lp.out != lp.final {
			// The staged files pass the check before the old output is
			// touched (unless a swap began already: a retry finishes it).
			swapping, err := lp.work.Bucket.Exists(ctx, lp.work.Key(swapMarker))
			if err != nil {
				return nil, storage.Classify(fmt.Errorf("check %s: %w", lp.work.URL(swapMarker), err))
			}
			if !swapping {
				if err := check(); err != nil {
					return nil, err
				}
			}
			if err := swapStaged(ctx, lp.final, lp.out, m, lp.work); err != nil {
				return nil, err
			}
			lp.out = lp.final
		}
	}
	// Checked (again, after a swap: a rename keeps a local file's ETag,
	// and a copy an object's where the store's ETag is its content's hash;
	// where it does not, the file is read again).
	if err := check(); err != nil {
		return nil, err
	}
	// The manifest is created only if absent (where the store supports
	// it): two commits racing cannot both succeed.
	data, err := manifests.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := storage.SyncTree(lp.out, "parquet", "tensors"); err != nil {
		return nil, err
	}
	if err := storage.Put(ctx, lp.out, manifests.FileName, data, storage.PutOptions{IfNotExist: true}); err != nil {
		if !storage.IsExists(err) {
			return nil, err
		}
		// Committed already: by this very plan (a commit retried after a
		// crash that followed its manifest write) if the manifest is the
		// one this commit would write; then finish the cleanup.
		old, rerr := storage.Get(ctx, lp.out, manifests.FileName)
		if rerr != nil || !bytes.Equal(old, data) {
			return nil, errs.Preconditionf("the output is committed; re-run plan with --overwrite to redo it", "%s already exists", lp.out.URL(manifests.FileName))
		}
		lp.opts.Log.Info("already committed by this plan; finishing the cleanup", "manifest", lp.out.URL(manifests.FileName))
	}
	if err := storage.RemovePrefix(ctx, lp.work, plan.WorkPrefix); err != nil {
		return m, err
	}
	// The report: the run's figures from the plan's key pass (before) and
	// the written files (after); the tasks' times are summed, and the
	// shuffle counts as spill.
	before := report.Before{SliceRowGroups: make([]int, len(lp.Slices)), SliceBytes: make([]int64, len(lp.Slices)), NoStats: lp.InputRowGroupsNoStats, RowGroups: tbl.NumRowGroups()}
	for i, s := range lp.Slices {
		before.SliceRowGroups[i], before.SliceBytes[i] = s.RowGroupsBefore, s.ReadBytesBefore
	}
	rep.Input = report.Input{Files: len(tbl.Files), Bytes: plan.SizesOf(tbl).Bytes, Rows: tbl.Rows, RowGroups: tbl.NumRowGroups()}
	rep.Units = len(lp.Partitions)
	maxItems := int64(0)
	if lp.Packing != nil {
		maxItems = lp.Packing.MaxItems
	}
	if err := report.FillRun(ctx, rep, tbl, lp.out, m, lp.hist, before, queries, shards, lp.Layout, maxItems, lp.opts.SliceKeys, lp.opts.ReportSlices); err != nil {
		return m, err
	}
	rep.Stages = []report.Stage{{Name: "map (all tasks)", Seconds: mapSeconds}}
	if lp.Packing != nil {
		rep.Stages = append(rep.Stages, report.Stage{Name: "detect (all tasks)", Seconds: detectSeconds})
	}
	rep.Stages = append(rep.Stages, report.Stage{Name: "reduce (all tasks)", Seconds: reduceSeconds}, report.Stage{Name: "commit", Seconds: time.Since(t0).Seconds()})
	rep.Finish(t0, m)
	rep.Resources.Seconds = mapSeconds + detectSeconds + reduceSeconds + rep.Seconds
	if data, err := json.MarshalIndent(rep, "", " "); err == nil {
		if err := putObject(ctx, lp.out, report.FileName, append(data, '\n')); err != nil {
			return m, err
		}
	}
	return m, nil
}

// putSample stores the encoding sample under the work prefix as name
// (plan.SampleFileName, or a key task's object) and returns its hash
// (workFileHash). It is streamed, a column's buffer at a time: a
// sample held encoded beside itself (80 MB of a 1,001-column row group)
// took a plan step to 287 MiB at --memory-limit 210MiB.
func putSample(ctx context.Context, work storage.Location, name string, sample arrow.RecordBatch) (string, error) {
	url := work.URL(name)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := work.Bucket.NewWriter(cctx, work.Key(name), nil)
	if err != nil {
		return "", storage.Classify(fmt.Errorf("create %s: %w", url, err))
	}
	h := xxhash.New()
	buf := bufio.NewWriterSize(io.MultiWriter(bw, h), 1<<20)
	w := ipc.NewWriter(buf, ipc.WithSchema(sample.Schema()), ipc.WithLZ4())
	err = w.Write(sample)
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = buf.Flush()
	}
	if err != nil {
		cancel() // abort: nothing becomes visible
		_ = bw.Close()
		return "", storage.Classify(fmt.Errorf("write %s: %w", url, err))
	}
	if err := bw.Close(); err != nil {
		return "", storage.Classify(fmt.Errorf("write %s: %w", url, err))
	}
	return workFileHash(h.Sum64()), nil
}

// putSchema stores the table's schema under the work prefix and returns
// its hash (workFileHash).
func putSchema(ctx context.Context, work storage.Location, schema *arrow.Schema) (string, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Close(); err != nil {
		return "", err
	}
	return workFileHash(xxhash.Sum64(buf.Bytes())), putObject(ctx, work, plan.SchemaFileName, buf.Bytes())
}

// workFileHash is the hash plan.Header.WorkFiles records: xxhash64, hex.
func workFileHash(sum uint64) string { return fmt.Sprintf("%016x", sum) }

// workFileKey is a work file's name in plan.Header.WorkFiles.
func workFileKey(name string) string { return strings.TrimPrefix(name, plan.WorkPrefix) }

// getWorkFile reads a file the plan step stored under work and checks it
// against the hash its plan file (planURL) records in hashes: a file
// changed or damaged since is bad input, before anything decodes it. It
// returns the bytes and their xxhash64.
func getWorkFile(ctx context.Context, work storage.Location, name string, hashes map[string]string, planURL string) ([]byte, uint64, error) {
	data, err := storage.Get(ctx, work, name)
	if err != nil {
		return nil, 0, err
	}
	want, ok := hashes[workFileKey(name)]
	if !ok {
		return nil, 0, errs.WithHint(errs.BadInputf("%s records no hash for %s", planURL, work.URL(name)), "re-run relayout plan")
	}
	sum, err := checkWorkFile(data, work.URL(name), want, planURL, "re-run relayout plan")
	return data, sum, err
}

// checkWorkFile checks data, the object at url, against the xxhash64 want
// that recordedBy records (workFileHash): a file changed or damaged since
// is bad input, with hint. It returns the data's xxhash64.
func checkWorkFile(data []byte, url, want, recordedBy, hint string) (uint64, error) {
	sum := xxhash.Sum64(data)
	if got := workFileHash(sum); got != want {
		return 0, errs.WithHint(errs.BadInputf("%s is damaged or was changed: its xxhash64 is %s, %s records %s", url, got, recordedBy, want), hint)
	}
	return sum, nil
}

// decodeSample decodes a stored encoding sample (putSample), hash-checked
// already, read with schema where not nil; the caller owns the record.
// Its body may exceed arrow-go's default limit (256 MiB: the input's first
// row group, compressed).
func decodeSample(data []byte, url string, schema *arrow.Schema) (arrow.RecordBatch, error) {
	opts := []ipc.Option{ipc.WithBodySizeLimit(0)}
	if schema != nil {
		opts = append(opts, ipc.WithSchema(schema))
	}
	rd, err := ipc.NewReader(bytes.NewReader(data), opts...)
	if err != nil {
		return nil, errs.BadInputf("read %s: %v", url, err)
	}
	defer rd.Release()
	if !rd.Next() {
		return nil, errs.BadInputf("read %s: no record (%v)", url, rd.Err())
	}
	rec := rd.RecordBatch()
	rec.Retain()
	return rec, nil
}

// readSchema reads the table's schema a plan (or key plan, planURL) stored
// under work, checked against the hashes the plan records.
func readSchema(ctx context.Context, work storage.Location, hashes map[string]string, planURL string) (*arrow.Schema, error) {
	data, _, err := getWorkFile(ctx, work, plan.SchemaFileName, hashes, planURL)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, errs.Preconditionf("re-run relayout plan", "the plan's schema %s is missing", work.URL(plan.SchemaFileName))
	}
	if err != nil {
		return nil, err
	}
	rd, err := ipc.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, errs.WithHint(errs.BadInputf("read %s: %v", work.URL(plan.SchemaFileName), err), "re-run relayout plan")
	}
	defer rd.Release()
	return rd.Schema(), nil
}

// sample reads the encoding sample plan stored (nil for an empty input).
func (lp *loadedPlan) sample(ctx context.Context, schema *arrow.Schema) (arrow.RecordBatch, error) {
	data, sum, err := getWorkFile(ctx, lp.work, plan.SampleFileName, lp.WorkFiles, lp.work.URL(plan.FileName))
	if gcerrors.Code(err) == gcerrors.NotFound {
		if lp.Rows > 0 {
			return nil, errs.Preconditionf("re-run relayout plan", "the plan's encoding sample %s is missing", lp.work.URL(plan.SampleFileName))
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	// The tasks of a list (--task 0-N) share one plan: its sample is
	// decoded, and its encodings chosen, once per process.
	lp.sampleKey = sum // checked against the plan's record: the bytes' own
	key := sampleCacheKey{lp.sampleKey, schema.String()}
	if rec, ok := samples.Load(key); ok {
		rec.(arrow.RecordBatch).Retain()
		return rec.(arrow.RecordBatch), nil
	}
	rec, err := decodeSample(data, lp.work.URL(plan.SampleFileName), schema) // the caller's
	if err != nil {
		return nil, err
	}
	if prev, loaded := samples.LoadOrStore(key, rec); loaded {
		rec.Release()
		rec = prev.(arrow.RecordBatch)
	}
	rec.Retain() // the cache's (or the caller's, for the one stored first)
	return rec, nil
}

// sampleCacheKey names a stored sample by its bytes and the schema it is
// read with.
type sampleCacheKey struct {
	sum    uint64
	schema string
}

// samples and sampleEncodings are the process's decoded samples and the
// encodings chosen from them (by sample, output schema and Hive columns):
// a worker running a list of reduce tasks chose them once per task before,
// 50-80 ms of a 0.2-0.5 s task on the bench input. A process holds the
// samples of the plans it ran tasks of, one per plan (32Ki rows).
var samples, sampleEncodings sync.Map
