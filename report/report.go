package report

import (
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
)

// FileName is the run report's name in the output root. Unlike the
// manifest it holds timings and host facts, so it differs between runs.
const FileName = "_report.json"

// Format and FormatVersion name the report's schema
// (docs/report.md; manifests/report.schema.json). The version changes when
// a field changes meaning or goes away, not when one is added.
const (
	Format        = "relayout-report"
	FormatVersion = 1
)

// Report describes what a command did (run) or would do (dry run). A dry
// run's report and the real run's _report.json share this schema, so the
// estimate and the outcome compare field by field; Estimate says which one
// this is.
type Report struct {
	Format          string  `json:"format"`
	FormatVersion   int     `json:"format_version"`
	Command         string  `json:"command"`
	Estimate        bool    `json:"estimate"`
	RelayoutVersion string  `json:"relayout_version"`
	StartedAt       string  `json:"started_at"`
	ConfigHash      string  `json:"config_hash"`
	Host            Host    `json:"host"`
	Settings        Setting `json:"settings"`
	Input           Input   `json:"input"`
	Output          Output  `json:"output"`
	Slices          Slices  `json:"slices"`
	// Packing and Transfer are set for packed runs and tensor runs.
	Packing   *Packing  `json:"packing,omitempty"`
	Transfer  *Transfer `json:"transfer,omitempty"`
	Cost      Cost      `json:"cost"`
	Resources Resources `json:"resources"`
	Warnings  []Warning `json:"warnings"`
	// Units, SpillBytes and Stages describe how a real run went.
	Units        int     `json:"units"`
	SpillBytes   int64   `json:"spill_bytes"`
	Stages       []Stage `json:"stages"`
	Seconds      float64 `json:"seconds"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
}

// Slices lists slices with what reading each costs a reader that
// prunes row groups by their statistics (DuckDB, Spark, pyarrow), for
// SELECT * WHERE <slice>: before (the input) and after (the output).
type Slices struct {
	// Count is the number of slices; Listed how many List holds (the
	// largest by rows, largest first).
	Count  int         `json:"count"`
	Listed int         `json:"listed"`
	Totals SliceTotals `json:"totals"`
	List   []Slice     `json:"list"`
}

// SliceTotals sums every slice (listed or not).
type SliceTotals struct {
	Rows            int64 `json:"rows"`
	Queries         int64 `json:"queries,omitempty"`
	ReadBytesBefore int64 `json:"read_bytes_before"`
	ReadBytesAfter  int64 `json:"read_bytes_after"`
	RowGroupsBefore int64 `json:"row_groups_before"`
	RowGroupsAfter  int64 `json:"row_groups_after"`
	// ReadReduction is ReadBytesBefore / ReadBytesAfter: how many times less
	// reading every slice once costs after the re-layout.
	ReadReduction float64 `json:"read_reduction"`
}

// Slice is one slice. Rows are input rows; Queries the packed rows
// when packing. Read bytes include every file's footer.
type Slice struct {
	Key             manifests.KeyValues `json:"key"`
	Rows            int64               `json:"rows"`
	Queries         int64               `json:"queries,omitempty"`
	ReadBytesBefore int64               `json:"read_bytes_before"`
	ReadBytesAfter  int64               `json:"read_bytes_after"`
	RowGroupsBefore int                 `json:"row_groups_before"`
	RowGroupsAfter  int                 `json:"row_groups_after"`
}

// Packing describes query packing.
type Packing struct {
	Rows          int64                  `json:"rows"`
	Queries       int64                  `json:"queries"`
	ItemsPerQuery manifests.Distribution `json:"items_per_query"`
	QueryColumns  []string               `json:"query_columns"`
	ItemColumns   []string               `json:"item_columns"`
	MovedToItems  []string               `json:"moved_to_items"`
	// BytesBefore is the input's bytes, BytesAfter the packed output's;
	// ParquetBytesSaved their difference.
	BytesBefore       int64 `json:"bytes_before"`
	BytesAfter        int64 `json:"bytes_after"`
	ParquetBytesSaved int64 `json:"parquet_bytes_saved"`
}

// Transfer is the tensor bytes a loader moves per epoch (data only,
// no headers): Unpacked repeats the query-level tensors on every item, as a
// flat layout does; Packed sends them once per query, with the offsets.
type Transfer struct {
	UnpackedBytes int64   `json:"unpacked_bytes"`
	PackedBytes   int64   `json:"packed_bytes"`
	Ratio         float64 `json:"ratio"`
}

// Cost is what the command itself read from the input.
type Cost struct {
	BytesRead int64   `json:"bytes_read"`
	Requests  int64   `json:"requests"`
	Seconds   float64 `json:"seconds"`
	// SampleRows is how many rows a dry run decoded in full.
	SampleRows int64 `json:"sample_rows,omitempty"`
}

// Resources is what the real run needs (dry run: estimated) or used
// (run: measured).
type Resources struct {
	MemoryBytes   int64   `json:"memory_bytes"`
	TempDiskBytes int64   `json:"temp_disk_bytes"`
	Seconds       float64 `json:"seconds"`
}

// Warning is something a user should know before scheduling the run.
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Host describes the machine.
type Host struct {
	Hostname string `json:"hostname"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	CPUs     int    `json:"cpus"`
	Go       string `json:"go"`
}

