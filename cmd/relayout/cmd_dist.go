package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/pipeline"
)

// The distributed steps (docs/distributed.md): plan, then map tasks,
// detect tasks (packed plans only) and reduce tasks (any number at once, in
// any order within a step, on any machines), then commit. Each prints one
// JSON line on stdout.

func planCommand() *cli.Command {
	flags := append(runFlags(),
		strFlag("map-bytes", sizeString(pipeline.DefaultMapBytes), "input bytes per map task"),
		boolFlag("key-tasks", "run the key pass as tasks: write <output>/_relayout/keys.json, then run `relayout keys` per key task and `plan --keys`"),
		strFlag("keys", "", "merge the key tasks of this key plan (<output>/_relayout/keys.json) into plan.json; it fixes the inputs and options"))
	return &cli.Command{
		Name:      "plan",
		Usage:     "fix the layout of a distributed run and write <output>/_relayout/plan.json",
		UsageText: "relayout plan --input s3://b/impressions/ --output s3://b/relaid/ --slice-keys country,date --report-json plan.json",
		Description: "Reads footers and key columns, pins the inputs, fixes the output files (one reduce\n" +
			"task each) and the map tasks (runs of input row groups), and prints\n" +
			`{"plan": URL, "map_tasks": M, "detect_tasks": D, "reduce_tasks": P}` + " (also to --report-json).\n" +
			"D is P for packed plans (--query-key), whose detect step runs between map and reduce, else 0.\n\n" +
			"With --key-tasks the key columns are read by tasks instead: plan pins the inputs and options,\n" +
			"writes <output>/_relayout/keys.json and prints " + `{"keys": URL, "key_tasks": K}` + "; run\n" +
			"`relayout keys --keys URL --task i` for i in 0..K-1 (one per map task's input range), then\n" +
			"`relayout plan --keys URL`, which merges their summaries into the same plan.json and prints\n" +
			"the line above.\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.IsSet("keys") {
				for _, f := range []string{"input", "output", "slice-keys", "query-key", "key-tasks", "map-bytes"} {
					if c.IsSet(f) {
						return errs.Usagef("--keys takes the inputs and options from the key plan: drop --%s", f)
					}
				}
				log, err := newLogger(c, os.Stderr)
				if err != nil {
					return err
				}
				res, _, err := pipeline.PlanFromKeys(c.Context, c.String("keys"), pipeline.RunOptions{Parallel: c.Int("parallel"), TmpDir: c.String("tmp-dir"), Log: log})
				if err != nil {
					return err
				}
				return printResult(res, c.String("report-json"), c.App.Writer)
			}
			opts, err := runOptions(c)
			if err != nil {
				return err
			}
			defer pipeline.HoldStepMemory(opts.MemoryLimit, opts.Parallel)()
			mb, err := parseSize("map-bytes", c.String("map-bytes"))
			if err != nil {
				return err
			}
			if c.Bool("key-tasks") {
				res, err := pipeline.KeyPlanJob(c.Context, opts, mb)
				if err != nil {
					return err
				}
				return printResult(res, c.String("report-json"), c.App.Writer)
			}
			return runPlan(c.Context, opts, mb, c.String("report-json"), c.App.Writer)
		},
	}
}

// runPlan is `relayout plan`: it writes plan.json and prints the task
// counts as one JSON line (also to reportJSON when set).
func runPlan(ctx context.Context, opts pipeline.RunOptions, mapBytes int64, reportJSON string, stdout io.Writer) error {
	res, _, err := pipeline.PlanJob(ctx, opts, mapBytes)
	if err != nil {
		return err
	}
	return printResult(res, reportJSON, stdout)
}

// printResult prints a step's result as one JSON line, also to reportJSON
// when set.
func printResult(res any, reportJSON string, stdout io.Writer) error {
	data, _ := json.Marshal(res)
	if reportJSON != "" {
		if err := os.WriteFile(reportJSON, append(data, '\n'), 0o644); err != nil {
			return errs.TransientErr(fmt.Errorf("write --report-json %s: %w", reportJSON, err))
		}
	}
	fmt.Fprintln(stdout, string(data))
	return nil
}

func taskFlags() []cli.Flag {
	return stepFlags(strFlag("plan", "", "the plan: <output>/_relayout/plan.json (a URL for object storage)"))
}

