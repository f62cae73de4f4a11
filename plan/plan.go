package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/writer"
)

// The distributed run (docs/distributed.md): plan fixes the layout and cuts
// it into partitions (one per output file) of memory-sized units, and the
// input into map tasks; each map task routes its rows to the units through
// the object store; in packed plans each detect task finds the columns that
// vary inside a query in one partition; each reduce task orders (and packs)
// one partition, unit by unit, and writes its file and shards; commit checks
// every task and writes the manifest. Tasks write under the work prefix,
// attempt-specific, with a small task manifest last, so a retried or
// duplicated task is harmless. run executes the same plan in one process.
const (
	Format        = "relayout-plan"
	FormatVersion = 1
	// WorkPrefix holds the plan and the tasks' outputs until commit.
	WorkPrefix = "_relayout/"
	FileName   = WorkPrefix + "plan.json"
	// SampleFileName holds the first input row group (Arrow IPC), from
	// which every reduce task chooses column encodings as run does.
	SampleFileName = WorkPrefix + "sample.arrows"
	// SchemaFileName holds the table's schema (Arrow IPC, no rows): the
	// detect and reduce tasks read it instead of the inputs' footers.
	SchemaFileName = WorkPrefix + "schema.arrows"
	// DefaultMapBytes is the input bytes per map task.
	DefaultMapBytes = 256 << 20
)

// Header is what a plan file (plan.json, the key plan's keys.json)
// starts with: its format, the relayout that wrote it, the config and its
// hash, and the inputs as given and as pinned.
type Header struct {
	Format          string            `json:"format"`
	FormatVersion   int               `json:"format_version"`
	RelayoutVersion string            `json:"relayout_version"`
	Config          json.RawMessage   `json:"config"`
	ConfigHash      string            `json:"config_hash"`
	InputArgs       []string          `json:"input_args"`
	Inputs          []manifests.Input `json:"inputs"`
	// WorkFiles is the xxhash64 of each file the plan step stored beside
	// it (the schema, the encoding sample), by name under WorkPrefix:
	// tasks check a file before they decode it, so a damaged one is
	// refused and not handed to the Arrow IPC reader.
	WorkFiles map[string]string `json:"work_files,omitempty"`
}

// NewHeader is the header of a plan file of the given format for the
// table's files, with config o and the inputs as given.
func NewHeader(format string, o Options, tbl *source.Table, inputs []string) Header {
	cfgJSON, cfgHash := o.Config()
	h := Header{Format: format, FormatVersion: FormatVersion, RelayoutVersion: version.Version, Config: cfgJSON, ConfigHash: cfgHash, InputArgs: inputs}
	for _, f := range tbl.Files {
		h.Inputs = append(h.Inputs, manifests.Input{Path: f.Obj.URL, Bytes: f.Obj.Size, ETag: f.Obj.ETag, MTime: f.Obj.MTime, Rows: f.Rows})
	}
	return h
}

// Plan is plan.json: everything a task needs, fixed once.
type Plan struct {
	Header
	Rows      int64   `json:"rows"`
	RowBytes  float64 `json:"row_bytes"` // uncompressed input bytes per row
	ChunkRows int64   `json:"chunk_rows"`
	// DecodeScale is the input table's source.Table.DecodeScale: map
	// tasks slice row groups as the plan did (SliceRowsOf).
	DecodeScale float64 `json:"decode_scale,omitempty"`
	// UnitRows caps the rows a map task routes to one object and a
	// reduce task sorts at once: the plan's --memory-limit sizes it as run
	// sizes its units. A plan's units never span partitions (a reduce
	// task reads only its own); run's may (Resources.JoinPartitions).
	UnitRows int64 `json:"unit_rows"`
	// MemoryLimit is the budget UnitRows was sized for: detect and reduce
	// tasks need at least as much.
	MemoryLimit int64            `json:"memory_limit"`
	Layout      partition.Layout `json:"layout"`
	Slices      []Slice          `json:"slices"`
	Partitions  []Partition      `json:"partitions"`
	Maps        []Map            `json:"maps"`
	// InputRowGroupsNoStats counts input row groups without slice-key
	// statistics (for the report's warnings).
	InputRowGroupsNoStats int `json:"input_row_groups_no_stats"`
	// Packing is set for packed plans (--query-key).
	Packing *Packing `json:"packing,omitempty"`

	unitsOf  []partition.Unit // units(), once computed
	unitPart []int
	unitEnd  []int
	// join lets a unit hold several small partitions (run's
	// Resources.JoinPartitions); not in plan.json.
	join bool
	// Cuts routes the rows of slices split over units, in plans with sort
	// keys (packed plans sort by query key): slice rank -> the sort key and
	// input position of the row at each unit start inside it. Without sort
	// keys a slice's rows keep input order: map tasks count them
	// (Map.Counters).
	Cuts map[string][]partition.Cut `json:"cuts,omitempty"`
	// TaskStarts is the first partition of each reduce task (and detect
	// task, packed plans): consecutive partitions share a task up to a
	// map task's rows (the table's rows over the map tasks), so that an
	// output of many small files (a Hive folder each: 1,200 of them on
	// the bench input) is not a task per file; a partition as large is a
	// task of its own. Each partition still has its own task manifest.
	// Empty: a task per partition.
	TaskStarts []int `json:"reduce_task_starts,omitempty"`
	// Staged: the plan overwrites a committed output, which stays whole
	// until the commit: reduce tasks write under the work prefix's next/,
	// and commit swaps the new files in.
	Staged bool `json:"staged,omitempty"`
}

