package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/pipeline"
	"github.com/relayout/relayout/report"
)

func runFlags() []cli.Flag {
	fs := []cli.Flag{
		configFlag(),
		sliceFlag("input", "input Parquet: local file, folder or glob, or URL (file://, mem://, s3://, gs://, azblob://) of an object or prefix; repeatable"),
		strFlag("hive-partitioning", "auto", "read partition columns from key=value folders of the input paths: auto (when every path has them), on, off"),
		strFlag("hive-types", "", "partition column types, e.g. date=date,hour=int32 (default: inferred: integers, dates, then strings)"),
		strFlag("output", "", "output folder or URL prefix"),
		strFlag("output-partitioning", "flat", "flat (parquet/part-NNNNN.parquet) or hive (parquet/k1=v1/k2=v2/part-NNNNN.parquet, folders of the leading slice keys, left out of the files)"),
		intFlag("hive-keys", 0, "with --output-partitioning hive: how many leading slice keys name folders (default: all)"),
		boolFlag("force-folders", "with --output-partitioning hive: write folders even if they are many and tiny"),
		sliceFlag("slice-keys", "columns whose values define slices (comma-separated), e.g. country,date"),
		sliceFlag("sort-keys", "columns that order rows inside a slice"),
		sliceFlag("query-key", "pack each query once: one row per value of these columns, with its items as a list"),
		sliceFlag("query-columns", "query-level columns (names or globs); default auto: every column constant within every query"),
		sliceFlag("item-order", "columns that order the items of a query (default: input order)"),
		strFlag("on-query-conflict", pipeline.DefaultOnConflict, "a declared query column that varies within a query: fail, or items (keep it per item)"),
		intFlag("max-items-per-query", 0, "largest query accepted (default: what fits a quarter of the memory budget)"),
		boolFlag("tensors", "also write tensor shards (safetensors) under tensors/ for zero-copy loaders"),
		strFlag("tensor-spec", "", "YAML tensor spec: group, cast, hash, rename and drop columns (implies --tensors)"),
		strFlag("shard-bytes", sizeString(pipeline.DefaultShardBytes), "target tensor shard size"),
		intFlag("block-samples", pipeline.DefaultBlockSamples, "samples per canonical block, the unit loaders shuffle and assign"),
		intFlag("shard-blocks", 0, "cut tensor shards every N canonical blocks instead of by --shard-bytes (1: a shard per block, one request per block from object storage)"),
		strFlag("row-group-bytes", sizeString(pipeline.DefaultRowGroupBytes), "target uncompressed row-group size (when not set, lowered as far as 1MiB to fit --memory-limit)"),
		strFlag("min-row-group-bytes", "", "slices at least this large own whole row groups (default: row-group-bytes/8)"),
		intFlag("row-group-rows", pipeline.DefaultRowGroupRows, "maximum rows per row group"),
		strFlag("file-bytes", sizeString(pipeline.DefaultFileBytes), "target output file size (when not set, lowered so that a file's footer metadata fits --memory-limit)"),
		intFlag("boundary-keys", pipeline.DefaultBoundaryKeys, "row groups always end where one of the first N slice keys changes (0: off)"),
		intFlag("zstd-level", pipeline.DefaultZstdLevel, "zstd compression level (1-22)"),
		strFlag("page-bytes", sizeString(pipeline.DefaultPageBytes), "target data page size"),
		strFlag("memory-limit", sizeString(pipeline.DefaultMemoryLimit), "memory budget; larger inputs are sorted in runs spilled to --tmp-dir"),
		strFlag("tmp-dir", "", "folder for spill files (default: system temp folder)"),
		intFlag("parallel", 0, "goroutines doing CPU work (default: number of CPUs)"),
		strFlag("huge-pages", pipeline.HugePagesAuto, "a table sorted in memory: auto (ask Linux for transparent huge pages for the heap where it grants them on request, does not give free memory back to a hypervisor or makes 4 KiB page faults dear, and --memory-limit is at least 512MiB: fewer page faults), on (also where it does not) or off"),
		boolFlag("overwrite", "replace an existing output"),
		strFlag("check", pipeline.DefaultCheck, "before commit: keys (fingerprint of the rows encoded vs the input's; re-read footers, file hashes, key order, slice index, statistics), full (also decode every written value again) or none"),
		strFlag("report-json", "", "also write the run report (JSON, docs/report.md) to this local path"),
		boolFlag("dry-run", "estimate output sizes, per-slice read savings, packing, transfer and resources; write nothing under --output"),
		intFlag("sample-rows", pipeline.DefaultSampleRows, "dry run: rows decoded in full to estimate sizes and query-level columns"),
		intFlag("report-slices", pipeline.DefaultReportSlices, "slices listed in the report, largest first (0: all)"),
	}
	fs = append(fs, datasetFlags()...)
	return append(fs, logFlags()...)
}