// stepFlags are a step's flags with planFlag naming what it runs.
func stepFlags(planFlag cli.Flag) []cli.Flag {
	fs := []cli.Flag{
		configFlag(),
		planFlag,
		strFlag("task", "", "task index (default: $JOB_COMPLETION_INDEX, set by Kubernetes Indexed Jobs); map, detect and reduce also take a list, 0-5 or 0,3,7-9, run one after another in this process"),
		strFlag("memory-limit", sizeString(pipeline.DefaultMemoryLimit), "memory budget"),
		strFlag("tmp-dir", "", "folder for temporary files"),
		intFlag("parallel", 0, "goroutines doing CPU work (default: number of CPUs)"),
		strFlag("huge-pages", pipeline.HugePagesAuto, "auto (ask Linux for transparent huge pages for the heap where it grants them on request, does not give free memory back to a hypervisor or makes 4 KiB page faults dear, and --memory-limit is at least 512MiB), on (also where it does not) or off"),
	}
	return append(fs, logFlags()...)
}

func taskIndex(c *cli.Context) (int, error) {
	v := c.String("task")
	if v == "" {
		v = os.Getenv("JOB_COMPLETION_INDEX")
	}
	if v == "" {
		return 0, errs.Usagef("no task: pass --task N (or set JOB_COMPLETION_INDEX)")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, errs.Usagef("--task must be a task index (got %q)", v)
	}
	return n, nil
}

// taskList is --task for the steps that take several tasks: an index, a
// range (0-5) or a comma-separated list of either, each task once; or
// $JOB_COMPLETION_INDEX.
func taskList(c *cli.Context) ([]int, error) {
	v := c.String("task")
	if v == "" {
		n, err := taskIndex(c)
		return []int{n}, err
	}
	bad := errs.Usagef("--task must be a task index, a range such as 0-5, or a comma-separated list of them (got %q)", v)
	var tasks []int
	seen := map[int]bool{}
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, bad
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, bad
			}
		}
		for t := a; t <= b; t++ {
			if seen[t] {
				return nil, errs.Usagef("--task %q names task %d twice", v, t)
			}
			if len(tasks) >= maxTaskList {
				return nil, errs.Usagef("--task %q names more than %d tasks", v, maxTaskList)
			}
			seen[t] = true
			tasks = append(tasks, t)
		}
	}
	return tasks, nil
}

// maxTaskList bounds the tasks one --task list names (a typo such as
// 0-1000000000 is refused before anything runs).
const maxTaskList = 1 << 20

func localOptions(c *cli.Context) (pipeline.RunOptions, error) {
	log, err := newLogger(c, os.Stderr)
	if err != nil {
		return pipeline.RunOptions{}, err
	}
	o := pipeline.RunOptions{TmpDir: c.String("tmp-dir"), Parallel: c.Int("parallel"), Log: log, HugePages: c.String("huge-pages")}
	if err := pipeline.CheckHugePages(o.HugePages); err != nil {
		return o, err
	}
	if o.MemoryLimit, err = parseSize("memory-limit", c.String("memory-limit")); err != nil {
		return o, err
	}
	return o, nil
}

// stepSource is the flag that names what a step runs: the plan, or for
// key tasks the key plan.
type stepSource struct{ flag, what, file string }

var (
	planSource = stepSource{"plan", "plan", "plan.json"}
	keysSource = stepSource{"keys", "key plan", "keys.json"}
)

// stepCommand is a map, detect, reduce or commit command: the task flags,
// the local options, and the step's result printed as one JSON line.
func stepCommand(name, usage, usageText, description string, run func(c *cli.Context, o pipeline.RunOptions) (any, error), extra ...cli.Flag) *cli.Command {
	return stepCommandOf(planSource, name, usage, usageText, description, run, extra...)
}