// Packing is what a packed plan adds: exact query counts from the key
// pass, and how the queries of slices split over files are routed.
type Packing struct {
	Queries       int64                  `json:"queries"`
	Items         int64                  `json:"items"`
	ItemsPerQuery manifests.Distribution `json:"items_per_query"`
	PerSlice      []int64                `json:"queries_per_slice"`
	MaxItems      int64                  `json:"max_items_per_query"`
	// Probe is the detection over the encoding sample (its rows grouped
	// by slice and query key): the columns seen to vary inside a query
	// there. The map tasks digest every other column per query, so that a
	// detect task whose digests agree need not read its rows
	// (pipeline/digest.go). Nil in plans of earlier versions.
	Probe *Probe `json:"probe,omitempty"`
}

// Probe is a detection's result as the plan records it (dedupe.Detection's
// fields, which the plan does not import): per column, whether it varied
// inside a query, and where, by column index.
type Probe struct {
	Varying   []bool            `json:"varying"`
	Conflicts map[string]string `json:"conflicts"`
}

// Slice is one histogram entry.
type Slice struct {
	Parts          [][]byte `json:"parts"`
	Values         []any    `json:"values"`
	Rows           int64    `json:"rows"`
	Start          int64    `json:"start"`
	InputRowGroups int      `json:"input_row_groups"`
	// What reading the slice costs on the input (the report's "before").
	ReadBytesBefore int64 `json:"read_bytes_before"`
	RowGroupsBefore int   `json:"row_groups_before"`
}

// Partition is one reduce task: a run of output files.
type Partition struct {
	Index int   `json:"index"`
	Files []int `json:"files"`
	// Start and Rows are the partition's range in the ordered flat rows
	// (items when packed); Units counts its units.
	Start int64 `json:"start"`
	Rows  int64 `json:"rows"`
	Units int   `json:"units"`
	// Queries is a packed partition's queries: its file's rows. A packed
	// partition may be empty (one query covered its whole file range).
	Queries int64 `json:"queries,omitempty"`
}

// Map is one map task: a run of input row groups in input order, and,
// for every slice split over units that keeps input order (no sort keys),
// how many of its rows come before.
type Map struct {
	Index     int              `json:"index"`
	RowGroups [][2]int         `json:"row_groups"` // (input file, row group)
	Rows      int64            `json:"rows"`
	Bytes     int64            `json:"bytes"`
	Counters  map[string]int64 `json:"counters"` // slice rank -> rows before
}

// planPacking places a packed plan's partitions: each file's packed range
// starts at a query boundary (partition.ComputePackCuts), and a partition whose range
// is empty writes no file, so the files after it are numbered down, as run
// numbers them.
func planPacking(ctx context.Context, p *Plan, tbl *source.Table, hist *partition.Histogram, layout partition.Layout, keys Keys, qc *partition.QueryCounts, tasks *partition.SummaryExtra, maxItems int64, parallel int) error {
	var pc *partition.PackCuts
	var err error
	if tasks != nil {
		pc, err = partition.PackCutsFromItems(hist, layout, tbl.Rows, tasks.Items)
	} else {
		pc, err = partition.ComputePackCuts(ctx, tbl, hist, layout, keys.Slice, keys.Query, parallel)
	}
	if err != nil {
		return err
	}
	pk := &Packing{Queries: qc.Queries, Items: tbl.Rows, ItemsPerQuery: manifests.DistributionOf(qc.Items),
		PerSlice: qc.PerSlice, MaxItems: maxItems}
	rt := partition.NewRouter(hist, planUnits(layout, 1<<62))
	queries := slices.Clone(pc.Queries)
	for i, s := range hist.Slices {
		if s.Rows > 0 && rt.Whole[i] >= 0 {
			queries[rt.Whole[i]] += qc.PerSlice[i]
		}
	}
	next := 0 // the next output file's number
	for k := range layout.Files {
		pp := Partition{Index: k, Files: []int{}, Start: pc.Starts[k], Rows: pc.Starts[k+1] - pc.Starts[k], Queries: queries[k]}
		if pp.Rows > 0 || (k == 0 && tbl.Rows == 0) {
			pp.Files = []int{next}
			next++
		}
		p.Partitions = append(p.Partitions, pp)
	}
	p.Packing = pk
	return nil
}

