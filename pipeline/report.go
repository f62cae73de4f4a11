package pipeline

import (
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
)

// ReportFileName is the run report's name in the output root. Unlike the
// manifest it holds timings and host facts, so it differs between runs.
const ReportFileName = "_report.json"

// Report describes how a command ran.
type Report struct {
	Command         string        `json:"command"`
	RelayoutVersion string        `json:"relayout_version"`
	StartedAt       string        `json:"started_at"`
	Host            ReportHost    `json:"host"`
	Settings        ReportSetting `json:"settings"`
	Input           ReportInput   `json:"input"`
	Output          ReportOutput  `json:"output"`
	Units           int           `json:"units"`
	SpillBytes      int64         `json:"spill_bytes"`
	Stages          []ReportStage `json:"stages"`
	Seconds         float64       `json:"seconds"`
	PeakRSSBytes    int64         `json:"peak_rss_bytes"`
}

// ReportHost describes the machine.
type ReportHost struct {
	Hostname string `json:"hostname"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	CPUs     int    `json:"cpus"`
	Go       string `json:"go"`
}

// ReportSetting holds the operational settings that do not change the output.
type ReportSetting struct {
	MemoryLimit int64  `json:"memory_limit"`
	Parallel    int    `json:"parallel"`
	TmpDir      string `json:"tmp_dir"`
}

// ReportInput sums the input.
type ReportInput struct {
	Files     int   `json:"files"`
	Bytes     int64 `json:"bytes"`
	Rows      int64 `json:"rows"`
	RowGroups int   `json:"row_groups"`
}

// ReportOutput sums the output.
type ReportOutput struct {
	ParquetFiles int   `json:"parquet_files"`
	RowGroups    int   `json:"row_groups"`
	ParquetBytes int64 `json:"parquet_bytes"`
	Rows         int64 `json:"rows"`
	Slices       int   `json:"slices"`
}

// ReportStage is one stage's wall time.
type ReportStage struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

func newReport(cmd string, o RunOptions) *Report {
	h, _ := os.Hostname()
	tmp := o.TmpDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	return &Report{
		Command: cmd, RelayoutVersion: version.Version,
		StartedAt: time.Now().UTC().Format(time.RFC3339),
		Host:      ReportHost{Hostname: h, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version()},
		Settings:  ReportSetting{MemoryLimit: o.MemoryLimit, Parallel: o.Parallel, TmpDir: tmp},
	}
}

func (r *Report) stage(name string, since time.Time) {
	r.Stages = append(r.Stages, ReportStage{Name: name, Seconds: time.Since(since).Seconds()})
}

func (r *Report) finish(t0 time.Time, m *manifests.Manifest) {
	r.Seconds = time.Since(t0).Seconds()
	r.Output = ReportOutput{ParquetFiles: m.Totals.Files, RowGroups: m.Totals.RowGroups, ParquetBytes: m.Totals.Bytes, Rows: m.Totals.Rows, Slices: m.Totals.Slices}
	r.PeakRSSBytes = PeakRSS()
}

// PeakRSS returns the process's peak resident set size in bytes.
func PeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}