// stepCommandOf is stepCommand for a step that src names.
func stepCommandOf(src stepSource, name, usage, usageText, description string, run func(c *cli.Context, o pipeline.RunOptions) (any, error), extra ...cli.Flag) *cli.Command {
	flags := taskFlags()
	if src != planSource {
		flags = stepFlags(strFlag(src.flag, "", fmt.Sprintf("the %s: <output>/_relayout/%s (a URL for object storage)", src.what, src.file)))
	}
	flags = append(flags, extra...)
	return &cli.Command{
		Name:         name,
		Usage:        usage,
		UsageText:    usageText,
		Description:  description + "\n\n" + exitCodesHelp,
		Flags:        flags,
		Before:       withConfig(flags),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.String(src.flag) == "" {
				return errs.Usagef("no %s: pass --%s <output>/_relayout/%s", src.what, src.flag, src.file)
			}
			o, err := localOptions(c)
			if err != nil {
				return err
			}
			// The process, whatever tasks it runs, within --memory-limit.
			defer pipeline.HoldStepMemory(o.MemoryLimit, o.Parallel)()
			res, err := run(c, o)
			if err != nil {
				if c.Context.Err() != nil && !errs.Is(err, errs.BadInput) {
					// Interrupted (SIGTERM): name the step and the plan, not
					// just "context canceled".
					what, left := name, "nothing of it was committed"
					if per := c.Int("tasks-per-index"); per > 0 {
						i, _ := taskIndex(c)
						what, left = fmt.Sprintf("%s tasks of index %d (--tasks-per-index %d: from task %d)", name, i, per, i*per), "the tasks it printed a line for are complete, the others were not committed"
					} else if t := c.String("task"); strings.ContainsAny(t, ",-") {
						what, left = fmt.Sprintf("%s tasks %s", name, t), "the tasks it printed a line for are complete, the others were not committed"
					} else if t != "" {
						what = fmt.Sprintf("%s task %s", name, t)
					} else if t := os.Getenv("JOB_COMPLETION_INDEX"); t != "" {
						what = fmt.Sprintf("%s task %s", name, t)
					}
					return errs.TransientErr(fmt.Errorf("%s of %s %s interrupted (%v); %s: run it again", what, src.what, c.String(src.flag), context.Cause(c.Context), left))
				}
				return err
			}
			data, _ := json.Marshal(res)
			fmt.Fprintln(c.App.Writer, string(data))
			return nil
		},
	}
}

// taskCommand is a step run as numbered tasks (--task or
// $JOB_COMPLETION_INDEX).
//
// A list of tasks (--task 0-5) runs them one after another in this
// process, each as it runs alone (its own attempt, its task manifest
// last, one JSON line as it completes, the plan read again), so a worker
// that takes several tasks starts and faults its heap in once. Every index
// is checked against the plan before the first task starts. A failure
// stops the list; the tasks before it are complete, and running the
// list again runs them again, which is safe.
func taskCommand(name, usage string, run func(c *cli.Context, plan string, task int, o pipeline.RunOptions) (any, error)) *cli.Command {
	return stepCommand(name, usage, "relayout "+name+" --plan s3://b/relaid/_relayout/plan.json --task 3",
		"Safe to retry and to run twice: each attempt writes its own objects and a task manifest last.\n"+
			"--task 0-5 (or 0,3,7-9) runs several tasks one after another in one process, printing a line for each.",
		func(c *cli.Context, o pipeline.RunOptions) (any, error) {
			tasks, err := taskList(c)
			if err != nil {
				return nil, err
			}
			chunked := c.Int("tasks-per-index") != 0
			if chunked { // the chunk's tasks are the plan's by construction
				if tasks, err = taskChunk(c, name, c.Int("tasks-per-index"), o); err != nil {
					return nil, err
				}
			}
			k := c.Int("concurrent")
			if k < 1 {
				return nil, errs.Usagef("--concurrent must be at least 1 (got %d)", k)
			}
			if len(tasks) == 1 {
				return run(c, c.String("plan"), tasks[0], o)
			}
			if !chunked {
				if err := pipeline.CheckTasks(c.Context, c.String("plan"), name, tasks, o); err != nil {
					return nil, err
				}
			}
			k = min(k, len(tasks))
			// k tasks at once share the process's memory limit and
			// goroutines: each gets a k-th (a detect or reduce task whose
			// share is below the plan's limit refuses to start, exit 2).
			each := o
			each.MemoryLimit = o.MemoryLimit / int64(k)
			p := o.Parallel
			if p <= 0 {
				p = runtime.GOMAXPROCS(0)
			}
			each.Parallel = max(1, p/k)
			each.Together = k
			return runTasks(c, tasks, k, func(t int) (any, error) { return run(c, c.String("plan"), t, each) })
		}, intFlag("concurrent", 1, "with a --task list: how many of its tasks run at once, each given --memory-limit and --parallel divided by it"),
		intFlag("tasks-per-index", 0, "run tasks i*K to i*K+K-1 (the last index fewer), i being --task or $JOB_COMPLETION_INDEX: an Indexed Job of ceil(tasks/K) completions"))
}