// Units returns the plan's units in output order, with each one's
// partition: the writer's chunks (cut at the partitions' starts), grouped
// per partition by UnitRows. Run groups its chunks the same way, except
// that with JoinPartitions consecutive partitions of at most UnitRows rows
// share a unit of at most UnitRows rows (the unit's partition is then its
// first; UnitPartitions gives them all).
func (p *Plan) Units() ([]partition.Unit, []int) {
	if p.unitsOf != nil {
		return p.unitsOf, p.unitPart
	}
	starts := make([]int64, len(p.Partitions))
	for j, pp := range p.Partitions {
		starts[j] = pp.Start
	}
	chunks := partition.CutChunks(partition.Chunks(p.Layout, p.ChunkRows), starts)
	var units []partition.Unit
	var part, end []int
	joinable := false // the last unit may take the next partition
	for j, pp := range p.Partitions {
		in := partition.ChunksIn(chunks, pp.Start, pp.Start+pp.Rows)
		if len(in) == 0 {
			continue
		}
		if p.join && pp.Rows <= p.UnitRows {
			if n := len(units) - 1; joinable && units[n].Rows+pp.Rows <= p.UnitRows {
				units[n].Rows += pp.Rows
				units[n].Chunks = append(units[n].Chunks, in...)
				end[n] = j + 1
				continue
			}
			units = append(units, partition.Unit{Start: pp.Start, Rows: pp.Rows, Chunks: slices.Clone(in)})
			part, end, joinable = append(part, j), append(end, j+1), true
			continue
		}
		for _, u := range partition.GroupUnits(in, p.UnitRows) {
			units = append(units, u)
			part, end = append(part, j), append(end, j+1)
		}
		joinable = false
	}
	p.unitsOf, p.unitPart, p.unitEnd = units, part, end
	return units, part
}

// UnitPartitions returns the partitions [first, end) whose rows unit u
// holds: one, unless run joined small partitions (Resources.JoinPartitions).
func (p *Plan) UnitPartitions(u int) (first, end int) {
	p.Units()
	return p.unitPart[u], p.unitEnd[u]
}

// PartitionUnits returns the units [lo, hi) that hold partition j's rows
// (units are in partition order: a search, not a pass over every unit for
// each of many partitions).
func (p *Plan) PartitionUnits(j int) (lo, hi int) {
	p.Units()
	lo = sort.SearchInts(p.unitEnd, j+1) // the first unit ending after j
	for hi = lo; hi < len(p.unitPart) && p.unitPart[hi] <= j; hi++ {
	}
	return lo, hi
}

// planUnits is one unit per output file, cut into the writer's chunks.
func planUnits(l partition.Layout, chunkRows int64) []partition.Unit {
	var units []partition.Unit
	for _, f := range l.Files {
		units = append(units, partition.Unit{Start: f.Start, Rows: f.Rows,
			Chunks: partition.Chunks(partition.Layout{Files: []partition.File{f}}, chunkRows)})
	}
	return units
}

// SplitCuts parses the plan's cuts, keyed by slice rank.
func (p *Plan) SplitCuts() (map[int32][]partition.Cut, error) {
	m, slices := p.Cuts, len(p.Slices)
	out := map[int32][]partition.Cut{}
	for k, cuts := range m {
		rk, err := strconv.Atoi(k)
		if err != nil || rk < 0 || rk >= slices {
			return nil, errs.BadInputf("plan: bad cut slice %q", k)
		}
		out[int32(rk)] = cuts
	}
	return out, nil
}

// KeyPass is what the key pass and the footers fix before a plan: the
// histogram, per-row-group counts and query counts, each slice's read cost
// on the input, the layout and the memory plan.
type KeyPass struct {
	Hist   *partition.Histogram
	Extra  *partition.BuildExtra
	Before report.Before
	Layout partition.Layout
	Memory Memory
	// Sample is the first row group, trimmed: it chooses the encodings.
	Sample arrow.RecordBatch
	// First is the first row group whole, kept when the table fits one
	// unit (Memory.Units), so that reading the table does not decode it a
	// second time; nil otherwise. The caller releases it.
	First arrow.RecordBatch
	Sizes Sizes
	// Fitted are the size targets the layout was made with (lower than
	// the options' when FitMemory lowered them to fit the memory limit).
	Fitted Fitted
	// Tasks is set when the key pass ran as tasks (AnalyzeSummaries): the
	// rows per slice of each map task's run and the queries, in place of
	// Extra's per-row-group counts.
	Tasks *partition.SummaryExtra
}

// Analyze is the key pass: it reads the key columns (slice keys, query
// key) of every row group and fixes the layout and the memory plan, as run
// and the distributed plan both start.
func Analyze(ctx context.Context, tbl *source.Table, keys Keys, o Options, r Resources) (*KeyPass, error) {
	in := SizesOf(tbl)
	return AnalyzeSized(ctx, tbl, keys, in, o, r)
}

