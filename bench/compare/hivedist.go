package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
			hiveSteps(step, in, o, extra, func(pr planCounts) {
				if st, err := os.Stat(filepath.Join(o, "_relayout", "map", "m-00000", "_done.json")); err == nil {
					manifest = st.Size()
				}
				// A process per task (as Argo and Airflow run them),
				// then the whole list in one process again.
				tasks = pr.ReduceTasks
				t0 := time.Now()
				for j := 0; j < pr.ReduceTasks; j++ {
					timed("bin/relayout", "reduce", "--quiet", "--plan", pr.Plan, "--task", fmt.Sprint(j))
				}
				perTask = append(perTask, time.Since(t0).Seconds())
			})
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

// hiveDistS3Bench runs the same steps with the work folder and output on
// an object store: gofakes3 on loopback holding each object GET and HEAD
// for BENCH_S3_LATENCY (default 10ms), as a store across a network does.
// It reports each step's time and object GETs by the object's name: a
// reduce or detect task reads its segment and digest records once per map
// task, not once per partition and map task.
func hiveDistS3Bench(in string, res map[string]any) {
	lat := 10 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("BENCH_S3_LATENCY")); err == nil {
		lat = d
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	gets := map[string]int{}
	params, stop := fakeS3(ln, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				name := path.Base(r.URL.Path)
				if strings.HasPrefix(name, "u-") || strings.HasPrefix(name, "part-") || strings.HasSuffix(name, ".arrows") {
					name = "(rows)"
				}
				mu.Lock()
				gets[r.Method+" "+name]++
				mu.Unlock()
				time.Sleep(lat)
			}
			inner.ServeHTTP(w, r)
		})
	})
	defer stop()
	fmt.Printf("\n== the same steps, the output on an object store (gofakes3 on loopback, %v per object GET or HEAD), one run\n", lat)
	out := map[string]any{"latency_ms": lat.Seconds() * 1e3}
	for _, packed := range []bool{false, true} {
		name := map[bool]string{false: "flat", true: "packed"}[packed]
		extra := []string{"--slice-keys", "country,date", "--output-partitioning", "hive", "--force-folders"}
		if packed {
			extra = append(extra, "--query-key", "query_id")
		}
		dst := "s3://bench/hivedist-" + name + "/" + params
		st := map[string]any{}
		step := func(label string, args ...string) string {
			mu.Lock()
			clear(gets)
			mu.Unlock()
			t0 := time.Now()
			_, so := timed("bin/relayout", args...)
			sec := time.Since(t0).Seconds()
			mu.Lock()
			var keys []string
			total := 0
			for k, n := range gets {
				keys = append(keys, fmt.Sprintf("%s %d", k, n))
				total += n
			}
			mu.Unlock()
			sort.Strings(keys)
			fmt.Printf("%-7s %-7s %7.2f s %6d requests: %s\n", name, label, sec, total, strings.Join(keys, ", "))
			st[label] = map[string]any{"seconds": sec, "requests": total}
			return so
		}
		hiveSteps(step, in, dst, extra, nil)
		out[name] = st
	}
	res["hive_output_distributed_s3"] = out
}

// hiveSteps runs the job's steps into out through step (which runs and
// times one command): plan (--map-bytes 12MiB), then each step's tasks as
// one --task list: map, detect (packed plans), reduce, commit. Before the
// reduce list, beforeReduce (nil: nothing) gets the plan's counts.
func hiveSteps(step func(label string, args ...string) string, in, out string, extra []string, beforeReduce func(planCounts)) {
	var pr planCounts // what `relayout plan` prints (dist.go)
	so := step("plan", append([]string{"plan", "--quiet", "--input", in, "--output", out, "--map-bytes", "12MiB"}, extra...)...)
	if err := json.Unmarshal([]byte(so), &pr); err != nil {
		fmt.Fprintf(os.Stderr, "plan printed %q: %v\n", so, err)
		os.Exit(1)
	}
	list := func(n int) string { return fmt.Sprintf("0-%d", n-1) }
	step("map", "map", "--quiet", "--plan", pr.Plan, "--task", list(pr.MapTasks))
	if pr.DetectTasks > 0 {
		step("detect", "detect", "--quiet", "--plan", pr.Plan, "--task", list(pr.DetectTasks))
	}
	if beforeReduce != nil {
		beforeReduce(pr)
	}
	step("reduce", "reduce", "--quiet", "--plan", pr.Plan, "--task", list(pr.ReduceTasks))
	step("commit", "commit", "--quiet", "--plan", pr.Plan)
}
