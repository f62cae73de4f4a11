package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/relayout/relayout/report"
)

// printDryRun prints a dry run's report for people: what the run would
// write, what reading slices costs before and after, packing, transfer,
// what the run needs and what the estimate itself cost.
func printDryRun(w io.Writer, r *report.Report) {
	fmt.Fprintf(w, "dry run: nothing written. Estimated from footers, key columns and %d sampled rows.\n\n", r.Cost.SampleRows)
	row := func(name, before, after string) { fmt.Fprintf(w, "  %-28s %18s %18s\n", name, before, after) }
	row("", "input", "output (est.)")
	row("files", fmt.Sprint(r.Input.Files), fmt.Sprint(r.Output.ParquetFiles))
	row("row groups", fmt.Sprint(r.Input.RowGroups), fmt.Sprint(r.Output.RowGroups))
	row("rows", fmt.Sprint(r.Input.Rows), fmt.Sprint(r.Output.Rows))
	row("parquet bytes", human(r.Input.Bytes), human(r.Output.ParquetBytes))
	if r.Output.Shards > 0 {
		row("tensor shards", "", fmt.Sprintf("%d (%s)", r.Output.Shards, human(r.Output.TensorBytes)))
	}
	if t := r.Slices.Totals; r.Slices.Count > 0 {
		fmt.Fprintf(w, "\n  %d slices; reading each once (SELECT * WHERE <slice>, row groups pruned by statistics):\n", r.Slices.Count)
		row("read bytes, all slices", human(t.ReadBytesBefore), human(t.ReadBytesAfter))
		row("row groups read", fmt.Sprint(t.RowGroupsBefore), fmt.Sprint(t.RowGroupsAfter))
		fmt.Fprintf(w, "  %-28s %37.1fx less\n", "", t.ReadReduction)
		n := min(len(r.Slices.List), 5)
		if n > 0 {
			fmt.Fprintf(w, "\n  largest slices%s\n", strings.Repeat(" ", 16))
			for _, s := range r.Slices.List[:n] {
				var k []string
				for _, kv := range s.Key {
					k = append(k, kv.Name+"="+shown(kv.Value))
				}
				row(fmt.Sprintf("%s (%d rows)", strings.Join(k, ","), s.Rows), human(s.ReadBytesBefore), human(s.ReadBytesAfter))
			}
		}
	}
	if p := r.Packing; p != nil {
		fmt.Fprintf(w, "\n  packing: %d rows into %d queries (items per query p50 %d, p99 %d, max %d); %d query-level columns, %d item columns\n",
			p.Rows, p.Queries, p.ItemsPerQuery.P50, p.ItemsPerQuery.P99, p.ItemsPerQuery.Max, len(p.QueryColumns), len(p.ItemColumns))
	}
	if t := r.Transfer; t != nil {
		fmt.Fprintf(w, "  tensor transfer per epoch: %s unpacked, %s packed (%.2fx less)\n", human(t.UnpackedBytes), human(t.PackedBytes), t.Ratio)
	}
	fmt.Fprintf(w, "\n  the run needs about %s of memory, %s of temp disk and %.0f s here\n",
		human(r.Resources.MemoryBytes), human(r.Resources.TempDiskBytes), r.Resources.Seconds)
	fmt.Fprintf(w, "  this estimate read %s in %d requests (%.1f%% of the input) in %.2f s\n",
		human(r.Cost.BytesRead), r.Cost.Requests, 100*float64(r.Cost.BytesRead)/float64(max(r.Input.Bytes, 1)), r.Cost.Seconds)
	for _, wn := range r.Warnings {
		fmt.Fprintf(w, "warning (%s): %s\n", wn.Code, wn.Message)
	}
}