// AnalyzeSized is Analyze with the input's sizes given (the dry run's
// in-memory run plans its sample with the real input's bytes per row).
func AnalyzeSized(ctx context.Context, tbl *source.Table, keys Keys, in Sizes, o Options, r Resources) (*KeyPass, error) {
	if err := InputFits(tbl, r); err != nil {
		return nil, err
	}
	// The first row group is decoded while the key pass runs: alone, its
	// decode (a fresh heap faulted in, columns of uneven cost on two
	// decoders) left a core idle for about 0.1 s of a 2.2 s run of the
	// 1M-row log. The key pass's error, when both fail, is the one
	// reported, as when they ran one after the other.
	type read struct {
		rec arrow.RecordBatch
		err error
	}
	sampled := make(chan read, 1)
	go func() {
		rec, err := readSample(ctx, tbl)
		sampled <- read{rec, err}
	}()
	kp, err := scan(ctx, tbl, keys, in, o, r, true)
	s := <-sampled
	if err != nil {
		if s.rec != nil {
			s.rec.Release()
		}
		return nil, err
	}
	if s.err != nil {
		return nil, s.err
	}
	return fitSample(tbl, kp, s.rec, in, o, r)
}

// fit completes a key pass with the encoding sample, the memory plan and
// the layout that fits it.
func fit(ctx context.Context, tbl *source.Table, kp *KeyPass, in Sizes, o Options, r Resources) (*KeyPass, error) {
	if err := InputFits(tbl, r); err != nil {
		return nil, err
	}
	sample, err := readSample(ctx, tbl)
	if err != nil {
		return nil, err
	}
	return fitSample(tbl, kp, sample, in, o, r)
}

// fitSample is fit with the sample read: the first non-empty row group,
// decoded (nil for a table without rows), which it takes.
func fitSample(tbl *source.Table, kp *KeyPass, sample arrow.RecordBatch, in Sizes, o Options, r Resources) (*KeyPass, error) {
	rowBytes, first, trimmed, err := measureSample(tbl, sample)
	if err != nil {
		return nil, err
	}
	return fitMeasured(tbl, kp, first, FitSample{Sample: trimmed, RowBytes: rowBytes}, in, o, r)
}

// measureSample measures the sample (the first non-empty row group,
// decoded; nil for a table without rows), which it takes: its decoded
// bytes per row (0 without rows), with which it raises tbl.DecodeScale,
// and the rows that choose encodings (writer.TrimSample); first is the
// sample itself.
func measureSample(tbl *source.Table, sample arrow.RecordBatch) (rowBytes float64, first, trimmed arrow.RecordBatch, err error) {
	// Units are sized with decoded bytes measured on the first row group
	// (dictionary-encoded columns decode larger than Parquet says).
	if sample != nil && sample.NumRows() > 0 {
		rowBytes = float64(partition.RecordBytes(sample)) / float64(sample.NumRows())
		if ref, ok := firstRowGroup(tbl); ok {
			raiseDecodeScale(tbl, rowBytes/ref.File.EstimateRowBytes())
		}
	}
	if sample == nil {
		return rowBytes, nil, nil, nil
	}
	trimmed, err = writer.TrimSample(sample, memory.DefaultAllocator) // keep only the rows that choose encodings
	if err != nil {
		sample.Release()
		return 0, nil, nil, err
	}
	return rowBytes, sample, trimmed, nil
}

// A FitSample is what a plan takes from the input's first non-empty row
// group, measured where that row group was read (a key task, so that the
// merge reads no rows): the rows that choose encodings, the decoded bytes
// per row, and the table's DecodeScale after reading it.
type FitSample struct {
	// Sample is the rows that choose encodings (writer.TrimSample); nil
	// where the caller holds them elsewhere and needs no decoded copy.
	Sample      arrow.RecordBatch
	RowBytes    float64
	DecodeScale float64
}

// ReadFitSample reads and measures tbl's first non-empty row group, as a
// plan does; nil for a table without rows. tbl's DecodeScale is raised as
// a plan raises it.
func ReadFitSample(ctx context.Context, tbl *source.Table) (*FitSample, error) {
	sample, err := readSample(ctx, tbl)
	if err != nil || sample == nil {
		return nil, err
	}
	rowBytes, first, trimmed, err := measureSample(tbl, sample)
	if err != nil {
		return nil, err
	}
	first.Release()
	return &FitSample{Sample: trimmed, RowBytes: rowBytes, DecodeScale: tbl.DecodeScale}, nil
}

// fitMeasured is fitSample with the sample measured (tbl's DecodeScale
// raised already): first is the whole sample (or nil), fs.Sample its rows
// that choose encodings; it takes both. Units are sized with fs.RowBytes,
// or the footers' estimate for a table without rows.
func fitMeasured(tbl *source.Table, kp *KeyPass, first arrow.RecordBatch, fs FitSample, in Sizes, o Options, r Resources) (*KeyPass, error) {
	hist, sample := kp.Hist, fs.Sample
	memRowBytes := in.RowBytes
	if fs.RowBytes > 0 {
		memRowBytes = fs.RowBytes
	}
	if kp.Extra != nil {
		in = in.WithSamples(tbl.Rows, kp.Extra.Queries)
	}
	o, layout, mp, err := FitMemory(tbl, hist, in, memRowBytes, o, r)
	if err != nil || len(mp.Units) != 1 {
		if first != nil {
			first.Release()
		}
		first = nil
	}
	if err != nil {
		if sample != nil {
			sample.Release()
		}
		return nil, err
	}
	kp.First = first
	kp.Layout, kp.Memory, kp.Sample, kp.Sizes = layout, mp, sample, in
	kp.Fitted = FittedOf(o)
	return kp, nil
}

