package pipeline

import (
	"log/slog"
	"runtime"
	"strings"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/storage"
)

// RunOptions configures a run. Zero values take the documented defaults.
type RunOptions struct {
	// Inputs are local paths (files, folders, globs) or URLs.
	Inputs []string
	// HivePartitioning is "auto" (default: partition columns are read from
	// key=value folders when every input path has them), "on" or "off".
	HivePartitioning string
	// HiveTypes declares partition column types ("date=date,hour=int32");
	// undeclared ones are inferred (integers, dates, then strings).
	HiveTypes string
	// Output is a local folder or a URL prefix.
	Output string
	// OutputPartitioning is "flat" (default: parquet/part-NNNNN.parquet) or
	// "hive": files in partition folders of the first HiveKeys slice keys
	// (parquet/country=US/date=2026-11-30/part-NNNNN.parquet), those
	// columns left out of the files.
	OutputPartitioning string
	// HiveKeys is how many leading slice keys name folders (default all).
	HiveKeys int
	// Dataset, when set, is a dataset root that this run updates
	// (RunDataset) instead of writing Output: one part per value of
	// PartitionBy, the leading slice key; KeepPartitions (the newest N)
	// and Where (a filter on the partition key, "date >= 2026-11-01")
	// choose the window.
	Dataset        string
	PartitionBy    string
	KeepPartitions int
	Where          string
	// Parts, with Dataset, writes only these partitions' parts (folders as
	// the dry run lists them, date=2026-11-30) and commits no generation:
	// the fan-out step of a distributed nightly job, whose last step is a
	// plain dataset run that adopts the parts and commits.
	Parts []string
	// objects, when set, are the inputs already listed (a dataset part's
	// files), used instead of listing Inputs.
	objects []storage.Object
	// ForceFolders writes Hive folders even when they would be many and
	// tiny (more than MaxTinyFolders averaging under TinyFolderBytes).
	ForceFolders bool
	// SliceKeys and SortKeys name the columns rows are ordered by.
	SliceKeys []string
	SortKeys  []string
	// QueryKey, when set, packs each query once: one output row per query
	// with its query-level columns and `items`, a list of its items.
	QueryKey []string
	// QueryColumns names (or globs) the query-level columns; empty: every
	// column constant within every query ("auto").
	QueryColumns []string
	// ItemOrder orders items within a query (default: input position).
	ItemOrder []string
	// OnQueryConflict is "fail" (default: a declared query column that
	// varies inside a query is bad input) or "items" (move it to the items).
	OnQueryConflict string
	// MaxItemsPerQuery caps one query's items (default: what fits in a
	// quarter of the memory budget).
	MaxItemsPerQuery int64
	// Tensors also writes tensor shards (safetensors) under tensors/.
	Tensors bool
	// TensorSpec is a YAML tensor spec file (implies Tensors).
	TensorSpec string
	// ShardBytes is the target tensor shard size (default 256 MiB).
	ShardBytes int64
	// BlockSamples is the size of the canonical blocks a loader shuffles
	// and assigns (default 4096 samples).
	BlockSamples int64
	// ShardBlocks, when positive, cuts shards at every ShardBlocks-th
	// canonical block boundary instead of by ShardBytes: with 1, every
	// shard is one block, which a reader of object storage fetches in one
	// request instead of one per tensor (docs/loader.md).
	ShardBlocks int64
	// RowGroupBytes is the target uncompressed row-group size (default 128 MiB).
	RowGroupBytes int64
	// MinRowGroupBytes: slices at least this large own whole row groups
	// (default RowGroupBytes/8).
	MinRowGroupBytes int64
	// RowGroupRows caps rows per row group (default 1,048,576).
	RowGroupRows int64
	// FileBytes is the target file size (default 1 GiB).
	FileBytes int64
	// BoundaryKeys: row groups end where one of the first BoundaryKeys
	// slice keys changes (default 1; BoundaryKeysOff: no such rule).
	BoundaryKeys int
	// ZstdLevel (default 3) and PageBytes (default 1 MiB) tune encoding.
	ZstdLevel int
	PageBytes int64
	// MemoryLimit bounds memory (default 2 GiB); TmpDir holds spill files
	// (default the system temp folder).
	MemoryLimit int64
	TmpDir      string
	// UnitRows, when > 0, caps the rows gathered in memory at once instead of
	// deriving the cap from MemoryLimit: a way to force spilling on small
	// inputs (tests, debugging). The output does not depend on it.
	UnitRows int64
	// Parallel is the number of goroutines doing CPU work (default GOMAXPROCS).
	Parallel int
	// Together is how many tasks run at once in this process with these
	// options, each given its share of MemoryLimit and Parallel (a --task
	// list's --concurrent; 0 or 1: alone). Only the heap's advice for
	// huge pages reads it: the process's heap holds all of them.
	Together int
	// HugePages is whether a run that sorts its table in memory asks the
	// kernel for transparent huge pages for its heap: HugePagesAuto
	// (default; where the kernel grants them on request and does not give
	// free memory back to a hypervisor), HugePagesOn (wherever it grants
	// them) or HugePagesOff.
	// It changes speed and resident memory, never the output.
	HugePages string
	// Overwrite replaces an existing output.
	Overwrite bool
	// Check is how the output is checked before commit. CheckKeys (default)
	// compares the content fingerprint of the rows handed to the encoder with
	// the input's and re-reads footers, file hashes and key columns (row
	// counts, key order, slice index, statistics); CheckFull instead decodes
	// every written value again and fingerprints that; CheckNone only
	// compares the encoder-side fingerprint.
	Check string
	// Log receives progress and summaries (default: discard).
	Log *slog.Logger

	// autoRowGroupBytes and autoMinRowGroupBytes say the user set neither:
	// the plan may lower them to fit MemoryLimit (plan.FitMemory).
	autoRowGroupBytes, autoMinRowGroupBytes bool
	// autoFileBytes says the user did not set FileBytes: the plan may lower
	// it so that a file's footer fits MemoryLimit.
	autoFileBytes bool
	// Progress receives progress updates (may be nil).
	Progress Progress
	// ReportSlices is how many slices the report lists, largest first
	// (default 100; AllSlices: all).
	ReportSlices int
	// SampleRows bounds the rows a dry run decodes in full to estimate
	// sizes and decide query-level columns (default 16,384).
	SampleRows int64
	// sample marks the dry run's in-memory run on its sample: it leaves
	// the process's GC settings alone and writes no report. sampleOf, when
	// set, is the real input's bytes per row, which the sample's layout is
	// planned with (the sample file is stored plain, so its own footers
	// overstate them), so its row groups hold as many rows as the run's.
	sample   bool
	sampleOf *plan.Sizes
	// onPartition, when set (tests), is told of each partition run writes
	// as it starts: its index, how many are being written (it included),
	// their rows, and the rows several may hold together.
	onPartition func(j, writing int, rows, limit int64)
	// hive is the resolved partitioning of the input (hive.Partitioning's
	// Spec), set when the inputs are opened; it is part of the config.
	hive string
	// FailAfterFiles, when > 0, fails the run after that many files are
	// written: a fault-injection hook for tests.
	FailAfterFiles int
}

