package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
)

// s3Env starts a real S3-protocol server on loopback and returns the
// environment for relayout processes and the URL parameters that reach it.
func s3Env(t *testing.T, bucket string) (env []string, params string) {
	t.Helper()
	srv := testutil.S3Server(t, bucket, nil)
	return srv.Env, srv.Params
}

// flow is a distributed run as an orchestrator would launch it: the argument
// lists of each step (plan --key-tasks, the merge plan --keys, commit), with
// the key, map, detect and reduce tasks' filled in by task().
type flow struct {
	plan, merge, commit []string
	task                func(step string, i int) (args, env []string)
	parallelism         int
}

// runFlow runs a flow's commands as local processes: plan, then the map
// tasks and the reduce tasks with `workers` processes at a time, then
// commit. killFirstReduce kills reduce 0 midway once and re-runs it.
func runFlow(t *testing.T, env []string, f flow, workers int, killFirstReduce bool) {
	t.Helper()
	keysJSON := filepath.Join(t.TempDir(), "keys.json")
	planJSON := filepath.Join(t.TempDir(), "plan.json")
	reportTo := func(cmd []string, path, wrote string) []string {
		args := replaceArg(cmd, wrote, path)
		args = replaceArg(args, "/airflow/xcom/return.json", path)
		if !contains(args, "--report-json") {
			args = append(args, "--report-json", path)
		}
		return args
	}
	args := reportTo(f.plan, keysJSON, "/tmp/keys.json")
	if !contains(args, "--key-tasks") {
		t.Fatalf("plan %v: the examples run the key pass as tasks (--key-tasks)", args)
	}
	if r := relayout(t, env, append(args, "--quiet")...); r.code != 0 {
		t.Fatalf("plan %v: exit %d: %s", args, r.code, r.stderr)
	}
	var keys struct {
		Keys     string `json:"keys"`
		KeyTasks int    `json:"key_tasks"`
	}
	data, _ := os.ReadFile(keysJSON)
	if err := json.Unmarshal(data, &keys); err != nil || keys.KeyTasks < 2 {
		t.Fatalf("plan --key-tasks output %s (%v): want several key tasks", data, err)
	}
	runTasks := func(step string, n int) {
		sem := make(chan struct{}, workers)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []string
		for i := 0; i < n; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				a, e := f.task(step, i)
				cmd := exec.Command(bin, append(a, "--quiet")...)
				cmd.Env = append(append(os.Environ(), env...), e...)
				if out, err := cmd.CombinedOutput(); err != nil {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%s %d: %v: %s", step, i, err, out))
					mu.Unlock()
				}
			}(i)
		}
		wg.Wait()
		if len(failed) > 0 {
			t.Fatal(strings.Join(failed, "\n"))
		}
	}
	runTasks("keys", keys.KeyTasks)
	merge := reportTo(f.merge, planJSON, "/tmp/plan.json")
	if !contains(merge, "--keys") {
		t.Fatalf("merge %v: want plan --keys", merge)
	}
	if r := relayout(t, env, append(merge, "--quiet")...); r.code != 0 {
		t.Fatalf("merge %v: exit %d: %s", merge, r.code, r.stderr)
	}
	var counts struct {
		Plan        string `json:"plan"`
		MapTasks    int    `json:"map_tasks"`
		DetectTasks int    `json:"detect_tasks"`
		ReduceTasks int    `json:"reduce_tasks"`
	}
	data, _ = os.ReadFile(planJSON)
	if err := json.Unmarshal(data, &counts); err != nil || counts.MapTasks != keys.KeyTasks || counts.ReduceTasks < 2 {
		t.Fatalf("merge output %s (%v): want one map task per key task (%d) and several reduce tasks", data, err, keys.KeyTasks)
	}
	if packed := flagValue(args, "--query-key") != ""; packed != (counts.DetectTasks == counts.ReduceTasks) || (!packed && counts.DetectTasks != 0) {
		t.Fatalf("plan output %s: packed %v, want detect tasks = reduce tasks when packed, else 0", data, packed)
	}
	for _, step := range []struct {
		name string
		n    int
	}{{"map", counts.MapTasks}, {"detect", counts.DetectTasks}, {"reduce", counts.ReduceTasks}} {
		if killFirstReduce && step.name == "reduce" {
			a, e := f.task("reduce", 0)
			cmd := exec.Command(bin, a...)
			cmd.Env = append(append(os.Environ(), env...), e...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(150 * time.Millisecond)
			cmd.Process.Kill()
			cmd.Wait()
		}
		// A step whose command takes --tasks-per-index K (an Indexed Job of
		// ceil(tasks/K) pods) runs that many indices.
		per := 1
		if step.n > 0 {
			a, _ := f.task(step.name, 0)
			if v := flagValue(a, "--tasks-per-index"); v != "" {
				var err error
				if per, err = strconv.Atoi(v); err != nil || per < 1 {
					t.Fatalf("%s: --tasks-per-index %q", step.name, v)
				}
			}
		}
		runTasks(step.name, (step.n+per-1)/per)
	}
	if r := relayout(t, env, append(f.commit, "--quiet")...); r.code != 0 {
		t.Fatalf("commit: exit %d: %s", r.code, r.stderr)
	}
}