// Scan is the key pass a dry run needs: the histogram, query counts, each
// slice's read cost on the input and the layout, without the per-row-group
// counts a plan's map tasks need, the encoding sample or the memory plan
// (the dry run sizes memory from its own sample, with SizeMemory).
func Scan(ctx context.Context, tbl *source.Table, keys Keys, o Options, r Resources) (*KeyPass, error) {
	return scan(ctx, tbl, keys, SizesOf(tbl), o, r, false)
}

func scan(ctx context.Context, tbl *source.Table, keys Keys, in Sizes, o Options, r Resources, counts bool) (*KeyPass, error) {
	hist, ex, err := partition.BuildWith(ctx, tbl, keys.Slice, partition.BuildOptions{Counts: counts, Vectors: len(keys.Slice) > 0, QueryCols: keys.Query}, r.Parallel)
	if err != nil {
		return nil, err
	}
	// What reading each slice costs on the input, for the report; the
	// per-row-group vectors are dropped here, before the rows are read.
	before, err := report.CostsBefore(tbl, o.SliceKeys, hist, ex.RowGroups)
	if err != nil {
		return nil, err
	}
	if counts {
		for _, rg := range ex.RowGroups {
			rg.DropVectors()
		}
	} else {
		ex.RowGroups = nil
	}
	return &KeyPass{Hist: hist, Extra: ex, Before: before, Layout: Layout(hist, in, o), Sizes: in}, nil
}

// Stats are the exact counts a key pass fixes: what the dry run reports
// and the run logs.
type Stats struct {
	Rows      int64
	Slices    int // non-empty slices
	Files     int
	RowGroups int
	// Queries, PerSliceQueries and ItemsPerQuery are set when packing.
	Queries         int64
	PerSliceQueries []int64
	ItemsPerQuery   manifests.Distribution
}

// Stats returns the key pass's counts.
func (kp *KeyPass) Stats() Stats {
	st := Stats{Files: len(kp.Layout.Files)}
	for _, s := range kp.Hist.Slices {
		st.Rows += s.Rows
		if s.Rows > 0 {
			st.Slices++
		}
	}
	for _, f := range kp.Layout.Files {
		st.RowGroups += len(f.RowGroups)
	}
	if qc := kp.Extra.Queries; qc != nil {
		st.Queries, st.PerSliceQueries, st.ItemsPerQuery = qc.Queries, qc.PerSlice, manifests.DistributionOf(qc.Items)
	}
	return st
}

// Release frees the encoding sample.
func (kp *KeyPass) Release() {
	if kp.Sample != nil {
		kp.Sample.Release()
		kp.Sample = nil
	}
}

