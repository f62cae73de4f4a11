package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/dataset"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/pipeline"
	"github.com/relayout/relayout/storage"
)

// datasetFlags are run's flags for a dataset root.
func datasetFlags() []cli.Flag {
	return []cli.Flag{
		strFlag("dataset", "", "update a dataset root instead of writing --output: one immutable part per value of --partition-by, generations committed last (docs/datasets.md)"),
		strFlag("partition-by", "", "with --dataset: the partition key (the leading slice key, e.g. date)"),
		intFlag("keep-partitions", 0, "with --dataset: keep only the newest N partitions in the new generation (0: all)"),
		strFlag("where", "", `with --dataset: keep only partitions passing a filter on the partition key, e.g. "date >= 2026-11-01"`),
		strFlag("parts-json", "", "with --dataset: also write the folders of the parts this run writes (new and changed) as a JSON array to this local path, e.g. for an Argo withParam fan-out over --part"),
		sliceFlag("part", "with --dataset: write only this partition's part (a folder the dry run lists, e.g. date=2026-11-30) and commit no generation; repeatable (the fan-out of a distributed nightly job)"),
	}
}

// runDataset is `relayout run --dataset`: the run (or its dry run) and a
// summary on stdout.
func runDataset(ctx context.Context, opts pipeline.RunOptions, dryRun bool, reportJSON, partsJSON string, stdout io.Writer) error {
	res, err := pipeline.RunDataset(ctx, opts, dryRun)
	if err != nil {
		return err
	}
	if partsJSON != "" {
		data, _ := json.Marshal(res.ToWrite)
		if err := os.WriteFile(partsJSON, append(data, '\n'), 0o644); err != nil {
			return errs.TransientErr(fmt.Errorf("write --parts-json %s: %w", partsJSON, err))
		}
	}
	if reportJSON != "" {
		data, _ := json.MarshalIndent(res, "", " ")
		if err := os.WriteFile(reportJSON, append(data, '\n'), 0o644); err != nil {
			return errs.TransientErr(fmt.Errorf("write --report-json %s: %w", reportJSON, err))
		}
	}
	g, ch := res.Generation, res.Generation.Changes
	verb := "committed generation"
	switch {
	case res.PartsOnly:
		fmt.Fprintf(stdout, "relayout: wrote the parts of %s in %.1fs (%s); commit with relayout run --dataset (no --part)\n",
			strings.Join(opts.Parts, ", "), res.Seconds, human(ch.BytesWritten))
		return nil
	case res.DryRun:
		verb = "dry run: would commit generation"
	case res.Unchanged:
		verb = "nothing changed: generation stays"
	}
	fmt.Fprintf(stdout, "relayout: %s %d of %s: %d parts (%d new, %d changed, %d reused, %d dropped), %d rows, %s\n",
		verb, g.Generation, opts.Dataset, len(g.Parts), len(ch.New), len(ch.Changed), len(ch.Reused), len(ch.Dropped), g.Totals.Rows, human(g.Totals.Bytes))
	fmt.Fprintf(stdout, "read %s of input (a full rewrite reads %s), wrote %s in %.1fs\n",
		human(ch.InputBytesRead), human(ch.FullInputBytes), human(ch.BytesWritten), res.Seconds)
	return nil
}

func gcCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		intFlag("keep", 1, "generations to keep, newest first (at least 1: the current one)"),
		boolFlag("json", "print the result as JSON"),
	}, logFlags()...)
	return &cli.Command{
		Name:         "gc",
		Usage:        "remove a dataset root's old generations and the parts no kept generation references",
		UsageText:    "relayout gc s3://bucket/ds/ --keep 7",
		Description:  "Never removes a part a kept generation references, nor one a running run is writing.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errs.Usagef("gc takes one dataset root")
			}
			res, err := pipeline.GCDataset(c.Context, c.Args().First(), c.Int("keep"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				data, _ := json.MarshalIndent(res, "", " ")
				fmt.Fprintln(c.App.Writer, string(data))
				return nil
			}
			fmt.Fprintf(c.App.Writer, "relayout: kept generations %v (%d parts); removed %d generations and %d parts\n",
				res.KeptGenerations, res.KeptParts, len(res.RemovedGenerations), len(res.RemovedParts))
			return nil
		},
	}
}

func filesCommand() *cli.Command {
	flags := append([]cli.Flag{
		configFlag(),
		intFlag("generation", 0, "the generation (default: the current one)"),
	}, logFlags()...)
	return &cli.Command{
		Name:         "files",
		Usage:        "print the URLs of a dataset generation's Parquet files, one per line",
		UsageText:    "relayout files s3://bucket/ds/ [--generation N] | xargs …",
		Description:  "For Spark, DuckDB or Trino to read exactly one generation.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errs.Usagef("files takes one dataset root")
			}
			urls, err := pipeline.DatasetFiles(c.Context, c.Args().First(), c.Int("generation"))
			if err != nil {
				return err
			}
			for _, u := range urls {
				fmt.Fprintln(c.App.Writer, u)
			}
			return nil
		},
	}
}

// isDatasetRoot reports whether a path or URL is a dataset root.
func isDatasetRoot(ctx context.Context, name string) bool {
	loc, err := storage.OpenDir(ctx, name, false)
	if err != nil {
		return false
	}
	ok, err := dataset.IsRoot(ctx, loc)
	return err == nil && ok
}

// printGenerations is `relayout inspect ROOT` on a dataset root.
func printGenerations(ctx context.Context, root string, asJSON bool, w io.Writer) error {
	loc, err := storage.OpenDir(ctx, root, false)
	if err != nil {
		return err
	}
	ns, err := dataset.List(ctx, loc)
	if err != nil {
		return err
	}
	var gens []*dataset.Generation
	for _, n := range ns {
		g, err := dataset.Load(ctx, loc, n)
		if err != nil {
			return err
		}
		gens = append(gens, g)
	}
	if asJSON {
		data, _ := json.MarshalIndent(map[string]any{"generations": gens}, "", " ")
		fmt.Fprintln(w, string(data))
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GENERATION\tPARTS\tROWS\tBYTES\tNEW\tCHANGED\tREUSED\tDROPPED\tFIRST\tLAST\t")
	for _, g := range gens {
		first, last := "", ""
		if len(g.Parts) > 0 {
			first, last = g.Parts[0].Folder, g.Parts[len(g.Parts)-1].Folder
		}
		ch := g.Changes
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", g.Generation, len(g.Parts), g.Totals.Rows, human(g.Totals.Bytes),
			len(ch.New), len(ch.Changed), len(ch.Reused), len(ch.Dropped), first, last)
	}
	tw.Flush()
	if len(gens) > 0 {
		fmt.Fprintf(w, "current: generation %d (partition key %s)\n", gens[len(gens)-1].Generation, strings.TrimSpace(gens[len(gens)-1].PartitionBy))
	}
	return nil
}