// taskChunk is --tasks-per-index: the index (--task N or
// $JOB_COMPLETION_INDEX) names the per-th chunk of the step's tasks; the
// last chunk holds what is left. An index past the last chunk is exit 2
// naming the completions the plan needs.
func taskChunk(c *cli.Context, step string, per int, o pipeline.RunOptions) ([]int, error) {
	if per < 0 {
		return nil, errs.Usagef("--tasks-per-index must be at least 1 (got %d)", per)
	}
	i, err := taskIndex(c)
	if err != nil {
		return nil, errs.Usagef("--tasks-per-index: --task must be one index, the chunk's (%v)", err)
	}
	n, err := pipeline.StepTasks(c.Context, c.String("plan"), step, o)
	if err != nil {
		return nil, err
	}
	chunks := (n + per - 1) / per
	if i >= chunks {
		return nil, errs.Usagef("--tasks-per-index %d: index %d is past the last: the plan's %d %s tasks make %d chunks (indices 0 to %d; set the Job's completions to %d)", per, i, n, step, chunks, chunks-1, chunks)
	}
	var tasks []int
	for t := i * per; t < min((i+1)*per, n); t++ {
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// runTasks runs tasks, k at once, and prints each one's result as a JSON
// line in the list's order, a line as soon as the tasks before it have
// theirs; it returns the last task's result (printed by the step, as a
// single task's is) or the first error, after which no task starts.
func runTasks(c *cli.Context, tasks []int, k int, run func(task int) (any, error)) (any, error) {
	res := make([]any, len(tasks))
	done := make([]bool, len(tasks))
	var mu sync.Mutex
	printed := 0
	err := par.ForEach(c.Context, len(tasks), k, func(i int) error {
		r, err := run(tasks[i])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		res[i], done[i] = r, true
		for printed < len(tasks)-1 && done[printed] {
			data, _ := json.Marshal(res[printed])
			fmt.Fprintln(c.App.Writer, string(data))
			printed++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res[len(res)-1], nil
}

func keysCommand() *cli.Command {
	return stepCommandOf(keysSource, "keys", "run one key task of a key plan: read the key columns of its input range and write their summary",
		"relayout keys --keys s3://b/relaid/_relayout/keys.json --task 3",
		"Safe to retry and to run twice: each attempt writes its own objects and a task manifest last.\n"+
			"When every key task has completed, `relayout plan --keys URL` writes the plan.",
		func(c *cli.Context, o pipeline.RunOptions) (any, error) {
			task, err := taskIndex(c)
			if err != nil {
				return nil, err
			}
			return pipeline.KeysTask(c.Context, c.String("keys"), task, o)
		})
}

func mapCommand() *cli.Command {
	return taskCommand("map", "run one map task of a plan: route its input rows to the partitions",
		func(c *cli.Context, plan string, task int, o pipeline.RunOptions) (any, error) {
			return pipeline.MapTask(c.Context, plan, task, o)
		})
}

func detectCommand() *cli.Command {
	return taskCommand("detect", "run one detect task of a packed plan: find the columns that vary inside a query in one partition",
		func(c *cli.Context, plan string, task int, o pipeline.RunOptions) (any, error) {
			return pipeline.DetectTask(c.Context, plan, task, o)
		})
}

func reduceCommand() *cli.Command {
	return taskCommand("reduce", "run one reduce task of a plan: order one partition and write its files",
		func(c *cli.Context, plan string, task int, o pipeline.RunOptions) (any, error) {
			return pipeline.ReduceTask(c.Context, plan, task, o)
		})
}

func commitCommand() *cli.Command {
	return stepCommand("commit", "check every task of a plan, write manifest.json and remove the work prefix",
		"relayout commit --plan s3://b/relaid/_relayout/plan.json",
		"Fails, naming the task, if any map, detect or reduce task has not completed.",
		func(c *cli.Context, o pipeline.RunOptions) (any, error) {
			m, err := pipeline.CommitJob(c.Context, c.String("plan"), o)
			if err != nil {
				return nil, err
			}
			return map[string]any{"files": m.Totals.Files, "rows": m.Totals.Rows, "bytes": m.Totals.Bytes, "slices": m.Totals.Slices, "fingerprint": m.Fingerprint.Hash}, nil
		})
}