// Build fixes the partitions (one per output file), the units, the cuts
// that route split slices and the map tasks (runs of input row groups of
// about mapBytes): plan.json's content, and what run executes. inputs are
// the input arguments as given (the tasks list them again).
func Build(ctx context.Context, tbl *source.Table, keys Keys, kp *KeyPass, o Options, r Resources, inputs []string, mapBytes int64) (*Plan, error) {
	hist, ex, before, layout, mp, in := kp.Hist, kp.Extra, kp.Before, kp.Layout, kp.Memory, kp.Sizes
	p := &Plan{Header: NewHeader(Format, o, tbl, inputs), Rows: tbl.Rows, RowBytes: in.RowBytes, ChunkRows: mp.ChunkRows, DecodeScale: tbl.DecodeScale,
		UnitRows: mp.UnitRows, MemoryLimit: r.MemoryLimit, Layout: layout, join: r.JoinPartitions}
	for i, s := range hist.Slices {
		p.Slices = append(p.Slices, Slice{Parts: s.Parts, Values: s.Values, Rows: s.Rows, Start: s.Start, InputRowGroups: s.InputRowGroups,
			ReadBytesBefore: before.SliceBytes[i], RowGroupsBefore: before.SliceRowGroups[i]})
	}
	p.InputRowGroupsNoStats = before.NoStats
	// One partition per output file: the files are the units every
	// worker count shares, so the bytes never depend on the workers.
	if keys.Query != nil {
		if err := planPacking(ctx, p, tbl, hist, layout, keys, ex.Queries, kp.Tasks, o.MaxItemsPerQuery, r.Parallel); err != nil {
			return nil, err
		}
	} else {
		for k, f := range layout.Files {
			p.Partitions = append(p.Partitions, Partition{Index: k, Files: []int{k}, Start: f.Start, Rows: f.Rows})
		}
	}
	if p.Packing != nil && p.Packing.MaxItems == 0 {
		p.Packing.MaxItems = mp.UnitRows // a query must fit a unit
	}
	units, part := p.Units()
	for _, j := range part {
		p.Partitions[j].Units++
	}
	rt := partition.NewRouter(hist, units)
	split := rt.Split()
	if len(split) > 0 && len(keys.Sort) > 0 {
		// Rows of a split slice are ordered by sort key, not input order:
		// route them by the sort key (and position) at each unit start.
		starts := make([]int64, len(units))
		for u, un := range units {
			starts[u] = un.Start
		}
		cuts, err := partition.ComputeCuts(ctx, tbl, hist, starts, keys.Slice, keys.Sort, r.Parallel)
		if err != nil {
			return nil, err
		}
		p.Cuts = map[string][]partition.Cut{}
		for rk, c := range cuts {
			p.Cuts[strconv.Itoa(int(rk))] = c
		}
		split = nil
	}
	// Map tasks: consecutive row groups of about mapBytes.
	refs := tbl.RowGroups()
	runs := MapRuns(tbl, mapBytes)
	if kp.Tasks != nil && len(kp.Tasks.TaskCounts) != len(runs) {
		return nil, errs.BadInputf("key pass: %d key tasks for %d map tasks", len(kp.Tasks.TaskCounts), len(runs))
	}
	rowsBefore := map[int32]int64{}
	for m, run := range runs {
		cur := Map{Index: m, Counters: map[string]int64{}}
		for _, rk := range split {
			cur.Counters[strconv.Itoa(int(rk))] = rowsBefore[rk]
		}
		for i := run[0]; i < run[1]; i++ {
			ref := refs[i]
			cur.RowGroups = append(cur.RowGroups, [2]int{ref.File.Index, ref.RowGroup})
			cur.Rows += ref.Rows()
			cur.Bytes += RowGroupBytes(ref)
			if kp.Tasks == nil {
				for _, rk := range split {
					rowsBefore[rk] += ex.RowGroups[i].Count(rk)
				}
			}
		}
		if kp.Tasks != nil {
			for _, rk := range split {
				rowsBefore[rk] += kp.Tasks.TaskCounts[m][rk]
			}
		}
		p.Maps = append(p.Maps, cur)
	}
	p.TaskStarts = groupTasks(p.Partitions, (tbl.Rows+int64(len(p.Maps))-1)/int64(max(len(p.Maps), 1)))
	return p, nil
}

// groupTasks cuts partitions into reduce tasks: consecutive partitions
// share one up to target rows (a map task's), and a partition as large
// is a task of its own. It returns each task's first partition.
func groupTasks(parts []Partition, target int64) []int {
	var starts []int
	var rows int64
	for j, pp := range parts {
		if j == 0 || rows+pp.Rows > target {
			starts, rows = append(starts, j), 0
		}
		rows += pp.Rows
	}
	return starts
}

// ReduceTaskCount is how many reduce tasks (and detect tasks, packed) the
// plan has: one per group of partitions (TaskStarts), or per partition.
func (p *Plan) ReduceTaskCount() int {
	if len(p.TaskStarts) == 0 {
		return len(p.Partitions)
	}
	return len(p.TaskStarts)
}

// TaskPartitions returns the partitions [first, end) of reduce (or
// detect) task t.
func (p *Plan) TaskPartitions(t int) (first, end int) {
	if len(p.TaskStarts) == 0 {
		return t, t + 1
	}
	end = len(p.Partitions)
	if t+1 < len(p.TaskStarts) {
		end = p.TaskStarts[t+1]
	}
	return p.TaskStarts[t], end
}

// PartitionTask returns the reduce (or detect) task of partition j.
func (p *Plan) PartitionTask(j int) int {
	if len(p.TaskStarts) == 0 {
		return j
	}
	return sort.SearchInts(p.TaskStarts, j+1) - 1
}

// MapRuns splits the table's row groups into the map tasks' runs,
// [first, end) of RowGroups(): consecutive row groups of about mapBytes
// stored bytes (at least one each; a table without row groups has one
// empty run). A distributed key pass runs one key task per run.
func MapRuns(tbl *source.Table, mapBytes int64) [][2]int {
	runs := [][2]int{}
	var bytes int64
	for i, ref := range tbl.RowGroups() {
		if len(runs) == 0 || bytes >= mapBytes {
			runs = append(runs, [2]int{i, i})
			bytes = 0
		}
		runs[len(runs)-1][1] = i + 1
		bytes += RowGroupBytes(ref)
	}
	if len(runs) == 0 {
		runs = append(runs, [2]int{0, 0})
	}
	return runs
}

// DecodeScaleAbove is the least ratio of decoded bytes to the footers'
// estimate that raises a table's DecodeScale: the estimate comes within a
// few percent of most tables, and slicing is decided on it unscaled there.
const DecodeScaleAbove = 1.1