func replaceArg(args []string, old, new string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, old, new)
	}
	return out
}

// flagValue returns the value after flag in args ("" when absent).
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// setFlag sets the value after flag in args, which must hold it.
func setFlag(t *testing.T, args []string, flag, v string) []string {
	out := append([]string{}, args...)
	for i, a := range out {
		if a == flag && i+1 < len(out) {
			out[i+1] = v
			return out
		}
	}
	t.Fatalf("%v has no %s", args, flag)
	return nil
}

func contains(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}

// withParams moves the test server's URL parameters to the end of an
// argument that names a location under base (so "<output>_relayout/plan.json"
// keeps working); production URLs carry no parameters.
func withParams(args []string, params string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.HasPrefix(a, "s3://") && !strings.Contains(a, "?") {
			a += params
		}
		out[i] = a
	}
	return out
}

// TestExamplesRunAsWritten parses the Argo WorkflowTemplate, the Kubernetes
// Indexed Jobs and the Airflow DAG under examples/, extracts the relayout
// commands each would run, and runs them as local processes against a
// loopback S3 server, with 1, 2 and 5 workers: every output is byte for byte
// the output of relayout run. The Kubernetes run also kills a reduce task
// midway and runs it again.
func TestExamplesRunAsWritten(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 41, RowGroupRows: 8 << 10})
	env, params := s3Env(t, "bkt")
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, "s3://bkt/impressions"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range testutil.Files(t, in) {
		data, _ := os.ReadFile(p)
		if err := loc.Bucket.WriteAll(ctx, "impressions/"+filepath.Base(p), data, nil); err != nil {
			t.Fatal(err)
		}
	}
	input := "s3://bkt/impressions/"
	// Small sizes so the small table makes several files and map tasks.
	sizes := []string{"--file-bytes", "2MiB", "--row-group-bytes", "1MiB", "--min-row-group-bytes", "128KiB"}
	if r := relayout(t, env, append([]string{"run", "--quiet", "--input", input + params, "--output", "s3://bkt/ref/" + params, "--slice-keys", "country,date"}, sizes...)...); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	want := testutil.BucketTree(t, loc.Bucket, "ref/")
	if r := relayout(t, env, append([]string{"run", "--quiet", "--input", input + params, "--output", "s3://bkt/ref-packed/" + params, "--slice-keys", "country,date", "--query-key", "query_id", "--tensors", "--shard-bytes", "256KiB"}, sizes...)...); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	wantPacked := testutil.BucketTree(t, loc.Bucket, "ref-packed/")
	planSizes := append(sizes, "--map-bytes", "1MiB")
	root := filepath.Join(testutil.Root(), "examples")

	flows := map[string]func(output string) flow{
		"argo": func(output string) flow {
			return argoFlow(t, filepath.Join(root, "argo", "relayout-workflowtemplate.yaml"), input, output, params, planSizes)
		},
		"kubernetes": func(output string) flow {
			return k8sFlow(t, filepath.Join(root, "kubernetes", "relayout-jobs.yaml"), input, output, params, planSizes)
		},
		"airflow": func(output string) flow {
			return airflowFlow(t, filepath.Join(root, "airflow", "relayout_dag.py"), input, output, params, planSizes)
		},
	}
	runs := []struct {
		name    string
		workers int
		kill    bool
		packed  bool
	}{{"argo", 1, false, false}, {"argo", 2, false, true}, {"kubernetes", 5, true, false}, {"kubernetes", 3, true, true},
		{"airflow", 2, false, false}, {"airflow", 2, false, true}}
	for _, r := range runs {
		prefix := fmt.Sprintf("%s-%d-%v/", r.name, r.workers, r.packed)
		f := flows[r.name]("s3://bkt/" + prefix)
		ref := want
		if r.packed { // the example's query-key parameter, as a user sets it, with tensors
			f.plan = append(setFlag(t, f.plan, "--query-key", "query_id"), "--tensors", "--shard-bytes", "256KiB")
			ref = wantPacked
		}
		runFlow(t, env, f, r.workers, r.kill)
		got := testutil.BucketTree(t, loc.Bucket, prefix)
		if len(got) != len(ref) {
			t.Fatalf("%s with %d workers (packed %v): %d objects, run wrote %d", r.name, r.workers, r.packed, len(got), len(ref))
		}
		for k, v := range ref {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%s with %d workers (packed %v): %s differs from run's", r.name, r.workers, r.packed, k)
			}
		}
	}
}