func runCommand() *cli.Command {
	flags := runFlags()
	return &cli.Command{
		Name:      "run",
		Usage:     "re-lay inputs out so each slice is contiguous row groups; write manifest.json last",
		UsageText: "relayout run --input ./events/ --output ./relaid/ --slice-keys country,date",
		Description: "Writes <output>/parquet/part-NNNNN.parquet, then <output>/manifest.json (the commit\n" +
			"point) and <output>/_report.json (timings). Every run re-reads its output and checks\n" +
			"row counts, key order and the content fingerprint before committing.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return errs.Usagef("run takes no arguments (got %q); use --input", c.Args().First())
			}
			opts, err := runOptions(c)
			if err != nil {
				return err
			}
			if opts.Dataset != "" {
				return runDataset(c.Context, opts, c.Bool("dry-run"), c.String("report-json"), c.String("parts-json"), c.App.Writer)
			}
			if c.Bool("dry-run") {
				return runDryRun(c.Context, opts, c.String("report-json"), c.App.Writer)
			}
			return runRun(c.Context, opts, c.String("report-json"), c.App.Writer)
		},
	}
}

// runRun is `relayout run`: the run, its report (also to reportJSON when
// set) and its summary on stdout.
func runRun(ctx context.Context, opts pipeline.RunOptions, reportJSON string, stdout io.Writer) error {
	res, err := pipeline.Run(ctx, opts)
	if err != nil {
		return err
	}
	if err := writeReportJSON(reportJSON, res.Report); err != nil {
		// Committed: a retry would only find the manifest (exit 5). The
		// report is in <output>/_report.json too.
		opts.Log.Warn("the run committed, but --report-json could not be written", "err", err)
	}
	printRunSummary(stdout, res)
	return nil
}

// runDryRun is `relayout run --dry-run`: the estimate, as a report.
func runDryRun(ctx context.Context, opts pipeline.RunOptions, reportJSON string, stdout io.Writer) error {
	rep, err := pipeline.DryRun(ctx, opts)
	if err != nil {
		return err
	}
	if err := writeReportJSON(reportJSON, rep); err != nil {
		return err
	}
	printDryRun(stdout, rep)
	return nil
}

// runOptions reads the run flags (run and plan share them).
func runOptions(c *cli.Context) (pipeline.RunOptions, error) {
	var opts pipeline.RunOptions
	log, err := newLogger(c, os.Stderr)
	if err != nil {
		return opts, err
	}
	opts = pipeline.RunOptions{
		Inputs:             c.StringSlice("input"),
		Output:             c.String("output"),
		HivePartitioning:   c.String("hive-partitioning"),
		HiveTypes:          c.String("hive-types"),
		OutputPartitioning: c.String("output-partitioning"),
		HiveKeys:           c.Int("hive-keys"),
		ForceFolders:       c.Bool("force-folders"),
		Dataset:            c.String("dataset"),
		PartitionBy:        c.String("partition-by"),
		KeepPartitions:     c.Int("keep-partitions"),
		Where:              c.String("where"),
		Parts:              pipeline.SplitList(c.StringSlice("part")),
		SliceKeys:          pipeline.SplitList(c.StringSlice("slice-keys")),
		SortKeys:           pipeline.SplitList(c.StringSlice("sort-keys")),
		RowGroupRows:       int64(c.Int("row-group-rows")),
		BoundaryKeys:       boundaryKeys(c.Int("boundary-keys")),
		ZstdLevel:          c.Int("zstd-level"),
		TmpDir:             c.String("tmp-dir"),
		Parallel:           c.Int("parallel"),
		HugePages:          c.String("huge-pages"),
		Overwrite:          c.Bool("overwrite"),
		Check:              c.String("check"),
		QueryKey:           pipeline.SplitList(c.StringSlice("query-key")),
		QueryColumns:       pipeline.SplitList(c.StringSlice("query-columns")),
		ItemOrder:          pipeline.SplitList(c.StringSlice("item-order")),
		OnQueryConflict:    c.String("on-query-conflict"),
		MaxItemsPerQuery:   int64(c.Int("max-items-per-query")),
		Tensors:            c.Bool("tensors"),
		TensorSpec:         c.String("tensor-spec"),
		BlockSamples:       int64(c.Int("block-samples")),
		ShardBlocks:        int64(c.Int("shard-blocks")),
		SampleRows:         int64(c.Int("sample-rows")),
		ReportSlices:       reportSlices(c.Int("report-slices")),
		Log:                log,
		Progress:           newProgress(c, log),
	}
	for _, s := range []struct {
		flag string
		dst  *int64
		min  int64 // when set (0: any size)
	}{
		{"row-group-bytes", &opts.RowGroupBytes, 64 << 10}, {"min-row-group-bytes", &opts.MinRowGroupBytes, 0},
		{"file-bytes", &opts.FileBytes, 64 << 10}, {"page-bytes", &opts.PageBytes, 4 << 10}, {"memory-limit", &opts.MemoryLimit, 16 << 20},
		{"shard-bytes", &opts.ShardBytes, 16 << 10},
	} {
		if (s.flag == "row-group-bytes" || s.flag == "file-bytes") && !c.IsSet(s.flag) {
			continue // the library's default, which the plan may lower to fit --memory-limit
		}
		if *s.dst, err = parseSize(s.flag, c.String(s.flag)); err != nil {
			return opts, err
		}
		if s.min > 0 && c.IsSet(s.flag) && *s.dst < s.min {
			return opts, errs.Usagef("--%s %s: must be at least %s", s.flag, c.String(s.flag), human(s.min))
		}
	}
	if c.IsSet("shard-bytes") && c.Int("shard-blocks") > 0 {
		return opts, errs.Usagef("--shard-bytes and --shard-blocks both given: shards are cut by size or by blocks; pass one")
	}
	return opts, checkRunFlags(c, opts)
}