// Progress receives progress updates from long stages.
type Progress interface {
	// Start begins a stage of total units (rows or bytes).
	Start(stage string, total int64)
	// Add reports n more units done.
	Add(n int64)
	// Finish ends the stage.
	Finish()
}

type nopProgress struct{}

func (nopProgress) Start(string, int64) {}
func (nopProgress) Add(int64)           {}
func (nopProgress) Finish()             {}

// Check modes.
const (
	CheckFull = "full"
	CheckKeys = "keys"
	CheckNone = "none"
)

// The defaults a zero RunOptions field takes; the command line's flags
// show and use these same values.
const (
	DefaultRowGroupBytes = 128 << 20
	DefaultRowGroupRows  = 1 << 20
	DefaultFileBytes     = 1 << 30
	DefaultMemoryLimit   = 2 << 30
	// HugePagesAuto, HugePagesOn and HugePagesOff are the values of
	// RunOptions.HugePages.
	HugePagesAuto, HugePagesOn, HugePagesOff = "auto", "on", "off"
	DefaultShardBytes                        = 256 << 20
	DefaultBlockSamples                      = 4096
	DefaultReportSlices                      = 100
	DefaultSampleRows                        = 16 << 10
	DefaultBoundaryKeys                      = 1
	DefaultZstdLevel                         = 3
	DefaultPageBytes                         = 1 << 20
	DefaultCheck                             = CheckKeys
	DefaultOnConflict                        = "fail"
	// MaxTinyFolders and TinyFolderBytes: Hive output that would make more
	// folders than MaxTinyFolders, averaging under TinyFolderBytes of
	// output each, is refused unless forced (a folder per few rows makes
	// every reader open a file per few rows).
	MaxTinyFolders  = 1000
	TinyFolderBytes = 1 << 20
	// DefaultMapBytes is the input bytes per map task of a distributed plan.
	DefaultMapBytes = plan.DefaultMapBytes
)