// raiseDecodeScale sets tbl.DecodeScale to s where s is at least
// DecodeScaleAbove and more than it was. 2M rows of dictionary-encoded
// URLs in a file without statistics, 8 bytes a row by the footer's
// estimate and 56 decoded, were decoded whole in row groups of 2^20 rows,
// not sliced: 196 MiB at the 128 MiB limit named.
func raiseDecodeScale(tbl *source.Table, s float64) {
	if s >= DecodeScaleAbove && s > tbl.DecodeScale {
		tbl.DecodeScale = s
	}
}

// scaleFromDictionaries raises tbl.DecodeScale by the first non-empty row
// group's estimate with its dictionaries' headers read
// (source.File.DecodedEstimateOf): strings held as a dictionary are
// estimated from their statistics, and without statistics only from the
// dictionary page, before a row group is judged for slicing.
func scaleFromDictionaries(tbl *source.Table) {
	if ref, ok := firstRowGroup(tbl); ok {
		if est, err := ref.File.DecodedEstimateOf(ref.RowGroup); err == nil {
			raiseDecodeScale(tbl, float64(est)/float64(ref.Rows())/ref.File.EstimateRowBytes())
		}
	}
}

// firstRowGroup is the first non-empty row group: the sample's.
func firstRowGroup(tbl *source.Table) (source.RowGroupRef, bool) {
	for _, ref := range tbl.RowGroups() {
		if ref.Rows() > 0 {
			return ref, true
		}
	}
	return source.RowGroupRef{}, false
}

// readSample decodes the first non-empty input row group: the sample from
// which column encodings are chosen.
func readSample(ctx context.Context, tbl *source.Table) (arrow.RecordBatch, error) {
	for _, ref := range tbl.RowGroups() {
		if ref.Rows() <= 0 {
			continue
		}
		scaleFromDictionaries(tbl)
		// A large row group is decoded in slices (as the map tasks read
		// it), and only those that hold the rows choosing encodings, about
		// SliceAbove bytes of them at most: decoding the rest to drop it
		// took a 577 MiB row group of 1 MB binaries to 1.5 GiB before
		// the run could refuse the limit.
		n := SliceRowsOf(ref)
		if n == 0 {
			return tbl.Read(ctx, ref, nil, 2)
		}
		head := min(max(int64(SliceAbove/ref.File.DecodedRowBytes()), n), writer.SampleRows)
		recs, err := tbl.ReadSlicedHead(ctx, ref, nil, 2, n, head)
		if err != nil {
			return nil, err
		}
		keep, rows, bytes := 0, int64(0), int64(0)
		for keep < len(recs) && rows < writer.SampleRows && bytes < SliceAbove {
			rows += recs[keep].NumRows()
			bytes += partition.RecordBytes(recs[keep])
			keep++
		}
		for _, r := range recs[keep:] {
			r.Release()
		}
		if keep == 1 {
			return recs[0], nil
		}
		defer func() {
			for _, r := range recs[:keep] {
				r.Release()
			}
		}()
		return partition.JoinBatches(recs[:keep], memory.DefaultAllocator)
	}
	return nil, nil
}

// RowGroupBytes is a row group's stored bytes (its column chunks).
func RowGroupBytes(ref source.RowGroupRef) int64 {
	return ref.File.RowGroupBytes[ref.RowGroup]
}

// Check refuses a plan whose partitions do not fit its layout (plan.json
// is a file anyone may edit): the partitions, in order, tile the plan's
// rows, a flat partition's files are in the layout, a packed plan has one
// partition per layout file with at most one output file each.
func (p *Plan) Check() error {
	if p.Rows < 0 || p.UnitRows < 1 {
		return fmt.Errorf("%d rows in units of %d rows", p.Rows, p.UnitRows)
	}
	if err := p.checkSlices(); err != nil {
		return err
	}
	if err := checkLayout(p.Layout, p.Rows); err != nil {
		return err
	}
	nf := len(p.Layout.Files)
	if p.Packing != nil && len(p.Partitions) != nf {
		return fmt.Errorf("%d partitions for %d layout files", len(p.Partitions), nf)
	}
	var next int64
	packedFile := 0 // the next packed output file's number
	for j, pp := range p.Partitions {
		if pp.Start < 0 || pp.Rows < 0 || pp.Start > p.Rows || pp.Rows > p.Rows-pp.Start {
			return fmt.Errorf("partition %d: rows [%d, +%d) outside the plan's %d", j, pp.Start, pp.Rows, p.Rows)
		}
		if pp.Start != next {
			return fmt.Errorf("partition %d starts at row %d, where the partitions before it end at %d", j, pp.Start, next)
		}
		next += pp.Rows
		if pp.Rows > 0 && len(pp.Files) == 0 {
			return fmt.Errorf("partition %d holds rows but no file", j)
		}
		for _, f := range pp.Files {
			if f < 0 || (p.Packing == nil && f >= nf) {
				return fmt.Errorf("partition %d: file %d is not in the layout's %d", j, f, nf)
			}
		}
		if p.Packing != nil && len(pp.Files) > 1 {
			return fmt.Errorf("partition %d: %d files, a packed partition writes at most one", j, len(pp.Files))
		}
		// Packed partitions number their files in order, skipping the
		// empty ones.
		if p.Packing != nil && len(pp.Files) == 1 {
			if pp.Files[0] != packedFile {
				return fmt.Errorf("partition %d writes file %d, the next packed file is %d", j, pp.Files[0], packedFile)
			}
			packedFile++
		}
		// A flat partition is a run of layout files, its rows theirs.
		if p.Packing == nil && len(pp.Files) > 0 {
			first, last := p.Layout.Files[pp.Files[0]], p.Layout.Files[pp.Files[len(pp.Files)-1]]
			for k := 1; k < len(pp.Files); k++ {
				if pp.Files[k] != pp.Files[k-1]+1 {
					return fmt.Errorf("partition %d: files %v are not a run of the layout's", j, pp.Files)
				}
			}
			if first.Start != pp.Start || last.Start+last.Rows != pp.Start+pp.Rows {
				return fmt.Errorf("partition %d: rows [%d, +%d), its files [%d, %d)", j, pp.Start, pp.Rows, first.Start, last.Start+last.Rows)
			}
		}
	}
	if next != p.Rows {
		return fmt.Errorf("the partitions hold %d rows, the plan %d", next, p.Rows)
	}
	for t, j := range p.TaskStarts {
		if (t == 0 && j != 0) || (t > 0 && j <= p.TaskStarts[t-1]) || j >= len(p.Partitions) {
			return fmt.Errorf("reduce task %d starts at partition %d (tasks start at %v, of %d partitions)", t, j, p.TaskStarts, len(p.Partitions))
		}
	}
	if p.Packing != nil {
		return p.checkPacking()
	}
	return nil
}