// Setting holds the operational settings that do not change the output.
type Setting struct {
	MemoryLimit int64  `json:"memory_limit"`
	Parallel    int    `json:"parallel"`
	TmpDir      string `json:"tmp_dir"`
}

// Input sums the input.
type Input struct {
	Files     int   `json:"files"`
	Bytes     int64 `json:"bytes"`
	Rows      int64 `json:"rows"`
	RowGroups int   `json:"row_groups"`
}

// Output sums the output.
type Output struct {
	ParquetFiles int   `json:"parquet_files"`
	RowGroups    int   `json:"row_groups"`
	ParquetBytes int64 `json:"parquet_bytes"`
	Rows         int64 `json:"rows"`
	Slices       int   `json:"slices"`
	Shards       int   `json:"shards"`
	TensorBytes  int64 `json:"tensor_bytes"`
}

// Stage is one stage's wall time.
type Stage struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// New starts the report of a command run with these resources.
func New(cmd string, memoryLimit int64, parallel int, tmpDir string) *Report {
	h, _ := os.Hostname()
	tmp := tmpDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	return &Report{
		Format: Format, FormatVersion: FormatVersion, Warnings: []Warning{},
		Slices: Slices{List: []Slice{}}, Stages: []Stage{},
		Command: cmd, RelayoutVersion: version.Version,
		StartedAt: time.Now().UTC().Format(time.RFC3339),
		Host:      Host{Hostname: h, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()},
		Settings:  Setting{MemoryLimit: memoryLimit, Parallel: parallel, TmpDir: tmp},
	}
}

// AddStage records a stage that started at since and ends now.
func (r *Report) AddStage(name string, since time.Time) {
	r.Stages = append(r.Stages, Stage{Name: name, Seconds: time.Since(since).Seconds()})
}

// Finish records the totals of the committed output m and the resources
// used since t0.
func (r *Report) Finish(t0 time.Time, m *manifests.Manifest) {
	r.Seconds = time.Since(t0).Seconds()
	r.Output = Output{ParquetFiles: m.Totals.Files, RowGroups: m.Totals.RowGroups, ParquetBytes: m.Totals.Bytes, Rows: m.Totals.Rows, Slices: m.Totals.Slices}
	if m.Tensors != nil {
		r.Output.Shards, r.Output.TensorBytes = m.Tensors.Totals.Shards, m.Tensors.Totals.Bytes
	}
	r.PeakRSSBytes = PeakRSS()
	r.Cost.Seconds = r.Seconds
	r.Resources = Resources{MemoryBytes: r.PeakRSSBytes, TempDiskBytes: r.SpillBytes, Seconds: r.Seconds}
}

// PeakRSS returns the process's peak resident set size in bytes.
func PeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}
