package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// keypassBench measures the key pass as tasks (issue 21) on tables 16, 64
// and 256 times the bench input (hard links of its files, so the rows
// grow and the slices stay 1,200): the one-process plan against the
// distributed plan's three steps, plan --key-tasks (footers), the key
// tasks (each alone; their sum and the longest) and plan --keys (the
// merge), with the two plans compared byte for byte.
func keypassBench(dir, in string, reps int, res map[string]any) {
	scales := []int{16, 64, 256}
	if v := os.Getenv("BENCH_KEYPASS_SCALES"); v != "" {
		scales = nil
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(f); err == nil && n > 0 {
				scales = append(scales, n)
			}
		}
	}
	srcs, _ := filepath.Glob(filepath.Join(in, "*.parquet"))
	sort.Strings(srcs)
	fmt.Printf("\n== key pass as tasks: tables of N x the bench input (hard links), --slice-keys country,date, default --map-bytes (256 MiB)\n")
	fmt.Printf("%6s %6s %10s %12s %10s %10s %10s %9s %10s %10s\n", "scale", "files", "plan (1p)", "--key-tasks", "key tasks", "longest", "--keys", "identical", "summaries", "map 0")
	out := map[string]any{}
	for _, x := range scales {
		tbl := filepath.Join(dir, fmt.Sprintf("events-x%d", x))
		if _, err := os.Stat(tbl); err != nil {
			os.MkdirAll(tbl, 0o755)
			for k := 0; k < x; k++ {
				for _, s := range srcs {
					if err := os.Link(s, filepath.Join(tbl, fmt.Sprintf("part-%04d-%s", k, filepath.Base(s)))); err != nil {
						fmt.Fprintf(os.Stderr, "link: %v\n", err)
						os.Exit(1)
					}
				}
			}
		}
		args := []string{"--quiet", "--overwrite", "--input", tbl, "--slice-keys", "country,date"}
		one := filepath.Join(dir, "keypass-one")
		os.RemoveAll(one)
		m1, _ := timed("bin/relayout", append([]string{"plan", "--output", one}, args...)...)
		ref, _ := os.ReadFile(filepath.Join(one, "_relayout", "plan.json"))
		dst := filepath.Join(dir, "keypass-tasks")
		os.RemoveAll(dst)
		mk, kout := timed("bin/relayout", append([]string{"plan", "--key-tasks", "--output", dst}, args...)...)
		var kr struct {
			Keys     string `json:"keys"`
			KeyTasks int    `json:"key_tasks"`
		}
		json.Unmarshal([]byte(kout), &kr)
		var sum, longest float64
		var sumBytes int64
		var rss int64
		for i := 0; i < kr.KeyTasks; i++ {
			m, tout := timed("bin/relayout", "keys", "--quiet", "--keys", kr.Keys, "--task", strconv.Itoa(i))
			var d struct {
				SummaryBytes int64 `json:"summary_bytes"`
			}
			json.Unmarshal([]byte(tout), &d)
			sum += m.Seconds
			longest = max(longest, m.Seconds)
			sumBytes += d.SummaryBytes
			rss = max(rss, m.RSS)
		}
		var merges []measure
		for r := 0; r < reps; r++ { // a merge retried rewrites the same plan
			m, _ := timed("bin/relayout", "plan", "--quiet", "--keys", kr.Keys)
			merges = append(merges, m)
		}
		mm := median(merges)
		// One map task of the merged plan: its cost should not grow with
		// the table's other files.
		mt, _ := timed("bin/relayout", "map", "--quiet", "--plan", filepath.Join(dst, "_relayout", "plan.json"), "--task", "0")
		got, _ := os.ReadFile(filepath.Join(dst, "_relayout", "plan.json"))
		same := len(ref) > 0 && bytes.Equal(got, ref)
		fmt.Printf("%5dx %6d %9.2fs %11.2fs %9.2fs %9.2fs %9.2fs %9v %9.0fKB %9.2fs\n", x, len(srcs)*x, m1.Seconds, mk.Seconds, sum, longest, mm.Seconds, same, float64(sumBytes)/1e3, mt.Seconds)
		out[fmt.Sprintf("x%d", x)] = map[string]any{
			"files": len(srcs) * x, "plan_one_process": m1, "plan_key_tasks": mk, "key_tasks": kr.KeyTasks,
			"key_tasks_seconds_sum": sum, "key_task_seconds_max": longest, "key_task_peak_rss": rss,
			"merge": mm, "merge_runs": merges, "identical": same, "summary_bytes": sumBytes, "map_task_0": mt,
		}
		os.RemoveAll(one)
		os.RemoveAll(dst)
	}
	res["keypass"] = out
}