// checkRunFlags refuses values that the library would read as "default"
// or that make no sense, naming the flag (exit 2).
func checkRunFlags(c *cli.Context, opts pipeline.RunOptions) error {
	for _, f := range []struct {
		flag string
		min  int
	}{{"row-group-rows", 1024}, {"parallel", 0}, {"boundary-keys", 0}, {"block-samples", 1}, {"sample-rows", 1},
		{"max-items-per-query", 0}, {"report-slices", 0}, {"shard-blocks", 0}} {
		if c.IsSet(f.flag) && c.Int(f.flag) < f.min {
			return errs.Usagef("--%s %d: must be at least %d", f.flag, c.Int(f.flag), f.min)
		}
	}
	if n := c.Int("boundary-keys"); c.IsSet("boundary-keys") && n > len(opts.SliceKeys) {
		return errs.Usagef("--boundary-keys %d: there are only %d slice keys (--slice-keys %s)", n, len(opts.SliceKeys), strings.Join(opts.SliceKeys, ","))
	}
	if d := opts.TmpDir; d != "" {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return errs.Usagef("--tmp-dir %s: no such folder (create it, or leave the flag out for the system's temp folder)", d)
		}
	}
	if p := c.String("report-json"); p != "" {
		dir := filepath.Dir(p)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return errs.Usagef("--report-json %s: folder %s does not exist", p, dir)
		}
		if f, err := os.CreateTemp(dir, ".relayout-report-*"); err != nil {
			return errs.Usagef("--report-json %s: cannot write in %s: %v", p, dir, err)
		} else {
			f.Close()
			os.Remove(f.Name())
		}
	}
	return nil
}

// writeReportJSON writes the report to a local path ("" : nowhere).
func writeReportJSON(path string, rep *report.Report) error {
	if path == "" {
		return nil
	}
	data, _ := json.MarshalIndent(rep, "", " ")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return errs.TransientErr(fmt.Errorf("write --report-json %s: %w", path, err))
	}
	return nil
}

// reportSlices maps the flag (0 = all) to RunOptions (0 = default, <0 = all).
// reportSlices maps the flag's 0 (all) to the library's AllSlices.
func reportSlices(v int) int {
	if v <= 0 {
		return pipeline.AllSlices
	}
	return v
}

// sizeString writes a byte count as the size flags parse it ("256MiB").
func sizeString(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprintf("%d", n)
}

func printRunSummary(w io.Writer, res *pipeline.Result) {
	m, r := res.Manifest, res.Report
	fmt.Fprintf(w, "relayout: %d rows from %d input files (%s) -> %d files, %d row groups, %d slices (%s) in %.1fs\n",
		r.Input.Rows, r.Input.Files, human(r.Input.Bytes), m.Totals.Files, m.Totals.RowGroups, m.Totals.Slices, human(m.Totals.Bytes), r.Seconds)
	if p := m.Packing; p != nil {
		fmt.Fprintf(w, "packed %d items into %d queries by %s (items per query: min %d, p50 %d, p99 %d, max %d); query-level columns: %s\n",
			p.Items, p.Queries, strings.Join(p.QueryKey, ","), p.ItemsPerQuery.Min, p.ItemsPerQuery.P50, p.ItemsPerQuery.P99, p.ItemsPerQuery.Max, strings.Join(p.QueryColumns, ","))
	}
	if t := m.Tensors; t != nil {
		fmt.Fprintf(w, "tensors: %d shards (%s), %d tensors per shard, %d samples (%s level)\n", t.Totals.Shards, human(t.Totals.Bytes), len(t.Schema), t.Totals.Rows, t.Sample)
	}
	fmt.Fprintf(w, "fingerprint %s over %d rows (input = output); peak RSS %s; spilled %s in %d units\n",
		m.Fingerprint.Hash, m.Fingerprint.Rows, human(r.PeakRSSBytes), human(r.SpillBytes), r.Units)
}

func human(b int64) string { return report.HumanBytes(b) }

// boundaryKeys maps the flag (0 = off) to RunOptions (0 = default, <0 = off).
// boundaryKeys maps the flag's 0 (off) to the library's BoundaryKeysOff.
func boundaryKeys(v int) int {
	if v <= 0 {
		return pipeline.BoundaryKeysOff
	}
	return v
}
