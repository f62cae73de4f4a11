package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// report is the part of relayout's report (docs/report.md) the benchmark
// reads.
type report struct {
	Output struct {
		ParquetBytes int64 `json:"parquet_bytes"`
		TensorBytes  int64 `json:"tensor_bytes"`
		RowGroups    int   `json:"row_groups"`
		Rows         int64 `json:"rows"`
	} `json:"output"`
	Slices struct {
		List []struct {
			Key             map[string]any `json:"key"`
			Rows            int64          `json:"rows"`
			ReadBytesBefore int64          `json:"read_bytes_before"`
			ReadBytesAfter  int64          `json:"read_bytes_after"`
		} `json:"list"`
	} `json:"slices"`
	Cost struct {
		BytesRead int64   `json:"bytes_read"`
		Requests  int64   `json:"requests"`
		Seconds   float64 `json:"seconds"`
	} `json:"cost"`
	Resources struct {
		MemoryBytes int64   `json:"memory_bytes"`
		Seconds     float64 `json:"seconds"`
	} `json:"resources"`
	Input struct {
		Bytes int64 `json:"bytes"`
	} `json:"input"`
	PeakRSS int64   `json:"peak_rss_bytes"`
	Seconds float64 `json:"seconds"`
}

func readReport(path string) report {
	var r report
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	json.Unmarshal(data, &r)
	return r
}

// dryRunBench measures the dry run of issue 5: its cost against the real
// run's (median time, peak RSS, input bytes read) and its accuracy against
// the real run's report and against DuckDB's bytes read per slice.
func dryRunBench(dir, in string, reps int, res map[string]any) {
	fmt.Printf("\n== dry run: cost and accuracy (median of %d)\n", reps)
	fmt.Printf("%-16s %9s %9s %8s %9s %10s %10s %10s %12s %12s\n", "config", "dry s", "run s", "time", "dry RSS", "read", "parquet", "tensors", "slice after", "vs DuckDB")
	out := map[string]any{}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"flat", []string{"--slice-keys", "country,date"}},
		{"packed+tensors", []string{"--slice-keys", "country,date", "--query-key", "query_id", "--tensors"}},
	} {
		dst := filepath.Join(dir, "dry-"+strings.ReplaceAll(c.name, "+", "-"))
		dryJSON := dst + "-dry.json"
		base := append([]string{"run", "--quiet", "--overwrite", "--input", in, "--output", dst, "--report-slices", "0"}, c.args...)
		var dm, rm []measure
		for i := 0; i < reps; i++ {
			m, _ := timed("bin/relayout", append(append([]string{}, base...), "--dry-run", "--report-json", dryJSON)...)
			dm = append(dm, m)
			m, _ = timed("bin/relayout", base...)
			rm = append(rm, m)
		}
		d, r := median(dm), median(rm)
		dry, real := readReport(dryJSON), readReport(filepath.Join(dst, "_report.json"))
		// Per slice: the dry run's read bytes after against the run's, and
		// against DuckDB's reads of six slices from largest to smallest.
		realAfter := map[string]int64{}
		for _, s := range real.Slices.List {
			realAfter[fmt.Sprint(s.Key)] = s.ReadBytesAfter
		}
		var worstSlice float64
		for _, s := range dry.Slices.List {
			if w := realAfter[fmt.Sprint(s.Key)]; w > 0 {
				worstSlice = math.Max(worstSlice, math.Abs(float64(s.ReadBytesAfter)/float64(w)-1))
			}
		}
		list := append(dry.Slices.List[:0:0], dry.Slices.List...)
		sort.SliceStable(list, func(a, b int) bool { return list[a].Rows > list[b].Rows })
		var picked []int
		for i := 0; i < 6 && len(list) > 0; i++ {
			picked = append(picked, i*(len(list)-1)/5)
		}
		sqls := []string{"SET enable_external_file_cache = false"}
		for _, glob := range []string{in + "/*.parquet", dst + "/parquet/*.parquet"} {
			for _, k := range picked {
				var conds []string
				for name, v := range list[k].Key {
					conds = append(conds, fmt.Sprintf("%s = '%v'", name, v))
				}
				sort.Strings(conds)
				sqls = append(sqls, fmt.Sprintf("CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM read_parquet('%s') WHERE %s", glob, strings.Join(conds, " AND ")))
			}
		}
		_, reads := duck(sqls...)
		var worstDuck float64
		var duckRows []map[string]any
		for i, k := range picked {
			s := list[k]
			before, after := reads[1+i], reads[1+len(picked)+i]
			eb, ea := float64(s.ReadBytesBefore)/float64(before)-1, float64(s.ReadBytesAfter)/float64(after)-1
			worstDuck = math.Max(worstDuck, math.Max(math.Abs(eb), math.Abs(ea)))
			duckRows = append(duckRows, map[string]any{"key": s.Key, "rows": s.Rows, "duckdb_before": before, "estimate_before": s.ReadBytesBefore, "duckdb_after": after, "estimate_after": s.ReadBytesAfter})
		}
		pct := func(est, got int64) string {
			if got == 0 {
				return "-"
			}
			return fmt.Sprintf("%+.1f%%", 100*(float64(est)/float64(got)-1))
		}
		fmt.Printf("%-16s %9.3f %9.2f %7.1f%% %8.0fM %9.1f%% %10s %10s %11.1f%% %11.1f%%\n", c.name, d.Seconds, r.Seconds, 100*d.Seconds/r.Seconds,
			float64(d.RSS)/1e6, 100*float64(dry.Cost.BytesRead)/float64(dry.Input.Bytes),
			pct(dry.Output.ParquetBytes, real.Output.ParquetBytes), pct(dry.Output.TensorBytes, real.Output.TensorBytes), 100*worstSlice, 100*worstDuck)
		fmt.Printf("%-16s estimated run: %.1f s, %.0f MB; measured %.1f s, %.0f MB\n", "", dry.Resources.Seconds, float64(dry.Resources.MemoryBytes)/1e6, r.Seconds, float64(r.RSS)/1e6)
		out[c.name] = map[string]any{"dry": d, "run": r, "time_ratio": d.Seconds / r.Seconds, "bytes_read": dry.Cost.BytesRead, "input_bytes": dry.Input.Bytes,
			"parquet_bytes": []int64{dry.Output.ParquetBytes, real.Output.ParquetBytes}, "tensor_bytes": []int64{dry.Output.TensorBytes, real.Output.TensorBytes},
			"worst_slice_after_vs_run": worstSlice, "worst_slice_vs_duckdb": worstDuck, "duckdb_slices": duckRows,
			"estimated_run": dry.Resources, "measured_run": r}
	}
	fmt.Printf("targets: time <= 10%% of the run, read <= 10%% of the input, sizes within 10%%, per-slice read bytes within 25%% of DuckDB's\n")
	res["dry_run"] = out
}