var argoParam = regexp.MustCompile(`\{\{workflow\.parameters\.([a-z-]+)\}\}`)

func argoFlow(t *testing.T, path, input, output, params string, sizes []string) flow {
	t.Helper()
	var doc struct {
		Spec struct {
			Arguments struct {
				Parameters []struct{ Name, Value string } `yaml:"parameters"`
			} `yaml:"arguments"`
			Templates []struct {
				Name          string                           `yaml:"name"`
				Parallelism   int                              `yaml:"parallelism"`
				RetryStrategy struct{ Expression string }      `yaml:"retryStrategy"`
				Container     struct{ Command, Args []string } `yaml:"container"`
				DAG           struct {
					Tasks []struct{ Name, Template string }
				} `yaml:"dag"`
			} `yaml:"templates"`
		} `yaml:"spec"`
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// The store's query goes in through the example's own parameter, as
	// a user with MinIO would pass it.
	vals := map[string]string{"input": input, "output": output, "store-query": params}
	for _, p := range doc.Spec.Arguments.Parameters {
		if _, ok := vals[p.Name]; !ok {
			vals[p.Name] = p.Value
		}
	}
	args := map[string][]string{}
	par := 0
	for _, tp := range doc.Spec.Templates {
		if len(tp.Container.Command) == 0 {
			continue
		}
		if tp.Container.Command[0] != "relayout" {
			t.Fatalf("%s: template %s runs %v", path, tp.Name, tp.Container.Command)
		}
		if !strings.Contains(tp.RetryStrategy.Expression, "== 4") {
			t.Errorf("%s: template %s retries on %q, want exit code 4 only", path, tp.Name, tp.RetryStrategy.Expression)
		}
		var a []string
		for _, x := range append(tp.Container.Command[1:], tp.Container.Args...) {
			a = append(a, argoParam.ReplaceAllStringFunc(x, func(m string) string { return vals[argoParam.FindStringSubmatch(m)[1]] }))
		}
		args[tp.Name] = a
		par = max(par, tp.Parallelism)
	}
	for _, step := range []string{"plan", "keys", "merge", "map", "detect", "reduce", "commit"} {
		if args[step] == nil {
			t.Fatalf("%s: no %s template", path, step)
		}
	}
	if par == 0 {
		t.Fatalf("%s: map and reduce set no parallelism", path)
	}
	return flow{
		plan:   append(args["plan"], sizes...),
		merge:  args["merge"],
		commit: args["commit"],
		task: func(step string, i int) ([]string, []string) {
			return replaceArg(args[step], "{{inputs.parameters.task}}", strconv.Itoa(i)), nil
		},
		parallelism: par,
	}
}

func k8sFlow(t *testing.T, path, input, output, params string, sizes []string) flow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]string{"INPUT": input, "OUTPUT": output, "STORE_QUERY": params, "SLICE_KEYS": "country,date", "QUERY_KEY": "", "KEY_TASKS": "1", "MAP_TASKS": "1", "DETECT_TASKS": "1", "REDUCE_TASKS": "1",
		"TASKS_PER_POD": "2", "MAP_PODS": "1", "DETECT_PODS": "1", "REDUCE_PODS": "1"} // the pods' counts come from the plan (runFlow)
	expanded := os.Expand(string(data), func(k string) string { return vals[k] })
	dec := yaml.NewDecoder(strings.NewReader(expanded))
	cmds := map[string][]string{}
	for {
		var job struct {
			Metadata struct{ Labels map[string]string } `yaml:"metadata"`
			Spec     struct {
				CompletionMode   string `yaml:"completionMode"`
				PodFailurePolicy struct {
					Rules []struct {
						Action      string                 `yaml:"action"`
						OnExitCodes struct{ Values []int } `yaml:"onExitCodes"`
					} `yaml:"rules"`
				} `yaml:"podFailurePolicy"`
				Template struct {
					Spec struct {
						Containers []struct{ Command []string } `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&job); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		step := job.Metadata.Labels["step"]
		c := job.Spec.Template.Spec.Containers[0].Command
		if want := map[string]string{"merge": "plan"}[step]; c[0] != "relayout" || (c[1] != step && c[1] != want) {
			t.Fatalf("%s: job %s runs %v", path, step, c)
		}
		if (step == "keys" || step == "map" || step == "detect" || step == "reduce") != (job.Spec.CompletionMode == "Indexed") {
			t.Errorf("%s: job %s has completionMode %q", path, step, job.Spec.CompletionMode)
		}
		if r := job.Spec.PodFailurePolicy.Rules; len(r) == 0 || r[0].Action != "FailJob" || fmt.Sprint(r[0].OnExitCodes.Values) != "[2 3 5]" {
			t.Errorf("%s: job %s fails at once on %+v, want exit codes 2, 3 and 5", path, step, r)
		}
		cmds[step] = c[1:]
	}
	for _, step := range []string{"plan", "keys", "merge", "map", "detect", "reduce", "commit"} {
		if cmds[step] == nil {
			t.Fatalf("%s: no job labelled step=%s", path, step)
		}
	}
	return flow{
		plan:   append(cmds["plan"], sizes...),
		merge:  cmds["merge"],
		commit: cmds["commit"],
		task: func(step string, i int) ([]string, []string) {
			return cmds[step], []string{"JOB_COMPLETION_INDEX=" + strconv.Itoa(i)}
		},
	}
}

func airflowFlow(t *testing.T, path, input, output, params string, sizes []string) flow {
	t.Helper()
	// Read the DAG's command lists with Python itself (Airflow need not be
	// installed: the module imports it inside a try block).
	script := fmt.Sprintf(`import json, runpy
m = runpy.run_path(%q)
print(json.dumps({k: m[k] for k in ("INPUT", "OUTPUT", "PLAN_ARGS", "KEYS_ARGS", "MERGE_ARGS", "MAP_ARGS", "DETECT_ARGS", "REDUCE_ARGS", "COMMIT_ARGS")}))`, path)
	py := exec.Command("/usr/bin/python3", "-c", script)
	py.Env = append(os.Environ(), "RELAYOUT_STORE_QUERY="+params) // the DAG's STORE_QUERY
	out, err := py.Output()
	if err != nil {
		t.Fatalf("python3 %s: %v", path, err)
	}
	var m struct {
		Input, Output                                                              string
		PlanArgs, KeysArgs, MergeArgs, MapArgs, DetectArgs, ReduceArgs, CommitArgs []string
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(out, &raw)
	json.Unmarshal(raw["INPUT"], &m.Input)
	json.Unmarshal(raw["OUTPUT"], &m.Output)
	json.Unmarshal(raw["PLAN_ARGS"], &m.PlanArgs)
	json.Unmarshal(raw["KEYS_ARGS"], &m.KeysArgs)
	json.Unmarshal(raw["MERGE_ARGS"], &m.MergeArgs)
	json.Unmarshal(raw["MAP_ARGS"], &m.MapArgs)
	json.Unmarshal(raw["DETECT_ARGS"], &m.DetectArgs)
	json.Unmarshal(raw["REDUCE_ARGS"], &m.ReduceArgs)
	json.Unmarshal(raw["COMMIT_ARGS"], &m.CommitArgs)
	fix := func(a []string) []string {
		return replaceArg(replaceArg(a, m.Input, input), m.Output, output)
	}
	return flow{
		plan:   fix(append(m.PlanArgs, sizes...)),
		merge:  fix(m.MergeArgs),
		commit: fix(m.CommitArgs),
		task: func(step string, i int) ([]string, []string) {
			a := map[string][]string{"keys": m.KeysArgs, "map": m.MapArgs, "detect": m.DetectArgs, "reduce": m.ReduceArgs}[step]
			return fix(append(append([]string{}, a...), strconv.Itoa(i))), nil
		},
	}
}

// TestNightlyExamplesRunAsWritten: the Argo CronWorkflow and the Airflow
// nightly DAG, their commands run as written against loopback S3: the
// first night builds generation 1, a night with one more day writes only
// that day's part (generation 2), a night with nothing new commits
// nothing, and gc keeps what it is told.
func TestNightlyExamplesRunAsWritten(t *testing.T) {
	flat := testutil.Generate(t, gen.Options{Rows: 24_000, Files: 2, Days: 4, Seed: 81})
	daily := filepath.Join(t.TempDir(), "daily")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * exclude (date), date from read_parquet('%s/*.parquet')) to '%s' (format parquet, partition_by (date))`, flat, daily))
	ents, _ := os.ReadDir(daily)
	env, params := s3Env(t, "night")
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, "s3://night/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload := func(prefix string, days []os.DirEntry) {
		for _, d := range days {
			data, _ := os.ReadFile(filepath.Join(daily, d.Name(), "data_0.parquet"))
			if err := loc.Bucket.WriteAll(ctx, prefix+d.Name()+"/data_0.parquet", data, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	root := filepath.Join(testutil.Root(), "examples")
	partsDir := t.TempDir()
	steps := map[string]func(input, ds string) [][]string{
		"argo": func(input, ds string) [][]string {
			var doc struct {
				Spec struct {
					WorkflowSpec struct {
						Arguments struct {
							Parameters []struct{ Name, Value string } `yaml:"parameters"`
						} `yaml:"arguments"`
						Templates []struct {
							Name          string                           `yaml:"name"`
							RetryStrategy struct{ Expression string }      `yaml:"retryStrategy"`
							Container     struct{ Command, Args []string } `yaml:"container"`
							Outputs       struct {
								Parameters []struct {
									Name      string
									ValueFrom struct{ Path string } `yaml:"valueFrom"`
								}
							} `yaml:"outputs"`
							Steps [][]struct {
								Name      string `yaml:"name"`
								Template  string `yaml:"template"`
								WithParam string `yaml:"withParam"`
							} `yaml:"steps"`
						} `yaml:"templates"`
					} `yaml:"workflowSpec"`
				} `yaml:"spec"`
			}
			data, _ := os.ReadFile(filepath.Join(root, "argo", "relayout-nightly-cronworkflow.yaml"))
			if err := yaml.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			vals := map[string]string{"input": input, "dataset": ds}
			for _, p := range doc.Spec.WorkflowSpec.Arguments.Parameters {
				if _, ok := vals[p.Name]; !ok {
					vals[p.Name] = p.Value
				}
			}
			args := map[string][]string{}
			var steps []string
			for _, tp := range doc.Spec.WorkflowSpec.Templates {
				if tp.Name == "nightly" {
					for _, group := range tp.Steps {
						for _, st := range group {
							steps = append(steps, st.Template)
							if st.Template == "part" && !strings.Contains(st.WithParam, "steps.plan.outputs.parameters.parts") {
								t.Errorf("the part step fans out over %q, not the plan's parts", st.WithParam)
							}
						}
					}
					continue
				}
				if !strings.Contains(tp.RetryStrategy.Expression, "== 4") {
					t.Errorf("template %s retries on %q, want exit code 4 only", tp.Name, tp.RetryStrategy.Expression)
				}
				var a []string
				for _, x := range append(tp.Container.Command[1:], tp.Container.Args...) {
					a = append(a, argoParam.ReplaceAllStringFunc(x, func(m string) string { return vals[argoParam.FindStringSubmatch(m)[1]] }))
				}
				if len(tp.Outputs.Parameters) > 0 { // the plan's output file, here a temp one
					a = replaceArg(a, tp.Outputs.Parameters[0].ValueFrom.Path, filepath.Join(partsDir, "parts.json"))
				}
				args[tp.Name] = withParams(a, params)
			}
			if strings.Join(steps, ",") != "plan,part,commit,gc" {
				t.Fatalf("the nightly steps are %v", steps)
			}
			return [][]string{args["plan"], args["part"], args["commit"], args["gc"]}
		},
		"airflow": func(input, ds string) [][]string {
			script := fmt.Sprintf(`import json, runpy
m = runpy.run_path(%q)
print(json.dumps({k: m[k] for k in ("INPUT", "DATASET", "RUN_ARGS", "GC_ARGS")}))`, filepath.Join(root, "airflow", "relayout_nightly_dag.py"))
			out, err := exec.Command("/usr/bin/python3", "-c", script).Output()
			if err != nil {
				t.Fatal(err)
			}
			var m struct {
				Input   string   `json:"INPUT"`
				Dataset string   `json:"DATASET"`
				Run     []string `json:"RUN_ARGS"`
				GC      []string `json:"GC_ARGS"`
			}
			json.Unmarshal(out, &m)
			fix := func(a []string) []string {
				return withParams(replaceArg(replaceArg(a, m.Input, input), m.Dataset, ds), params)
			}
			return [][]string{nil, nil, fix(m.Run), fix(m.GC)}
		},
	}
	for name, f := range steps {
		t.Run(name, func(t *testing.T) {
			input, ds := "s3://night/"+name+"/events/", "s3://night/"+name+"/ds/"
			cmds := f(input, ds)
			if len(cmds) != 4 || cmds[2][0] != "run" || cmds[3][0] != "gc" {
				t.Fatalf("steps %v", cmds)
			}
			must := func(c []string) string {
				r := relayout(t, env, c...)
				if r.code != 0 {
					t.Fatalf("%v: exit %d: %s", c, r.code, r.stderr)
				}
				return r.stdout
			}
			night := func() string {
				var out string
				if cmds[0] != nil { // plan, then one part task per part at once, as withParam does
					must(cmds[0])
					var parts []string
					data, _ := os.ReadFile(filepath.Join(partsDir, "parts.json"))
					if err := json.Unmarshal(data, &parts); err != nil {
						t.Fatalf("parts.json: %v: %s", err, data)
					}
					var wg sync.WaitGroup
					for _, p := range parts {
						wg.Add(1)
						go func() {
							defer wg.Done()
							must(replaceArg(cmds[1], "{{inputs.parameters.part}}", p))
						}()
					}
					wg.Wait()
				}
				for _, c := range cmds[2:] {
					out += must(c)
				}
				return out
			}
			upload(name+"/events/", ents[:3])
			if out := night(); !strings.Contains(out, "committed generation 1") {
				t.Fatalf("night 1: %s", out)
			}
			upload(name+"/events/", ents[3:])
			if out := night(); !strings.Contains(out, "committed generation 2") || !strings.Contains(out, "(1 new, 0 changed, 3 reused") {
				t.Fatalf("night 2: %s", out)
			}
			if out := night(); !strings.Contains(out, "nothing changed") {
				t.Fatalf("night 3: %s", out)
			}
			if r := relayout(t, env, "verify", "--deep", withParams([]string{ds}, params)[0]); r.code != 0 {
				t.Fatalf("verify: %s", r.stderr)
			}
		})
	}
}
