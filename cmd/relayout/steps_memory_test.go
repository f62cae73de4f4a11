package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestStepsPeakRSSWithinMemoryLimit holds every distributed step's process
// to the --memory-limit it is given, as run is held to its own: a pod
// whose limit is the step's --memory-limit must not be OOM-killed. Before
// the steps held Go's soft limit, a map task of this input peaked at
// 212-227 MB at --memory-limit 128MiB and a reduce task at 150-178 MB.
// Each step runs its tasks as one list (--task 0-N), the way a worker
// given a range of an Indexed Job's indices does; the map list runs once
// more in a 128 MiB memory cgroup. The output must be run's at the same
// limit, byte for byte. The Hive output (a folder per country and day,
// about 1,200) gives each map task that many units: with the shuffle
// encoders' default zstd window its map step peaked at 121-134 MB.
func TestStepsPeakRSSWithinMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generates 1M rows")
	}
	in := testutil.Generate(t, gen.Options{Rows: 1_000_000, Files: 4, Seed: 21})
	const limit = 128 << 20
	for _, c := range []struct {
		name  string
		extra []string
	}{{"flat", nil}, {"packed", []string{"--query-key", "query_id"}}, {"hive", []string{"--output-partitioning", "hive", "--force-folders"}}} {
		t.Run(c.name, func(t *testing.T) {
			sizes := append([]string{"--slice-keys", "country,date"}, c.extra...)
			out := filepath.Join(t.TempDir(), "out")
			lim := []string{"--memory-limit", "128MiB", "--quiet"}
			// --map-bytes 16MiB: a map task of about a third of the input.
			planArgs := append([]string{"--input", in, "--output", out, "--map-bytes", "16MiB"}, sizes...)
			counts, peaks := stepsWithin(t, planArgs, lim, limit, 2, func(step string, args []string) {
				if step != "map" {
					return
				}
				// again, in a cgroup of the limit, as a pod
				cg := newMemoryCgroup(t, limit)
				if _, _, err := cg.run(t, args); err != nil {
					t.Fatalf("map in a %d MiB memory cgroup: %v", limit>>20, err)
				}
				if n := cg.oomKills(t); n != 0 {
					t.Fatalf("map: %d OOM kills in the %d MiB cgroup", n, limit>>20)
				}
			})
			t.Logf("peak RSS at --memory-limit 128MiB (%d map, %d reduce tasks): %s", counts.MapTasks, counts.Reduces, strings.Join(peaks, ", "))
			if c.name != "hive" {
				keyPassWithin(t, append([]string{"--input", in, "--output", filepath.Join(t.TempDir(), "keyed"), "--map-bytes", "16MiB"}, sizes...), lim, limit)
			}
			ref := filepath.Join(t.TempDir(), "ref")
			// run given the same limit: the plan fits its sizes to it.
			if r := relayout(t, nil, append([]string{"run", "--quiet", "--memory-limit", "128MiB", "--input", in, "--output", ref}, sizes...)...); r.code != 0 {
				t.Fatal(r.stderr)
			}
			testutil.SameTree(t, "the steps' output against run's", testutil.ReadTree(t, ref), testutil.ReadTree(t, out))
		})
	}
}

// keyPassWithin runs the key pass as tasks (plan --key-tasks, every key
// task, plan --keys) with planArgs and lim, and fails any step whose peak
// RSS passes limit: key task 0, the first with rows, also reads the
// encoding sample, which plan alone reads.
func keyPassWithin(t *testing.T, planArgs, lim []string, limit int64) {
	t.Helper()
	peak, printed := peakRSSAndOutput(t, append(append([]string{"plan", "--key-tasks"}, planArgs...), lim...))
	var kr struct {
		Keys     string `json:"keys"`
		KeyTasks int    `json:"key_tasks"`
	}
	if err := json.Unmarshal([]byte(printed), &kr); err != nil || kr.KeyTasks < 2 {
		t.Fatalf("plan --key-tasks printed %q (%v): want several key tasks", printed, err)
	}
	peaks := []string{fmt.Sprintf("plan --key-tasks %d MiB", peak>>20)}
	for i := 0; i < kr.KeyTasks; i++ {
		p := peakRSSOf(t, append([]string{"keys", "--keys", kr.Keys, "--task", fmt.Sprint(i)}, lim...))
		peak = max(peak, p)
		if i == 0 {
			peaks = append(peaks, fmt.Sprintf("key task 0 (the sample's) %d MiB", p>>20))
		}
	}
	merge := peakRSSOf(t, append([]string{"plan", "--keys", kr.Keys}, lim...))
	peaks = append(peaks, fmt.Sprintf("plan --keys %d MiB", merge>>20))
	t.Logf("key pass as tasks at --memory-limit %d MiB: %s", limit>>20, strings.Join(peaks, ", "))
	if peak = max(peak, merge); peak > limit {
		t.Fatalf("key pass as tasks: peak RSS %d MiB exceeds --memory-limit %d MiB (%s)", peak>>20, limit>>20, strings.Join(peaks, ", "))
	}
}

// stepsWithin runs `relayout plan` with planArgs and lim, then each step's
// tasks as one list (--task 0-N, the way a worker given a range of an
// Indexed Job's indices runs them) and commit, each under /usr/bin/time,
// and fails any step whose peak RSS passes limit, or a plan of fewer than
// minMaps map tasks. after, where not nil, is called with each step's name
// and arguments once it has run. It returns the plan's counts and each
// step's peak ("map 110 MiB").
func stepsWithin(t *testing.T, planArgs, lim []string, limit int64, minMaps int, after func(step string, args []string)) (stepCounts, []string) {
	t.Helper()
	peak, printed := peakRSSAndOutput(t, append(append([]string{"plan"}, planArgs...), lim...))
	var counts stepCounts
	if err := json.Unmarshal([]byte(printed), &counts); err != nil || counts.MapTasks < minMaps || counts.Reduces < 1 {
		t.Fatalf("plan printed %q (%v): want at least %d map tasks and a reduce task", printed, err, minMaps)
	}
	check := func(step string, peak int64) {
		t.Helper()
		if peak > limit {
			t.Fatalf("%s: peak RSS %d MiB exceeds --memory-limit %d MiB", step, peak>>20, limit>>20)
		}
	}
	check("plan", peak)
	peaks := []string{fmt.Sprintf("plan %d MiB", peak>>20)}
	for _, s := range []struct {
		name string
		n    int
	}{{"map", counts.MapTasks}, {"detect", counts.DetectTasks}, {"reduce", counts.Reduces}, {"commit", 0}} {
		if s.name == "detect" && s.n == 0 {
			continue
		}
		args := append([]string{s.name, "--plan", counts.Plan}, lim...)
		if s.name != "commit" {
			args = append(args, "--task", fmt.Sprintf("0-%d", s.n-1))
		}
		peak := peakRSSOf(t, args)
		peaks = append(peaks, fmt.Sprintf("%s %d MiB", s.name, peak>>20))
		check(s.name, peak)
		if after != nil {
			after(s.name, args)
		}
	}
	return counts, peaks
}