// checkSlices refuses slices that do not tile the plan's rows in order.
func (p *Plan) checkSlices() error {
	var next int64
	for i, s := range p.Slices {
		if s.Start != next || s.Rows < 0 || s.Rows > p.Rows-next {
			return fmt.Errorf("slice %d: rows [%d, +%d), where the slices before it end at %d of %d", i, s.Start, s.Rows, next, p.Rows)
		}
		next += s.Rows
	}
	if next != p.Rows {
		return fmt.Errorf("the slices hold %d rows, the plan %d", next, p.Rows)
	}
	return nil
}

// checkLayout refuses a layout whose files, in order, do not tile rows,
// or whose row groups do not tile their file.
func checkLayout(l partition.Layout, rows int64) error {
	var next int64
	for k, f := range l.Files {
		if f.Start != next || f.Rows < 0 || f.Rows > rows-next {
			return fmt.Errorf("layout file %d: rows [%d, +%d), where the files before it end at %d of %d", k, f.Start, f.Rows, next, rows)
		}
		at := f.Start
		for g, rg := range f.RowGroups {
			if rg.Start != at || rg.Rows < 1 || rg.Rows > f.Start+f.Rows-at {
				return fmt.Errorf("layout file %d, row group %d: rows [%d, +%d), where the file's groups before it end at %d of [%d, +%d)", k, g, rg.Start, rg.Rows, at, f.Start, f.Rows)
			}
			at += rg.Rows
		}
		if at != f.Start+f.Rows {
			return fmt.Errorf("layout file %d: its row groups hold %d rows, the file %d", k, at-f.Start, f.Rows)
		}
		next += f.Rows
	}
	if next != rows {
		return fmt.Errorf("the layout's files hold %d rows, the plan %d", next, rows)
	}
	return nil
}

// checkPacking refuses query counts that do not add up: one count per
// slice, each within its slice's rows (a query has at least one item),
// summing to the plan's queries, which the partitions share out.
func (p *Plan) checkPacking() error {
	pk := p.Packing
	if pk.Items != p.Rows {
		return fmt.Errorf("packing: %d items, the plan %d rows", pk.Items, p.Rows)
	}
	if len(pk.PerSlice) != len(p.Slices) {
		return fmt.Errorf("packing: %d query counts for %d slices", len(pk.PerSlice), len(p.Slices))
	}
	var queries int64
	for i, q := range pk.PerSlice {
		if q < 0 || q > p.Slices[i].Rows || (q == 0) != (p.Slices[i].Rows == 0) {
			return fmt.Errorf("packing: slice %d has %d queries for %d rows", i, q, p.Slices[i].Rows)
		}
		queries += q
	}
	if queries != pk.Queries {
		return fmt.Errorf("packing: the slices hold %d queries, the plan %d", queries, pk.Queries)
	}
	var inParts int64
	for j, pp := range p.Partitions {
		if pp.Queries < 0 || pp.Queries > pp.Rows {
			return fmt.Errorf("partition %d: %d queries for %d items", j, pp.Queries, pp.Rows)
		}
		inParts += pp.Queries
	}
	if inParts != pk.Queries {
		return fmt.Errorf("the partitions hold %d queries, the plan %d", inParts, pk.Queries)
	}
	return nil
}
