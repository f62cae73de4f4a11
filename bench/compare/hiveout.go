package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hiveOutBench measures Hive-partitioned outputs of the bench input:
// `relayout run --output-partitioning hive` with folders of country and
// date (1,200 small files, --force-folders) and of country alone (40),
// against the flat run and DuckDB's partitioned COPY of the same sorted
// rows (PARTITION_BY, zstd), in a rotating order, medians of reps; and
// the country/date job within 1 GiB (both) and 128 MiB (relayout).
// (nodejs-polars 0.25 writes no partitioned Parquet.)
func hiveOutBench(dir, in string, reps int, res map[string]any) {
	type job struct {
		name string
		args []string // relayout's, or DuckDB's PARTITION_BY columns
		duck bool
	}
	jobs := []job{
		{"relayout flat", nil, false},
		{"relayout hive country/date", []string{"--output-partitioning", "hive", "--force-folders"}, false},
		{"relayout hive country", []string{"--output-partitioning", "hive", "--hive-keys", "1"}, false},
		{"duckdb country/date", []string{"country", "date"}, true},
		{"duckdb country", []string{"country"}, true},
		// Within a pod's memory: relayout spills (the folders share
		// units), DuckDB is given the same limit.
		{"relayout hive c/d 1GiB", []string{"--output-partitioning", "hive", "--force-folders", "--memory-limit", "1GiB"}, false},
		{"duckdb country/date 1GiB", []string{"country", "date"}, true},
		{"relayout hive c/d 128MiB", []string{"--output-partitioning", "hive", "--force-folders", "--memory-limit", "128MiB"}, false},
	}
	ms := make([][]measure, len(jobs))
	outs := make([]string, len(jobs))
	failed := make([]string, len(jobs))
	var cmds []func()
	for i, j := range jobs {
		outs[i] = filepath.Join(dir, "hiveout-"+strings.NewReplacer(" ", "-", "/", "-").Replace(j.name))
		cmds = append(cmds, func() {
			var m measure
			if j.duck {
				os.RemoveAll(outs[i])
				args := []string{"tools/node/duckdb.mjs", "--threads", "2"}
				if strings.HasSuffix(j.name, " 1GiB") {
					args = append(args, "--memory-limit", "1GiB")
				}
				var err error
				var stderr string
				m, _, stderr, err = tryTimed("node", append(args,
					fmt.Sprintf("COPY (SELECT * FROM read_parquet('%s/*.parquet') ORDER BY country, date) TO '%s' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (%s))",
						in, outs[i], strings.Join(j.args, ", ")))...)
				if err != nil { // DuckDB out of memory at 1 GiB: reported, not timed
					failed[i] = firstLine(stderr, "Error")
					return
				}
			} else {
				m, _ = timed("bin/relayout", append([]string{"run", "--quiet", "--overwrite", "--input", in, "--output", outs[i], "--slice-keys", "country,date"}, j.args...)...)
			}
			ms[i] = append(ms[i], m)
		})
	}
	rotated(reps, cmds...)
	fmt.Printf("\n== Hive-partitioned output of %s: relayout vs its flat run and DuckDB's PARTITION_BY COPY (zstd), median of %d\n", filepath.Base(in), reps)
	fmt.Printf("%-28s %8s %8s %12s %12s %10s\n", "", "files", "seconds", "CPU seconds", "peak RSS MB", "output MB")
	out := map[string]any{}
	for i, j := range jobs {
		if failed[i] != "" {
			fmt.Printf("%-28s failed: %s\n", j.name, failed[i])
			out[j.name] = map[string]any{"failed": failed[i]}
			continue
		}
		m := median(ms[i])
		files, bytes := treeParquet(outs[i])
		fmt.Printf("%-28s %8d %8.2f %12.2f %12.0f %10.1f\n", j.name, files, m.Seconds, m.CPU, float64(m.RSS)/1e6, float64(bytes)/1e6)
		out[j.name] = map[string]any{"files": files, "bytes": bytes, "run": m}
	}
	res["hive_output"] = out
}

// treeParquet counts the Parquet files under dir and their bytes.
func treeParquet(dir string) (files int, bytes int64) {
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && strings.HasSuffix(p, ".parquet") {
			files++
			bytes += fi.Size()
		}
		return nil
	})
	return files, bytes
}

// firstLine is the first line of text holding word, or its first line.
func firstLine(text, word string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for _, l := range lines {
		if strings.Contains(l, word) {
			return strings.TrimSpace(l)
		}
	}
	return lines[0]
}
