package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/relayout/relayout/internal/gen"
)

// smallFilesBench measures the job on a table of many small files, as
// streaming ingestion writes them (BENCH_SMALLFILES files of 20 rows,
// default 10,000): `relayout run` in memory and at --memory-limit 128MiB
// against DuckDB's ORDER BY COPY and Polars' sort + write, in a rotating
// order, medians of reps.
func smallFilesBench(dir string, reps int, res map[string]any) {
	files := envInt("BENCH_SMALLFILES", 10_000)
	in := filepath.Join(dir, fmt.Sprintf("small-%d", files))
	if _, err := os.Stat(in); err != nil {
		fmt.Printf("generating %d files of 20 rows...\n", files)
		if _, err := gen.Write(in, gen.Options{Rows: files * 20, Files: int(files), Seed: 1}); err != nil {
			panic(err)
		}
	}
	out := filepath.Join(dir, "small-relaid")
	duckOut := filepath.Join(dir, "small-duckdb.parquet")
	polarsOut := filepath.Join(dir, "small-polars.parquet")
	var rl, rc, dk, pl []measure
	rotated(reps, func() {
		m, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", out, "--slice-keys", "country,date")
		rl = append(rl, m)
	}, func() {
		m, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", out+"-128", "--slice-keys", "country,date", "--memory-limit", "128MiB")
		rc = append(rc, m)
	}, func() {
		dk = append(dk, duckdbSort(in, duckOut))
	}, func() {
		pl = append(pl, polarsSort(in, polarsOut))
	})
	r, c, d, p := median(rl), median(rc), median(dk), median(pl)
	fmt.Printf("\n== %d small files of 20 rows (%.1f MB): relayout vs DuckDB (ORDER BY COPY) and Polars (sort + write), median of %d\n", files, float64(dirBytes(in+"/*.parquet"))/1e6, reps)
	fmt.Printf("%-22s %10s %12s %12s\n", "", "seconds", "CPU seconds", "peak RSS MB")
	for _, row := range []struct {
		name string
		m    measure
	}{{"relayout", r}, {"relayout at 128 MiB", c}, {"duckdb", d}, {"polars", p}} {
		fmt.Printf("%-22s %10.2f %12.2f %12.0f\n", row.name, row.m.Seconds, row.m.CPU, float64(row.m.RSS)/1e6)
	}
	fmt.Printf("relayout ÷ duckdb %.2fx, ÷ polars %.2fx (wall)\n", r.Seconds/d.Seconds, r.Seconds/p.Seconds)
	res["small_files"] = map[string]any{"files": files, "relayout": r, "relayout_128mib": c, "duckdb": d, "polars": p}
}