// Named values for fields whose zero value means "the default".
const (
	// BoundaryKeysOff turns the boundary-keys rule off: row groups end
	// only where the layout's sizes say.
	BoundaryKeysOff = -1
	// AllSlices lists every slice in the report.
	AllSlices = -1
)

// CheckHugePages refuses a --huge-pages value other than auto, on and off
// (exit 2).
func CheckHugePages(v string) error {
	switch v {
	case HugePagesAuto, HugePagesOn, HugePagesOff:
		return nil
	}
	return errs.Usagef("--huge-pages must be auto, on or off (got %q)", v)
}

func (o RunOptions) withDefaults() (RunOptions, error) {
	if len(o.Inputs) == 0 {
		return o, errs.Usagef("no input: pass --input")
	}
	if o.Output == "" {
		return o, errs.Usagef("no output: pass --output")
	}
	clean := SplitList
	o.SliceKeys, o.SortKeys = clean(o.SliceKeys), clean(o.SortKeys)
	o.QueryKey, o.QueryColumns, o.ItemOrder = clean(o.QueryKey), clean(o.QueryColumns), clean(o.ItemOrder)
	if len(o.QueryColumns) == 1 && o.QueryColumns[0] == "auto" {
		o.QueryColumns = nil
	}
	if len(o.QueryKey) > 0 && len(o.SortKeys) > 0 {
		return o, errs.Usagef("--sort-keys cannot be combined with --query-key: order items with --item-order")
	}
	if len(o.QueryKey) == 0 && (len(o.QueryColumns) > 0 || len(o.ItemOrder) > 0) {
		return o, errs.Usagef("--query-columns and --item-order need --query-key")
	}
	switch o.OnQueryConflict {
	case "":
		o.OnQueryConflict = DefaultOnConflict
	case "fail", "items":
	default:
		return o, errs.Usagef("--on-query-conflict must be fail or items (got %q)", o.OnQueryConflict)
	}
	seen := map[string]bool{}
	for _, k := range append(append(append(append([]string{}, o.SliceKeys...), o.SortKeys...), o.QueryKey...), o.ItemOrder...) {
		if seen[k] {
			return o, errs.Usagef("column %q is named twice in --slice-keys, --sort-keys, --query-key or --item-order", k)
		}
		seen[k] = true
	}
	if o.TensorSpec != "" {
		o.Tensors = true
	}
	if o.ShardBytes == 0 {
		o.ShardBytes = DefaultShardBytes
	}
	if o.BlockSamples == 0 {
		o.BlockSamples = DefaultBlockSamples
	}
	if o.RowGroupBytes == 0 {
		o.RowGroupBytes, o.autoRowGroupBytes = DefaultRowGroupBytes, true
	}
	if o.MinRowGroupBytes == 0 {
		o.MinRowGroupBytes, o.autoMinRowGroupBytes = o.RowGroupBytes/8, true
	}
	if o.RowGroupRows == 0 {
		o.RowGroupRows = DefaultRowGroupRows
	}
	if o.FileBytes == 0 {
		o.FileBytes, o.autoFileBytes = DefaultFileBytes, true
	}
	switch {
	case o.BoundaryKeys == 0:
		o.BoundaryKeys = DefaultBoundaryKeys
	case o.BoundaryKeys == BoundaryKeysOff:
		o.BoundaryKeys = 0 // the plan's "no such rule"
	case o.BoundaryKeys < 0:
		return o, errs.Usagef("--boundary-keys must be 0 (off) or positive (got %d)", o.BoundaryKeys)
	}
	if o.BoundaryKeys > len(o.SliceKeys) {
		o.BoundaryKeys = len(o.SliceKeys)
	}
	switch o.OutputPartitioning {
	case "", "flat":
		o.OutputPartitioning = "flat"
		if o.HiveKeys != 0 {
			return o, errs.Usagef("--hive-keys needs --output-partitioning hive")
		}
	case "hive":
		if len(o.SliceKeys) == 0 {
			return o, errs.Usagef("--output-partitioning hive needs --slice-keys: the folders are the leading slice keys")
		}
		if o.HiveKeys == 0 {
			o.HiveKeys = len(o.SliceKeys)
		}
		if o.HiveKeys < 0 || o.HiveKeys > len(o.SliceKeys) {
			return o, errs.Usagef("--hive-keys must be between 1 and the %d slice keys (got %d)", len(o.SliceKeys), o.HiveKeys)
		}
	default:
		return o, errs.Usagef("--output-partitioning must be flat or hive (got %q)", o.OutputPartitioning)
	}
	if o.ZstdLevel == 0 {
		o.ZstdLevel = DefaultZstdLevel
	}
	if o.PageBytes == 0 {
		o.PageBytes = DefaultPageBytes
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.HugePages == "" {
		o.HugePages = HugePagesAuto
	}
	if err := CheckHugePages(o.HugePages); err != nil {
		return o, err
	}
	switch o.Check {
	case "":
		o.Check = DefaultCheck
	case CheckFull, CheckKeys, CheckNone:
	default:
		return o, errs.Usagef("--check must be full, keys or none (got %q)", o.Check)
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	if o.ReportSlices == 0 {
		o.ReportSlices = DefaultReportSlices
	}
	if o.SampleRows == 0 {
		o.SampleRows = DefaultSampleRows
	}
	var bad []string
	if o.RowGroupBytes < 0 {
		bad = append(bad, "--row-group-bytes must be positive")
	}
	if o.MinRowGroupBytes < 0 || o.MinRowGroupBytes > o.RowGroupBytes {
		bad = append(bad, "--min-row-group-bytes must be between 0 and --row-group-bytes")
	}
	if o.RowGroupRows < 0 {
		bad = append(bad, "--row-group-rows must be positive")
	}
	if o.FileBytes < 0 {
		bad = append(bad, "--file-bytes must be positive")
	}
	if o.ShardBytes < 0 {
		bad = append(bad, "--shard-bytes must be positive")
	}
	if o.BlockSamples < 0 {
		bad = append(bad, "--block-samples must be positive")
	}
	if o.ShardBlocks < 0 {
		bad = append(bad, "--shard-blocks must be positive")
	}
	if o.SampleRows < 0 {
		bad = append(bad, "--sample-rows must be positive")
	}
	if o.ZstdLevel < 1 || o.ZstdLevel > 22 {
		bad = append(bad, "--zstd-level must be between 1 and 22")
	}
	if o.MemoryLimit < 16<<20 {
		bad = append(bad, "--memory-limit must be at least 16MiB")
	}
	if len(bad) > 0 {
		return o, errs.Usagef("%s", strings.Join(bad, "; "))
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = nopProgress{}
	}
	return o, nil
}
