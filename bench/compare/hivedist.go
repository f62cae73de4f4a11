package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// hiveDistBench runs the 1,200-folder Hive output (country/date,
// --force-folders) as the distributed steps, flat and packed, on one
// worker: plan (--map-bytes 12MiB: 4 map tasks), the map tasks, the detect
// tasks (packed) and the reduce tasks each as one --task list, commit;
// and the reduce tasks as a process each before that (as Argo and Airflow
// run them). It reports the steps, their sum against run's, the reduce
// tasks (a task per folder before they were grouped) and a map task
// manifest's bytes (what every task read beside its rows: reduce tasks x
// map tasks x units before the segment index).
func hiveDistBench(dir, in string, reps int, res map[string]any) {
	fmt.Printf("\n== the Hive output of 1,200 folders as distributed steps, one worker, median of %d\n", reps)
	fmt.Printf("%-8s %7s %7s %7s %8s %7s %7s %8s %14s %8s %11s\n", "", "plan", "map", "detect", "reduce", "commit", "total", "run", "map manifest", "tasks", "processes")
	out := map[string]any{}
	for _, packed := range []bool{false, true} {
		name := map[bool]string{false: "flat", true: "packed"}[packed]
		extra := []string{"--slice-keys", "country,date", "--output-partitioning", "hive", "--force-folders"}
		if packed {
			extra = append(extra, "--query-key", "query_id")
		}
		o := filepath.Join(dir, "hivedist-"+name)
		var runs []measure
		steps := map[string][]float64{}
		var manifest int64
		var perTask []float64
		var tasks int
		for r := 0; r < reps; r++ {
			m, _ := timed("bin/relayout", append([]string{"run", "--quiet", "--overwrite", "--input", in, "--output", o + "-run"}, extra...)...)
			runs = append(runs, m)
			os.RemoveAll(o)
			step := func(label string, args ...string) string {
				t0 := time.Now()
				_, so := timed("bin/relayout", args...)
				steps[label] = append(steps[label], time.Since(t0).Seconds())
				return so
			}
			var pr struct {
				Plan        string `json:"plan"`
				MapTasks    int    `json:"map_tasks"`
				DetectTasks int    `json:"detect_tasks"`
				ReduceTasks int    `json:"reduce_tasks"`
			}
			so := step("plan", append([]string{"plan", "--quiet", "--input", in, "--output", o, "--map-bytes", "12MiB"}, extra...)...)
			if err := json.Unmarshal([]byte(so), &pr); err != nil {
				fmt.Fprintf(os.Stderr, "plan printed %q: %v\n", so, err)
				os.Exit(1)
			}
			list := func(n int) string { return fmt.Sprintf("0-%d", n-1) }
			step("map", "map", "--quiet", "--plan", pr.Plan, "--task", list(pr.MapTasks))
			if st, err := os.Stat(filepath.Join(o, "_relayout", "map", "m-00000", "_done.json")); err == nil {
				manifest = st.Size()
			}
			if pr.DetectTasks > 0 {
				step("detect", "detect", "--quiet", "--plan", pr.Plan, "--task", list(pr.DetectTasks))
			}
			// A process per task (as Argo and Airflow run them), then
			// the whole list in one process again.
			tasks = pr.ReduceTasks
			t0 := time.Now()
			for j := 0; j < pr.ReduceTasks; j++ {
				timed("bin/relayout", "reduce", "--quiet", "--plan", pr.Plan, "--task", fmt.Sprint(j))
			}
			perTask = append(perTask, time.Since(t0).Seconds())
			step("reduce", "reduce", "--quiet", "--plan", pr.Plan, "--task", list(pr.ReduceTasks))
			step("commit", "commit", "--quiet", "--plan", pr.Plan)
		}
		mid := map[string]float64{}
		total := 0.0
		for _, k := range []string{"plan", "map", "detect", "reduce", "commit"} {
			if len(steps[k]) > 0 {
				mid[k] = medianF(steps[k])
				total += mid[k]
			}
		}
		run := median(runs).Seconds
		fmt.Printf("%-8s %7.2f %7.2f %7.2f %8.2f %7.2f %7.2f %8.2f %12d B %8d %9.2f s\n", name, mid["plan"], mid["map"], mid["detect"], mid["reduce"], mid["commit"], total, run, manifest, tasks, medianF(perTask))
		out[name] = map[string]any{"steps": mid, "total": total, "run": run, "map_manifest_bytes": manifest, "reduce_tasks": tasks, "reduce_processes_seconds": medianF(perTask)}
	}
	fmt.Println("         (reduce: the task list in one process; the last columns: the reduce tasks, and their time as a process each)")
	res["hive_output_distributed"] = out
}
