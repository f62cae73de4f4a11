package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/hugepages"
	"github.com/relayout/relayout/internal/testutil"
)

var bin string

func TestMain(m *testing.M) {
	arrowmem.InstallForTests()
	dir, err := os.MkdirTemp("", "relayout-cli-test")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "relayout")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func relayout(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, so.String(), se.String()}
}

func manifestKeys(t *testing.T, out string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		SliceKeys []string `json:"slice_keys"`
	}
	json.Unmarshal(data, &m)
	return m.SliceKeys
}

func TestExitCodes(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 1, Seed: 1})
	badSpec := filepath.Join(t.TempDir(), "spec.yaml")
	os.WriteFile(badSpec, []byte("tensors:\n  s: {column: session_id, dtype: float32}\n"), 0o644)
	// Each case gets an output folder of its own ({out} in its arguments),
	// holding a committed output first when it names one (flat or
	// tensors): no case depends on another having run.
	committed := map[string][]string{
		"flat":    {"run", "--quiet", "--input", in, "--slice-keys", "country", "--output"},
		"tensors": {"run", "--quiet", "--input", in, "--slice-keys", "country", "--tensors", "--shard-bytes", "64KiB", "--output"},
	}
	cases := []struct {
		name  string
		setup string // "", or the committed output {out} holds first
		args  []string
		code  int
		msg   string
	}{
		{"unknown flag", "", []string{"run", "--nope"}, 2, "nope"},
		{"bad size", "", []string{"run", "--input", in, "--output", "{out}", "--row-group-bytes", "lots"}, 2, "--row-group-bytes"},
		{"no input", "", []string{"run", "--output", "{out}"}, 2, "--input"},
		{"missing column", "", []string{"run", "--input", in, "--output", "{out}", "--slice-keys", "nation"}, 3, `"nation"`},
		{"missing input", "", []string{"run", "--input", filepath.Join(in, "nope.parquet"), "--output", "{out}"}, 3, "nope.parquet"},
		{"missing spec", "", []string{"run", "--input", in, "--output", "{out}", "--tensor-spec", "{out}/none.yaml"}, 2, "none.yaml"},
		{"bad spec", "", []string{"run", "--input", in, "--output", "{out}", "--tensor-spec", badSpec}, 2, `"session_id"`},
		{"bad shard size", "", []string{"run", "--input", in, "--output", "{out}", "--tensors", "--shard-bytes", "-5"}, 2, "--shard-bytes"},
		{"shard size and blocks", "", []string{"run", "--input", in, "--output", "{out}", "--tensors", "--shard-bytes", "1MiB", "--shard-blocks", "1"}, 2, "--shard-blocks"},
		{"bad shard blocks", "", []string{"run", "--input", in, "--output", "{out}", "--tensors", "--shard-blocks", "-1"}, 2, "--shard-blocks"},
		{"ok", "", []string{"run", "--quiet", "--input", in, "--output", "{out}", "--slice-keys", "country"}, 0, ""},
		{"exists", "flat", []string{"run", "--input", in, "--output", "{out}", "--slice-keys", "country"}, 5, "--overwrite"},
		{"verify ok", "flat", []string{"verify", "{out}", "--deep"}, 0, ""},
		{"tensors ok", "", []string{"run", "--quiet", "--input", in, "--output", "{out}", "--slice-keys", "country", "--tensors", "--shard-bytes", "64KiB"}, 0, ""},
		{"verify tensors", "tensors", []string{"verify", "{out}"}, 0, ""},
		{"verify missing", "", []string{"verify", "{out}/nothing"}, 3, "nothing"},
		{"verify damaged", "flat+damaged", []string{"verify", "{out}"}, 3, "part-00000.parquet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			if tc.setup != "" {
				kind, damaged := strings.CutSuffix(tc.setup, "+damaged")
				if r := relayout(t, nil, append(committed[kind], out)...); r.code != 0 {
					t.Fatalf("setup: %s", r.stderr)
				}
				if damaged { // a flipped byte in the middle of the first file
					p := filepath.Join(out, "parquet", "part-00000.parquet")
					data, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					data[len(data)/2] ^= 0xff
					os.WriteFile(p, data, 0o644)
				}
			}
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "{out}", out)
			}
			r := relayout(t, nil, args...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\nstderr: %s", r.code, tc.code, r.stderr)
			}
			if tc.code != 0 {
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				last := lines[len(lines)-1]
				if !strings.HasPrefix(last, "relayout: ") || !strings.Contains(last, tc.msg) {
					t.Fatalf("error line %q does not name %s", last, tc.msg)
				}
				if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
					t.Fatalf("stack trace on stderr: %s", r.stderr)
				}
			}
		})
	}
}

func TestFlagEnvConfigPrecedence(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 1, Seed: 2})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "relayout.yaml")
	os.WriteFile(cfg, []byte("input: ["+in+"]\nslice-keys: [date]\nrow-group-bytes: 1MiB\n"), 0o644)

	run := func(name string, env []string, args ...string) []string {
		out := filepath.Join(dir, name)
		r := relayout(t, env, append([]string{"run", "--quiet", "--output", out}, args...)...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", name, r.code, r.stderr)
		}
		return manifestKeys(t, out)
	}
	if got := run("file", nil, "--config", cfg); strings.Join(got, ",") != "date" {
		t.Errorf("config file: slice keys %v, want [date]", got)
	}
	if got := run("env", []string{"RELAYOUT_SLICE_KEYS=country"}, "--config", cfg); strings.Join(got, ",") != "country" {
		t.Errorf("env over file: slice keys %v, want [country]", got)
	}
	if got := run("flag", []string{"RELAYOUT_SLICE_KEYS=country"}, "--config", cfg, "--slice-keys", "device,os"); strings.Join(got, ",") != "device,os" {
		t.Errorf("flag over env: slice keys %v, want [device os]", got)
	}
	if got := run("envinput", []string{"RELAYOUT_INPUT=" + in, "RELAYOUT_SLICE_KEYS=os"}); strings.Join(got, ",") != "os" {
		t.Errorf("env only: slice keys %v, want [os]", got)
	}
	r := relayout(t, nil, "run", "--config", filepath.Join(dir, "missing.yaml"))
	if r.code != 2 {
		t.Errorf("missing config file: exit %d, want 2 (%s)", r.code, r.stderr)
	}
}

// TestKilledRunLeavesNoManifest kills runs mid-write: SIGTERM (the run
// cancels, cleans up and exits 4) and SIGKILL (no cleanup possible). Neither
// leaves a manifest; the next run removes what the killed one left.
func TestKilledRunLeavesNoManifest(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 300_000, Files: 2, Seed: 3})
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			tmp := t.TempDir()
			cmd := exec.Command(bin, "run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country,date",
				"--memory-limit", "128MiB", "--tmp-dir", tmp, "--row-group-bytes", "4MiB", "--file-bytes", "4MiB")
			var se bytes.Buffer
			cmd.Stderr = &se
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Kill once the first data file exists (mid-write).
			var err error
			exited := false
			deadline := time.Now().Add(60 * time.Second)
		poll:
			for time.Now().Before(deadline) {
				select {
				case err = <-done:
					exited = true
					break poll
				default:
				}
				if m, _ := filepath.Glob(filepath.Join(out, "parquet", "part-*.parquet")); len(m) > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if exited {
				t.Fatalf("the run exited before it could be killed: %v: %s", err, se.String())
			}
			cmd.Process.Signal(sig)
			err = <-done
			if err == nil {
				t.Skip("the run finished before it could be killed") // not expected at this size
			}
			if _, err := os.Stat(filepath.Join(out, "manifest.json")); !os.IsNotExist(err) {
				t.Fatal("a killed run left a manifest")
			}
			if sig == syscall.SIGTERM {
				if code := cmd.ProcessState.ExitCode(); code != 4 {
					t.Errorf("SIGTERM: exit %d, want 4 (retryable): %s", code, se.String())
				}
				if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
					t.Errorf("SIGTERM left temp files: %v", ents)
				}
				if m, _ := filepath.Glob(filepath.Join(out, "parquet", "*")); len(m) != 0 {
					t.Errorf("SIGTERM left data files: %v", m)
				}
			}
			if r := relayout(t, nil, "verify", out); r.code == 0 {
				t.Fatal("verify accepted a killed run's output")
			}
			// The rerun succeeds and clears what the killed run left.
			r := relayout(t, nil, "run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country,date",
				"--memory-limit", "128MiB", "--tmp-dir", tmp, "--row-group-bytes", "4MiB", "--file-bytes", "4MiB")
			if r.code != 0 {
				t.Fatalf("rerun: exit %d: %s", r.code, r.stderr)
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
				t.Errorf("temp files remain after the rerun: %v", ents)
			}
			all, _ := filepath.Glob(filepath.Join(out, "parquet", "*"))
			parts := testutil.Files(t, filepath.Join(out, "parquet"))
			if len(all) != len(parts) {
				t.Errorf("stray files after the rerun: %v", all)
			}
			if r := relayout(t, nil, "verify", "--deep", out); r.code != 0 {
				t.Fatalf("verify after rerun: %s", r.stderr)
			}
		})
	}
}

// TestLargeRowGroupsWithinMemoryLimit: tables in one or a few large row
// groups, as DuckDB writes them, stay within --memory-limit, or are refused
// up front (exit 2) naming the row group and the limit it needs, and that
// limit holds, as does a larger one; the output equals that of a run with
// room to spare told the sizes the limited run fitted.
//   - wide: 1,001 float columns, one row group of 20,000 rows (80 MB).
//     Routing took each unit's share of a row group whole: 482 MiB at
//     --memory-limit 384MiB, 299 at 256MiB, before routing's pieces were
//     bounded and the refusal added.
//   - blobs: 2,048 binaries of 40 KB a row group (80 MB), as images are
//     stored. Decoded whole, a row group took three times its bytes (the
//     strings' doubling, the copy to size): 726 MiB at 512MiB, for 98 KB
//     binaries; it is now decoded in slices.
//   - images: 256 values of 1 MB in one row group and one page of up to
//     100 MiB a column chunk, as DuckDB writes them. The writer gathered
//     1,024 rows at a time whatever their size, and was refused below 3 GiB
//     ("writing alone needs about 3138 MiB"); routing and the shuffle moved
//     them in pieces of 1,024 rows; the refusal decoded the row group first,
//     to 1.5 GiB at a 128 MiB limit.
//
// The refusal itself stays within the limit it refuses, and so do the
// distributed steps at the limit it names (a reduce task decoded a
// segment of compressible 1 MB values whole: 757 MiB at 717).
func TestLargeRowGroupsWithinMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes two tables of 80 MB and more")
	}
	cols := make([]string, 1000)
	for i := range cols {
		cols[i] = fmt.Sprintf("(random()*%d)::FLOAT AS c%d", i+1, i)
	}
	for _, tc := range []struct {
		name, sql string
		rows      int
		more      int                      // MiB above the named limit also tried
		most      int                      // MiB the refusal may ask for
		write     func(*testing.T, string) // writes the input instead of DuckDB's sql
	}{
		{"wide", fmt.Sprintf("SELECT (range%%10)::INT AS k, %s FROM range(20000)", strings.Join(cols, ", ")), 20000, 384, 400, nil},
		{"blobs", "SELECT (range%8)::INT AS k, range AS id, (repeat(chr((65 + range%26)::INT), 20000) || md5(range::VARCHAR) || repeat(md5((range*3)::VARCHAR), 600))::BLOB AS image FROM range(4096)", 2048, 0, 400, nil},
		{"images", "SELECT (range%4)::INT AS k, range AS id, (repeat(chr((65 + range%26)::INT), 1000000) || md5(range::VARCHAR))::BLOB AS image FROM range(256)", 256, 0, 800, nil},
		// Numbers held as dictionary indices: 256-float embeddings of
		// 10,000 distinct values decode to twice their footer's bytes.
		// The limit named from the footers was refused after the sample
		// with a larger one.
		{"embeddings", "SELECT (range%4)::INT AS k, list_transform(range(256), x -> ((hash(range*1000+x) % 10000)::FLOAT / 10000.0)) AS emb FROM range(60000)", 60000, 0, 400, nil},
		// Strings held as a dictionary, in row groups of 2^20 rows (as
		// pyarrow writes them): 9 bytes a row in the footer, 90 decoded.
		// The run was not sliced and went over the limit it named (346
		// MiB at 229 on 3M such rows).
		{"categories", "SELECT (range%8)::INT AS k, 'https://example.com/catalog/category/' || (hash(range) % 100)::VARCHAR || '/items' AS url, 'brand_name_' || (hash(range*3) % 2000)::VARCHAR AS brand, ['mobile','desktop','tablet'][1+(hash(range*5)%3)::INT] AS device, (hash(range*7)%1000)::DOUBLE AS price FROM range(1048576)", 1048576, 0, 600, nil},
		// The same strings without statistics (arrow-go's writer): only
		// the dictionary page's header tells their length. 196 MiB at
		// the 128 MiB limit named for 2M such rows.
		{"categories-nostats", "", 1048576, 0, 400, writeDictionaryNoStats},
		// Plain strings in row groups just under the size above which they
		// are decoded in slices (31 MiB decoded): decoding one whole held
		// five times its values (the builder's doubling, the buffers it
		// outgrew, the copy to size, the chunk), and the run peaked at 203
		// MiB at the 106 MiB named for 2M such rows.
		{"strings", "SELECT (range%20)::INT AS k, md5(range::VARCHAR) || md5((range*7)::VARCHAR)[1:20] AS s FROM range(1048576)", 524288, 0, 300, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := filepath.Join(t.TempDir(), tc.name+".parquet")
			if tc.write != nil {
				tc.write(t, in)
			} else {
				testutil.DuckDB(t, fmt.Sprintf("COPY (%s) TO '%s' (FORMAT parquet, ROW_GROUP_SIZE %d)", tc.sql, in, tc.rows))
			}
			args := func(limit, out string) []string {
				return []string{"run", "--quiet", "--input", in, "--output", out, "--slice-keys", "k",
					"--memory-limit", limit, "--tmp-dir", t.TempDir()}
			}
			peak, code, stderr := peakRSSExit(t, args("128MiB", filepath.Join(t.TempDir(), "refused")))
			m := regexp.MustCompile(fmt.Sprintf(`row group \d+ of \S*%s.parquet holds %d rows, .*raise --memory-limit to at least (\d+)MiB`, tc.name, tc.rows)).FindStringSubmatch(stderr)
			if code != 2 || m == nil || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("at 128MiB: exit %d, %q; want exit 2, one line naming the row group and the limit it needs", code, stderr)
			}
			if peak > 128<<20 {
				t.Fatalf("refusing --memory-limit 128MiB took %d MiB", peak>>20)
			}
			need, _ := strconv.Atoi(m[1])
			if need <= 128 || need > tc.most {
				t.Fatalf("asks for %d MiB; at most %d expected", need, tc.most)
			}
			limits := []int{need, need * 3 / 2}
			if tc.more > 0 {
				limits = append(limits, tc.more)
			}
			var out string
			for _, limit := range limits {
				out = filepath.Join(t.TempDir(), "out")
				peak := peakRSSOf(t, args(fmt.Sprintf("%dMiB", limit), out))
				t.Logf("peak RSS %d MiB at --memory-limit %dMiB", peak>>20, limit)
				if peak > int64(limit)<<20 {
					t.Fatalf("peak RSS %d MiB exceeds --memory-limit %dMiB", peak>>20, limit)
				}
			}
			// The distributed steps at the limit named, each within it,
			// write what run writes there.
			steps := filepath.Join(t.TempDir(), "steps")
			lim := []string{"--memory-limit", fmt.Sprintf("%dMiB", need), "--quiet", "--tmp-dir", t.TempDir()}
			_, peaks := stepsWithin(t, []string{"--input", in, "--output", steps, "--slice-keys", "k"}, lim, int64(need)<<20, 1, nil)
			t.Logf("steps at --memory-limit %dMiB, peak RSS: %s", need, strings.Join(peaks, ", "))
			atNeed := filepath.Join(t.TempDir(), "at-need")
			if r := relayout(t, nil, args(fmt.Sprintf("%dMiB", need), atNeed)...); r.code != 0 {
				t.Fatalf("run at %d MiB: %s", need, r.stderr)
			}
			stepsTree, runTree := testutil.ReadTree(t, steps), testutil.ReadTree(t, atNeed)
			for k, v := range runTree {
				if k != "_report.json" && k != "manifest.json" && !bytes.Equal(stepsTree[k], v) {
					t.Fatalf("the steps' %s differs from run's", k)
				}
			}
			var fitted struct {
				Config struct {
					RowGroupBytes    int64 `json:"row_group_bytes"`
					MinRowGroupBytes int64 `json:"min_row_group_bytes"`
					FileBytes        int64 `json:"file_bytes"`
				} `json:"config"`
			}
			mb, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
			if err := json.Unmarshal(mb, &fitted); err != nil {
				t.Fatal(err)
			}
			ref := filepath.Join(t.TempDir(), "ref")
			c := fitted.Config
			if r := relayout(t, nil, "run", "--quiet", "--input", in, "--output", ref, "--slice-keys", "k", "--memory-limit", "4GiB",
				"--row-group-bytes", fmt.Sprint(c.RowGroupBytes), "--min-row-group-bytes", fmt.Sprint(c.MinRowGroupBytes), "--file-bytes", fmt.Sprint(c.FileBytes)); r.code != 0 {
				t.Fatalf("reference run: %s", r.stderr)
			}
			got, want := testutil.ReadTree(t, out), testutil.ReadTree(t, ref)
			if len(got) != len(want) {
				t.Fatalf("%d files, the reference wrote %d", len(got), len(want))
			}
			for k, v := range want {
				if k != "_report.json" && !bytes.Equal(got[k], v) {
					t.Fatalf("%s differs from the reference run's", k)
				}
			}
		})
	}
}

// TestDryRunRefusesAsTheRunDoes: a dry run refuses a --memory-limit with
// the run's own line, and accepts one the run accepts. Its run of the
// sample (here the whole input: 20 rows of 1 MB strings) was held to the
// limit too, and refused with the sizes the dry run gives that run: "a
// 1125881881-row row group".
func TestDryRunRefusesAsTheRunDoes(t *testing.T) {
	in := filepath.Join(t.TempDir(), "docs.parquet")
	testutil.DuckDB(t, fmt.Sprintf("COPY (SELECT (range%%4)::INT AS k, repeat(chr((65 + range%%26)::INT), 1000000) AS doc FROM range(20)) TO '%s' (FORMAT parquet)", in))
	last := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return lines[len(lines)-1]
	}
	// 64 MiB is too small for the row group; 256 MiB fits (until 1 MB rows
	// were written a few at a time, the run refused it too).
	for _, tc := range []struct {
		limit string
		code  int
	}{{"64MiB", 2}, {"256MiB", 0}} {
		args := []string{"run", "--input", in, "--output", filepath.Join(t.TempDir(), "out"), "--slice-keys", "k", "--memory-limit", tc.limit}
		dry := relayout(t, nil, append(args, "--dry-run")...)
		run := relayout(t, nil, args...)
		if run.code != tc.code || (tc.code == 2 && !strings.Contains(run.stderr, "is too small")) {
			t.Fatalf("run at %s: exit %d, %q; want exit %d", tc.limit, run.code, run.stderr, tc.code)
		}
		if dry.code != run.code || (run.code != 0 && last(dry.stderr) != last(run.stderr)) {
			t.Fatalf("dry run at %s: exit %d, %q; the run: exit %d, %q", tc.limit, dry.code, last(dry.stderr), run.code, last(run.stderr))
		}
	}
}

// TestPeakRSSWithinMemoryLimit runs the binary on an input whose decoded
// size is about 4x --memory-limit, as a Kubernetes pod whose memory limit
// is the --memory-limit it passes: inside a memory cgroup of that size
// (swap included), with the binary copied in from inside the cgroup so its
// pages are charged to it as a pod's are. The run must finish without an
// OOM kill and without thrashing (no more major page faults, refaults of
// the binary's own pages evicted for want of room, than reading it back
// twice), and give the output of an
// unconstrained run. Outside the cgroup, its peak RSS (from /usr/bin/time,
// file-backed pages of the binary included) must stay within the limit,
// and within 192 MiB at --memory-limit 192MiB with every size left to the
// run.
func TestPeakRSSWithinMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generates 2.5M rows")
	}
	in := testutil.Generate(t, gen.Options{Rows: 2_500_000, Files: 8, Seed: 12})
	const limit = 128 << 20
	// Decoded size: the row groups' uncompressed bytes, from inspect.
	var res struct {
		Totals struct {
			Uncompressed int64 `json:"uncompressed_bytes"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(relayout(t, nil, "inspect", "--json", in).stdout), &res); err != nil {
		t.Fatal(err)
	}
	decoded := res.Totals.Uncompressed
	if decoded < 4*limit {
		t.Fatalf("input decodes to ~%d MiB, want >= 4x the %d MiB limit", decoded>>20, limit>>20)
	}
	args := func(out string) []string {
		return []string{"run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country,date",
			"--memory-limit", "128MiB", "--row-group-bytes", "4MiB", "--tmp-dir", t.TempDir()}
	}
	// In a cgroup, as a pod.
	cg := newMemoryCgroup(t, limit)
	podOut := filepath.Join(t.TempDir(), "pod")
	peak, major, err := cg.run(t, args(podOut))
	if err != nil {
		t.Fatalf("run in a %d MiB memory cgroup: %v", limit>>20, err)
	}
	if n := cg.oomKills(t); n != 0 {
		t.Fatalf("%d OOM kills in the %d MiB cgroup", n, limit>>20)
	}
	t.Logf("in a %d MiB memory cgroup: peak RSS %d MiB, %d major page faults", limit>>20, peak>>20, major)
	// Thrashing is reading the binary back over and over: a run that did
	// (before the memory plan counted the binary's pages) ran for tens of
	// minutes. Refaults of some of its pages are not: 96 to 18,737 major
	// faults were measured on the same machine, the run taking the same
	// time (132-155 s under load) whatever the count. So the bound is
	// reading the whole binary back twice.
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bound := 2 * st.Size() / int64(os.Getpagesize()); major > bound {
		t.Fatalf("%d major page faults in the cgroup, more than reading the %d MB binary back twice (%d): the process thrashes (its working set does not fit the limit)", major, st.Size()/1e6, bound)
	}

	// Outside it: peak RSS, binary pages included.
	out := filepath.Join(t.TempDir(), "out")
	peak = peakRSSOf(t, args(out))
	t.Logf("peak RSS %d MiB at --memory-limit 128MiB (input ~%d MiB decoded)", peak>>20, decoded>>20)
	if peak > limit {
		t.Fatalf("peak RSS %d MiB exceeds the %d MiB limit", peak>>20, limit>>20)
	}
	// At another limit, with every size left to the run: at 192 MiB the
	// plan once kept the default row groups, which its model passed, and
	// the run peaked at 212 MiB on this input.
	const limit2 = 192 << 20
	peak2 := peakRSSOf(t, []string{"run", "--quiet", "--input", in, "--output", filepath.Join(t.TempDir(), "out2"), "--slice-keys", "country,date",
		"--memory-limit", "192MiB", "--tmp-dir", t.TempDir()})
	t.Logf("peak RSS %d MiB at --memory-limit 192MiB, sizes left to the run", peak2>>20)
	if peak2 > limit2 {
		t.Fatalf("peak RSS %d MiB exceeds the %d MiB limit (sizes left to the run)", peak2>>20, limit2>>20)
	}
	// The reference is told the targets the limited run lowered to fit
	// (row groups, and files so that a footer fits), with room to spare.
	var fitted struct {
		Config struct {
			RowGroupBytes int64 `json:"row_group_bytes"`
			FileBytes     int64 `json:"file_bytes"`
		} `json:"config"`
	}
	mb, _ := os.ReadFile(filepath.Join(podOut, "manifest.json"))
	if err := json.Unmarshal(mb, &fitted); err != nil || fitted.Config.RowGroupBytes != 4<<20 || fitted.Config.FileBytes <= 0 {
		t.Fatalf("the limited run's manifest config: %+v, %v: want row groups lowered to 4 MiB and a file target", fitted.Config, err)
	}
	t.Logf("fitted: row groups %d MiB, files %d MiB", fitted.Config.RowGroupBytes>>20, fitted.Config.FileBytes>>20)
	ref := filepath.Join(t.TempDir(), "ref")
	if r := relayout(t, nil, "run", "--quiet", "--input", in, "--output", ref, "--slice-keys", "country,date", "--row-group-bytes", "4MiB",
		"--file-bytes", fmt.Sprint(fitted.Config.FileBytes)); r.code != 0 {
		t.Fatal(r.stderr)
	}
	b, _ := os.ReadFile(filepath.Join(ref, "manifest.json"))
	for _, o := range []string{out, podOut} {
		a, _ := os.ReadFile(filepath.Join(o, "manifest.json"))
		if !bytes.Equal(a, b) {
			t.Fatalf("the memory-limited run's manifest (%s) differs from the unconstrained run's", o)
		}
	}
	if r := relayout(t, nil, "verify", "--deep", podOut); r.code != 0 {
		t.Fatal(r.stderr)
	}
}

// peakRSSOf runs the binary with args and returns its peak RSS, binary
// pages included. Measured by /usr/bin/time, a small process that forks
// relayout: the rusage of a child started by this (large) test process
// would count the parent's pages shared until exec (Go starts children
// with vfork).
func peakRSSOf(t *testing.T, args []string) int64 {
	t.Helper()
	peak, _ := peakRSSAndOutput(t, args)
	return peak
}

// peakRSSExit runs the binary under /usr/bin/time, whatever its exit, and
// returns its peak RSS, exit code and stderr (time's own line left out).
func peakRSSExit(t *testing.T, args []string) (int64, int, string) {
	t.Helper()
	timeFile := filepath.Join(t.TempDir(), "time")
	cmd := exec.Command("/usr/bin/time", append([]string{"-o", timeFile, "-f", "%M", bin}, args...)...)
	var se bytes.Buffer
	cmd.Stderr = &se
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run: %v", err)
		}
		code = ee.ExitCode()
	}
	tf, err := os.ReadFile(timeFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(tf)), "\n")
	var peakKB int64
	if _, err := fmt.Sscan(lines[len(lines)-1], &peakKB); err != nil {
		t.Fatalf("/usr/bin/time output %q: %v", tf, err)
	}
	return peakKB * 1024, code, se.String()
}

// peakRSSAndOutput is peakRSSOf that also returns what the run printed.
func peakRSSAndOutput(t *testing.T, args []string) (int64, string) {
	t.Helper()
	timeFile := filepath.Join(t.TempDir(), "time")
	cmd := exec.Command("/usr/bin/time", append([]string{"-o", timeFile, "-f", "%M", bin}, args...)...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v: %s", err, se.String())
	}
	tf, err := os.ReadFile(timeFile)
	if err != nil {
		t.Fatal(err)
	}
	var peakKB int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(tf)), &peakKB); err != nil {
		t.Fatalf("/usr/bin/time output %q: %v", tf, err)
	}
	return peakKB * 1024, so.String()
}

// memoryCgroup is a memory cgroup (v1 or v2) made for one test.
type memoryCgroup struct {
	dir string
	v2  bool
}

// newMemoryCgroup makes a memory cgroup limited to limit bytes, swap
// included, removed when the test ends.
func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("relayout-test-%d", os.Getpid())
	cg := &memoryCgroup{}
	write := func(file string, v int64) error {
		return os.WriteFile(filepath.Join(cg.dir, file), []byte(fmt.Sprint(v)), 0o644)
	}
	var err error
	if ctl, e := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); e == nil && strings.Contains(string(ctl), "memory") {
		cg.dir, cg.v2 = filepath.Join("/sys/fs/cgroup", name), true
		if err = os.Mkdir(cg.dir, 0o755); err == nil {
			err = write("memory.max", limit)
			write("memory.swap.max", 0)
		}
	} else {
		cg.dir = filepath.Join("/sys/fs/cgroup/memory", name)
		if err = os.Mkdir(cg.dir, 0o755); err == nil {
			err = write("memory.limit_in_bytes", limit)
			write("memory.memsw.limit_in_bytes", limit) // absent without swap accounting
		}
	}
	if err != nil {
		testutil.Missing(t, "cannot make a memory cgroup (needs root and the memory controller): %v", err)
	}
	t.Cleanup(func() {
		for i := 0; i < 50 && os.Remove(cg.dir) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	return cg
}

// run copies the relayout binary and runs it with args, both from inside
// the cgroup, under /usr/bin/time; it returns the peak RSS and the major
// page faults. The copy is synced before it runs, as a pod's image is on
// disk before its container starts: unsynced, its 107 MB of dirty pages
// filled the cgroup, and the kernel, which cannot drop a dirty page,
// evicted the clean pages of the binary the run was using (thousands of
// major faults while other tests used the disk).
func (cg *memoryCgroup) run(t *testing.T, args []string) (peak, major int64, err error) {
	t.Helper()
	dir := t.TempDir()
	timeFile := filepath.Join(dir, "time")
	// The run dies with the test binary, also when a test timeout ends it
	// without cleanups: time by the parent-death signal set below,
	// relayout by the one setpriv sets for it (seen: a run left thrashing
	// in its cgroup for an hour after a timed-out test).
	script := `echo $$ > "$1/cgroup.procs" && cp "$2" "$3/relayout" && sync "$3/relayout" && shift 3 && exec /usr/bin/time -o "$TIMEFILE" -f "%M %F" setpriv --pdeathsig KILL "$@"`
	// A generous bound, not a timing check: a process that thrashes in the
	// cgroup runs for tens of minutes (seen before the memory plan counted
	// the binary's pages and the map phase), where this takes one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", script, "sh", cg.dir, bin, dir, filepath.Join(dir, "relayout")}, args...)...)
	cmd.Env = append(os.Environ(), "TIMEFILE="+timeFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("%v: %s", err, se.String())
	}
	tf, err := os.ReadFile(timeFile)
	if err != nil {
		return 0, 0, err
	}
	var kb int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(tf)), &kb, &major); err != nil {
		return 0, 0, fmt.Errorf("/usr/bin/time output %q: %v", tf, err)
	}
	return kb * 1024, major, nil
}

// oomKills returns how many processes the kernel killed in the cgroup for
// want of memory.
func (cg *memoryCgroup) oomKills(t *testing.T) int {
	file := "memory.oom_control"
	if cg.v2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n := 0
			fmt.Sscan(f[1], &n)
			return n
		}
	}
	return 0
}

func TestJSONLogs(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 1, Seed: 5})
	r := relayout(t, nil, "run", "--log-format", "json", "--input", in, "--output", filepath.Join(t.TempDir(), "o"), "--slice-keys", "country")
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) < 3 {
		t.Fatalf("want log lines, got %q", r.stderr)
	}
	var committed bool
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		if m["msg"] == "committed" {
			committed = true
		}
	}
	if !committed {
		t.Fatal("no committed log line")
	}
	if r := relayout(t, nil, "run", "--log-format", "xml", "--input", in, "--output", filepath.Join(t.TempDir(), "o")); r.code != 2 {
		t.Fatalf("bad --log-format: exit %d", r.code)
	}
}

// TestBoolFlagsBeforeValueFlags: a bool flag followed by a flag with a value
// (`--tensors --shard-bytes 4MiB`) parses, wherever positionals are.
func TestBoolFlagsBeforeValueFlags(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 1, Seed: 1})
	out := filepath.Join(t.TempDir(), "out")
	r := relayout(t, nil, "run", "--quiet", "--tensors", "--memory-limit", "256MiB", "--shard-bytes", "32KiB", "--input", in, "--output", out)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n, _ := filepath.Glob(filepath.Join(out, "tensors", "*.safetensors")); len(n) < 2 {
		t.Fatalf("--shard-bytes 32KiB was not applied: %d shards", len(n))
	}
	r = relayout(t, nil, "verify", out, "--deep", "--json")
	if r.code != 0 {
		t.Fatalf("verify: exit %d: %s", r.code, r.stderr)
	}
}

// TestDryRunCLI: `run --dry-run` prints the estimate, writes the JSON report
// where --report-json says and nothing under --output, and exits as run
// would (5 on an output holding a manifest).
func TestDryRunCLI(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 8_000, Files: 2, Seed: 4})
	out := filepath.Join(t.TempDir(), "out")
	rep := filepath.Join(t.TempDir(), "return.json")
	args := []string{"run", "--dry-run", "--input", in, "--output", out, "--slice-keys", "country,date", "--query-key", "query_id", "--tensors", "--report-json", rep}
	r := relayout(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"dry run: nothing written", "parquet bytes", "read bytes, all slices", "packing: 8000 rows into", "tensor transfer per epoch", "this estimate read"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the dry run created %s (%v)", out, err)
	}
	var got struct {
		Format   string `json:"format"`
		Estimate bool   `json:"estimate"`
		Output   struct {
			Rows   int64 `json:"rows"`
			Shards int   `json:"shards"`
		} `json:"output"`
		Packing struct {
			Queries int64 `json:"queries"`
		} `json:"packing"`
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil || got.Format != "relayout-report" || !got.Estimate || got.Output.Shards != 1 || got.Packing.Queries == 0 || got.Output.Rows != got.Packing.Queries {
		t.Fatalf("report %s: %+v %v", data, got, err)
	}
	if r := relayout(t, nil, "run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country"); r.code != 0 {
		t.Fatalf("run: exit %d %s", r.code, r.stderr)
	}
	if r := relayout(t, nil, args...); r.code != 5 || !strings.Contains(r.stderr, "--overwrite") {
		t.Fatalf("dry run over a committed output: exit %d, %s", r.code, r.stderr)
	}
	if r := relayout(t, nil, append(args, "--overwrite")...); r.code != 0 {
		t.Fatalf("dry run with --overwrite: exit %d, %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "manifest.json")); err != nil {
		t.Fatalf("a dry run with --overwrite touched the committed output: %v", err)
	}
	if r := relayout(t, nil, "run", "--dry-run", "--input", in, "--output", out+"2", "--slice-keys", "nation"); r.code != 3 || !strings.Contains(r.stderr, `"nation"`) {
		t.Fatalf("dry run with a missing column: exit %d, %s", r.code, r.stderr)
	}
}

// TestConfigAndFlagRefusals: nonsense flag values and misspelt config keys
// are refused with exit 2 naming the flag or key, before anything runs
// (before: accepted, or read as "default"); the CLI's comma form works in
// YAML too.
func TestConfigAndFlagRefusals(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 1, Seed: 4})
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	typo := write("typo.yaml", "slice_keys: [country]\n")
	comma := write("comma.yaml", "slice-keys: country,date\nrow-group-bytes: 1MiB\n")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--config", typo}, "unknown key slice_keys (did you mean slice-keys?)"},
		{[]string{"--memory-limit", "0"}, "--memory-limit 0"},
		{[]string{"--row-group-bytes", "0"}, "--row-group-bytes 0"},
		{[]string{"--file-bytes", "0"}, "--file-bytes 0"},
		{[]string{"--parallel", "-1"}, "--parallel -1"},
		{[]string{"--slice-keys", "country", "--boundary-keys", "5"}, "--boundary-keys 5"},
		{[]string{"--row-group-rows", "1"}, "--row-group-rows 1"},
		{[]string{"--tensors", "--shard-bytes", "1"}, "--shard-bytes 1"},
		{[]string{"--tmp-dir", filepath.Join(dir, "missing")}, "--tmp-dir"},
		{[]string{"--report-json", filepath.Join(dir, "missing", "r.json")}, "--report-json"},
	} {
		out := filepath.Join(t.TempDir(), "out")
		r := relayout(t, nil, append([]string{"run", "--quiet", "--input", in, "--output", out}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", c.args, r.code, r.stderr, c.msg)
		}
		if _, err := os.Stat(filepath.Join(out, "manifest.json")); err == nil {
			t.Errorf("%v: committed an output", c.args)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	if r := relayout(t, nil, "run", "--quiet", "--config", comma, "--input", in, "--output", out); r.code != 0 {
		t.Fatalf("comma form in YAML: exit %d: %s", r.code, r.stderr)
	}
	if got := manifestKeys(t, out); strings.Join(got, ",") != "country,date" {
		t.Fatalf("slice keys from YAML's comma form: %v", got)
	}
}

// TestS3RunPrintsNoSDKWarnings: against an S3-protocol store that returns
// none of the newer checksums, a quiet run and verify print nothing on
// stderr (before: the AWS SDK's "Response has no supported checksum" on
// every GET, at WARN or, in newer SDKs, DEBUG), since relayout sets the SDK's checksum mode to
// when_required and turns the EC2 metadata lookup off unless the user set
// them.
func TestS3RunPrintsNoSDKWarnings(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 2, Seed: 5})
	env, params := s3Env(t, "bkt")
	params = strings.Split(params, "&request_checksum")[0]
	out := "s3://bkt/out/" + params
	for _, args := range [][]string{
		{"run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country"},
		{"verify", "--deep", out},
	} {
		r := relayout(t, env, args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args[0], r.code, r.stderr)
		}
		if strings.TrimSpace(r.stderr) != "" {
			t.Fatalf("%v printed on stderr: %s", args[0], r.stderr)
		}
	}
	r := relayout(t, append(env, "AWS_RESPONSE_CHECKSUM_VALIDATION=when_supported"), "verify", out)
	// The control: the check above can fail. The SDK logs the line at WARN
	// (aws-sdk-go-v2 s3 before v1.114) or at DEBUG (since).
	if !strings.Contains(r.stderr, "no supported checksum") {
		t.Fatalf("with the SDK's default checksum mode stderr was %q; expected its lines about the missing checksum", r.stderr)
	}
}

// TestKillAtRandomPoints is the kill probe: runs killed (SIGKILL, or
// SIGTERM) at random moments, from startup to commit. A killed run leaves
// no manifest (SIGTERM: exit 4); whatever it left, the next run clears it
// and commits output byte-identical to an uninterrupted run's. `make probe`
// runs it many times over.
func TestKillAtRandomPoints(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 120_000, Files: 3, Seed: 13})
	args := func(out string) []string {
		return []string{"run", "--quiet", "--input", in, "--output", out, "--slice-keys", "country,date",
			"--row-group-bytes", "1MiB", "--file-bytes", "2MiB", "--memory-limit", "128MiB", "--tensors", "--shard-bytes", "1MiB"}
	}
	ref := filepath.Join(t.TempDir(), "ref")
	t0 := time.Now()
	if r := relayout(t, nil, args(ref)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	full := time.Since(t0)
	want, _ := os.ReadFile(filepath.Join(ref, "manifest.json"))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	killed, finished := 0, 0
	for trial := 0; trial < testutil.Trials(6); trial++ {
		out := filepath.Join(t.TempDir(), "out")
		sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[trial%2]
		delay := time.Duration(rng.Float64() * 1.2 * float64(full))
		cmd := exec.Command(bin, args(out)...)
		var se bytes.Buffer
		cmd.Stderr = &se
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		afterCommit := false
		if err == nil {
			finished++
		} else if _, serr := os.Stat(filepath.Join(out, "manifest.json")); serr == nil {
			// Killed after its commit point (while it wrote the report): the
			// manifest must be the whole committed one, checked below; its
			// lease is stale, and the next run takes it over.
			afterCommit = true
			finished++
		} else {
			killed++
			if sig == syscall.SIGTERM && cmd.ProcessState.ExitCode() != 4 {
				// A SIGTERM within the first milliseconds, before main
				// installs its handler, kills the process by default:
				// acceptable only if it had not touched the output yet.
				if _, err := os.Stat(out); cmd.ProcessState.ExitCode() != -1 || err == nil {
					t.Fatalf("trial %d: SIGTERM after %v: exit %d, want 4: %s", trial, delay, cmd.ProcessState.ExitCode(), se.String())
				}
			}
			if r := relayout(t, nil, args(out)...); r.code != 0 {
				t.Fatalf("trial %d: rerun after %v at %v: exit %d: %s", trial, sig, delay, r.code, r.stderr)
			}
		}
		got, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
		if !bytes.Equal(got, want) {
			t.Fatalf("trial %d (%v after %v): the committed manifest differs from the uninterrupted run's", trial, sig, delay)
		}
		if r := relayout(t, nil, "verify", out); r.code != 0 {
			t.Fatalf("trial %d: verify: %s", trial, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(out, "_relayout.lock")); err == nil && !afterCommit {
			t.Fatalf("trial %d: a lease was left after the commit", trial)
		}
	}
	t.Logf("%d runs killed at random points and rerun, %d finished (or committed) before the signal; all byte-identical", killed, finished)
}

// TestInterruptedTaskNamesItself: a SIGTERM'd reduce exits 4 naming the
// step, task and plan (it printed "context canceled").
func TestInterruptedTaskNamesItself(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 400_000, Files: 2, Seed: 14})
	out := filepath.Join(t.TempDir(), "out")
	if r := relayout(t, nil, "plan", "--quiet", "--input", in, "--output", out, "--slice-keys", "country,date", "--row-group-bytes", "4MiB"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	plan := filepath.Join(out, "_relayout", "plan.json")
	if r := relayout(t, nil, "map", "--quiet", "--plan", plan, "--task", "0"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	// interrupt starts a reduce with args, sends it SIGTERM once it has
	// begun writing the output, and returns its exit code and stderr; the
	// files it wrote are removed for the next.
	interrupt := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"reduce", "--quiet", "--plan", plan}, args...)...)
		var se bytes.Buffer
		cmd.Stderr = &se
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
			if m, _ := filepath.Glob(filepath.Join(out, "parquet", "*")); len(m) > 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err == nil {
			t.Fatalf("reduce %v finished before the signal: make the input larger (%s)", args, se.String())
		}
		for _, f := range testutil.Files(t, filepath.Join(out, "parquet")) {
			os.Remove(f)
		}
		return cmd.ProcessState.ExitCode(), se.String()
	}
	if code, se := interrupt("--task", "0"); code != 4 || !strings.Contains(se, "reduce task 0 of plan "+plan+" interrupted") {
		t.Fatalf("exit %d, stderr %q; want exit 4 naming the task and plan", code, se)
	}
	// A list names the list, and says that only some of it may be done.
	// (A range of one: the plan has one partition.)
	if code, se := interrupt("--task", "0-0"); code != 4 || !strings.Contains(se, "reduce tasks 0-0 of plan "+plan+" interrupted") || !strings.Contains(se, "the others were not committed") {
		t.Fatalf("exit %d, stderr %q; want exit 4 naming the list and what of it is complete", code, se)
	}
	// So does an Indexed Job's chunk (--tasks-per-index): its index names
	// tasks, not one task.
	if code, se := interrupt("--task", "0", "--tasks-per-index", "2"); code != 4 || !strings.Contains(se, "reduce tasks of index 0 (--tasks-per-index 2: from task 0) of plan "+plan+" interrupted") || !strings.Contains(se, "the others were not committed") {
		t.Fatalf("exit %d, stderr %q; want exit 4 naming the index's tasks", code, se)
	}
}

// stepCounts is what `relayout plan` prints.
type stepCounts struct {
	Plan        string `json:"plan"`
	MapTasks    int    `json:"map_tasks"`
	DetectTasks int    `json:"detect_tasks"`
	Reduces     int    `json:"reduce_tasks"`
}

// runThenPlan generates a 60,000-row input (seed), runs relayout run on it
// into want and plans the same layout (1 MiB files and row groups, 256 KiB
// map tasks, extra options) into out.
func runThenPlan(t *testing.T, seed uint64, extra ...string) (want, out string, counts stepCounts) {
	t.Helper()
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 3, Seed: seed})
	dir := t.TempDir()
	sizes := append([]string{"--slice-keys", "country,date", "--file-bytes", "1MiB", "--row-group-bytes", "1MiB"}, extra...)
	want, out = filepath.Join(dir, "run"), filepath.Join(dir, "steps")
	if r := relayout(t, nil, append([]string{"run", "--quiet", "--input", in, "--output", want}, sizes...)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r := relayout(t, nil, append([]string{"plan", "--quiet", "--input", in, "--output", out, "--map-bytes", "256KiB"}, sizes...)...)
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &counts); err != nil {
		t.Fatal(err)
	}
	return want, out, counts
}

// TestTaskListsMatchRun: a worker given a list of tasks (--task 0-5,
// --task 0,2-3) runs them in one process, one after another or several at
// once (--concurrent), prints one JSON line per task in the list's order,
// and the committed output (packed, so with a detect step) is
// byte-identical to relayout run's. Lists that name no task, a task twice,
// a reversed range or a task the plan lacks are exit 2 before any task
// runs.
func TestTaskListsMatchRun(t *testing.T) {
	want, out, counts := runThenPlan(t, 21, "--query-key", "query_id")
	if counts.MapTasks < 3 || counts.Reduces < 3 || counts.DetectTasks < 3 {
		t.Fatalf("the plan has %d map, %d detect and %d reduce tasks: make the input larger", counts.MapTasks, counts.DetectTasks, counts.Reduces)
	}
	// Refused up front: nothing of the map step is written.
	for _, bad := range []string{"", "x", "2-1", "0,0", "0-1,1", fmt.Sprintf("0-%d", counts.MapTasks), "-1"} {
		args := []string{"map", "--quiet", "--plan", counts.Plan, "--task", bad}
		if bad == "" {
			args = args[:len(args)-2]
		}
		if r := relayout(t, []string{"JOB_COMPLETION_INDEX="}, args...); r.code != 2 {
			t.Fatalf("--task %q: exit %d, want 2: %s", bad, r.code, r.stderr)
		}
		if m, _ := filepath.Glob(filepath.Join(out, "_relayout", "map", "*")); len(m) > 0 {
			t.Fatalf("--task %q was refused, but %v was written", bad, m)
		}
	}
	// Every step as lists of several tasks, in the forms a user writes.
	lists := map[string]string{
		"map":    fmt.Sprintf("0-%d", counts.MapTasks-1),
		"detect": fmt.Sprintf("0,1-%d", counts.DetectTasks-1),
		"reduce": fmt.Sprintf("0-1,2-%d", counts.Reduces-1),
	}
	n := map[string]int{"map": counts.MapTasks, "detect": counts.DetectTasks, "reduce": counts.Reduces}
	// Several at once (--concurrent), each given a share of the memory
	// limit: the lines still come in the list's order.
	extra := map[string][]string{"map": {"--concurrent", "2"}, "reduce": {"--concurrent", "3", "--memory-limit", "6GiB"}}
	for _, task := range []string{"0-1", "0"} {
		if r := relayout(t, nil, "map", "--quiet", "--plan", counts.Plan, "--task", task, "--concurrent", "0"); r.code != 2 {
			t.Fatalf("--task %s --concurrent 0: exit %d, want 2: %s", task, r.code, r.stderr)
		}
	}
	for _, step := range []string{"map", "detect", "reduce"} {
		if step == "reduce" {
			// A share below the plan's memory limit: refused, nothing written.
			r := relayout(t, nil, "reduce", "--quiet", "--plan", counts.Plan, "--task", lists[step], "--concurrent", "2")
			if r.code != 2 || !strings.Contains(r.stderr, "--memory-limit") {
				t.Fatalf("reduce --concurrent 2 at the plan's memory limit: exit %d, want 2 naming --memory-limit: %s", r.code, r.stderr)
			}
			if m, _ := filepath.Glob(filepath.Join(out, "parquet", "*")); len(m) > 0 {
				t.Fatalf("a refused reduce wrote %v", m)
			}
		}
		r := relayout(t, nil, append([]string{step, "--quiet", "--plan", counts.Plan, "--task", lists[step]}, extra[step]...)...)
		if r.code != 0 {
			t.Fatalf("%s --task %s: %s", step, lists[step], r.stderr)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) != n[step] {
			t.Fatalf("%s --task %s printed %d lines, want one per task (%d): %s", step, lists[step], len(lines), n[step], r.stdout)
		}
		for i, l := range lines {
			var d struct {
				Kind string `json:"kind"`
				Task int    `json:"task"`
			}
			if err := json.Unmarshal([]byte(l), &d); err != nil || d.Kind != step || d.Task != i {
				t.Fatalf("%s line %d is %q (%v), want task %d's manifest", step, i, l, err, i)
			}
		}
	}
	if r := relayout(t, nil, "commit", "--quiet", "--plan", counts.Plan); r.code != 0 {
		t.Fatal(r.stderr)
	}
	files := func(root string) []string { // the output's files but the report
		var fs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && filepath.Base(p) != "_report.json" {
				rel, _ := filepath.Rel(root, p)
				fs = append(fs, rel)
			}
			return nil
		})
		return fs
	}
	wantFiles, gotFiles := files(want), files(out)
	if !slices.Equal(wantFiles, gotFiles) {
		t.Fatalf("run wrote %v, the task lists %v", wantFiles, gotFiles)
	}
	for _, f := range wantFiles {
		a, _ := os.ReadFile(filepath.Join(want, f))
		b, _ := os.ReadFile(filepath.Join(out, f))
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs from relayout run's", f)
		}
	}
}

// TestTasksPerIndex: with --tasks-per-index K, an Indexed Job's index i
// runs tasks i*K to i*K+K-1, the last index what is left; ceil(tasks/K)
// indices run every task once, the output is relayout run's, and an index
// past the last is exit 2 naming the completions the plan needs.
func TestTasksPerIndex(t *testing.T) {
	want, out, counts := runThenPlan(t, 22)
	const per = 2
	if counts.MapTasks < 3 || counts.MapTasks%per == 0 || counts.Reduces < 3 {
		t.Fatalf("the plan has %d map and %d reduce tasks: want an odd count of at least 3 map tasks and 3 reduces", counts.MapTasks, counts.Reduces)
	}
	for _, step := range []struct {
		name string
		n    int
	}{{"map", counts.MapTasks}, {"reduce", counts.Reduces}} {
		chunks := (step.n + per - 1) / per
		// Past the last index: refused, naming the completions.
		r := relayout(t, []string{fmt.Sprintf("JOB_COMPLETION_INDEX=%d", chunks)}, step.name, "--quiet", "--plan", counts.Plan, "--tasks-per-index", fmt.Sprint(per))
		if r.code != 2 || !strings.Contains(r.stderr, fmt.Sprintf("set the Job's completions to %d", chunks)) {
			t.Fatalf("%s index %d of %d: exit %d, want 2 naming %d completions: %s", step.name, chunks, chunks, r.code, chunks, r.stderr)
		}
		var ran []int
		for i := 0; i < chunks; i++ {
			r := relayout(t, []string{fmt.Sprintf("JOB_COMPLETION_INDEX=%d", i)}, step.name, "--quiet", "--plan", counts.Plan, "--tasks-per-index", fmt.Sprint(per))
			if r.code != 0 {
				t.Fatalf("%s index %d: %s", step.name, i, r.stderr)
			}
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				var d struct {
					Task int `json:"task"`
				}
				if err := json.Unmarshal([]byte(l), &d); err != nil {
					t.Fatalf("%s index %d printed %q", step.name, i, r.stdout)
				}
				ran = append(ran, d.Task)
			}
		}
		for i, task := range ran {
			if task != i || len(ran) != step.n {
				t.Fatalf("%s: the indices ran tasks %v, want 0 to %d once each", step.name, ran, step.n-1)
			}
		}
	}
	if r := relayout(t, nil, "commit", "--quiet", "--plan", counts.Plan); r.code != 0 {
		t.Fatal(r.stderr)
	}
	a, _ := os.ReadFile(filepath.Join(want, "manifest.json"))
	b, _ := os.ReadFile(filepath.Join(out, "manifest.json"))
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatal("the manifest differs from relayout run's")
	}
}

// reasonOf is a hugepages.Worthwhile reason without the fault cost the
// process measured.
func reasonOf(why string) string {
	before, _, _ := strings.Cut(why, " costs only ")
	return before
}

// TestHugePagesFlag: --huge-pages auto asks for huge pages for an
// in-memory run's heap where they are worthwhile on this host and says why
// not where not; on asks wherever the kernel grants them on request; off
// never asks (the run's debug log says which).
func TestHugePagesFlag(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 1, Seed: 5})
	mode := hugepages.Mode()
	worth, why := hugepages.Worthwhile()
	t.Logf("setting %q, worthwhile %v %s", mode, worth, why)
	for _, tc := range []struct {
		flag            string
		advised, refuse bool // the log says the heap was advised; says why not
	}{
		{"auto", worth, !worth},
		{"on", mode == "madvise", false},
		{"off", false, false},
	} {
		r := relayout(t, nil, "run", "--log-format", "json", "--log-level", "debug", "--huge-pages", tc.flag,
			"--input", in, "--output", filepath.Join(t.TempDir(), "o"), "--slice-keys", "country")
		if r.code != 0 {
			t.Fatalf("--huge-pages %s: exit %d: %s", tc.flag, r.code, r.stderr)
		}
		var advised, refused bool
		for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("not a JSON log line: %q", l)
			}
			switch m["msg"] {
			case "heap advised for huge pages":
				advised = true
			case "huge pages not asked for":
				// The same reason; a measured fault cost in it is the
				// run's own measurement, so only the words before it count.
				got, _ := m["why"].(string)
				refused = reasonOf(got) == reasonOf(why)
			}
		}
		if advised != tc.advised || refused != tc.refuse {
			t.Fatalf("--huge-pages %s: advised %v (want %v), said why not %v (want %v)\n%s", tc.flag, advised, tc.advised, refused, tc.refuse, r.stderr)
		}
	}
}

// TestTaskListRoomCoversItsHeap: map tasks run two at a time in one
// process (--task list --concurrent 2) ask for huge pages for room that
// covers the process's peak resident set (debug log "heap room"; the
// child's maximum RSS). Before, each asked for its own decoding only,
// about 4 times a row group, and the room the first made was the
// process's: two tasks of the 1M-row log, and their shuffles, grew the
// heap to 220 MB over 87 MB of room, the rest faulted 4 KiB at a time.
// --huge-pages on, so that the room is asked for on any host; where the
// kernel grants no huge pages on request it is only logged.
func TestTaskListRoomCoversItsHeap(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 200_000, Files: 2, Seed: 61, RowGroupRows: 32 << 10})
	out := filepath.Join(t.TempDir(), "o")
	r := relayout(t, nil, "plan", "--quiet", "--input", in, "--output", out, "--slice-keys", "country,date", "--map-bytes", "2MiB")
	var planned struct {
		MapTasks int `json:"map_tasks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &planned); r.code != 0 || err != nil || planned.MapTasks < 4 {
		t.Fatalf("plan: exit %d, %d map tasks (want 4 or more): %s%s", r.code, planned.MapTasks, r.stdout, r.stderr)
	}
	cmd := exec.Command(bin, "map", "--plan", filepath.Join(out, "_relayout", "plan.json"), "--task", fmt.Sprintf("0-%d", planned.MapTasks-1), "--concurrent", "2",
		"--memory-limit", "4GiB", "--huge-pages", "on", "--log-format", "json", "--log-level", "debug")
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("map: %v: %s", err, se.String())
	}
	peak := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // KiB on Linux
	var rooms []int64
	for _, l := range strings.Split(strings.TrimSpace(se.String()), "\n") {
		var m struct {
			Msg      string  `json:"msg"`
			Bytes    float64 `json:"bytes"`
			Together float64 `json:"together"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		if m.Msg == "heap room" {
			if m.Together != 2 {
				t.Errorf("a task asked for room for %v tasks, want 2", m.Together)
			}
			rooms = append(rooms, int64(m.Bytes))
		}
	}
	t.Logf("rooms asked for %v, peak resident set %d MiB", rooms, peak>>20)
	if len(rooms) != planned.MapTasks {
		t.Fatalf("%d map tasks asked for room, want %d:\n%s", len(rooms), planned.MapTasks, se.String())
	}
	for _, r := range rooms {
		if r < peak {
			t.Errorf("a map task asked for %d MiB of room; the process's resident set reached %d MiB", r>>20, peak>>20)
		}
	}
}

// TestShownEscapesControlCharacters: inspect and the dry run print a slice
// key value as it is, unless it holds a rune that does not print (an
// escape sequence would act on the operator's terminal, a newline break
// the table): then quoted, escapes visible.
func TestShownEscapesControlCharacters(t *testing.T) {
	for v, want := range map[any]string{
		"plain": "plain", "día": "día", "a b": "a b", int64(7): "7",
		"red\x1b[31m": `"red\x1b[31m"`, "two\nlines": `"two\nlines"`, "tab\there": `"tab\there"`, "bell\a": `"bell\a"`,
	} {
		if got := shown(v); got != want {
			t.Errorf("shown(%q) = %s, want %s", v, got, want)
		}
	}
}

// TestReportRefusesWhatItCannotRender: `relayout report` refuses, exit 3
// with one line, a file that is not JSON, JSON that is not a report, and
// a report of a newer format version (rendered before, as if its fields
// meant what version 1's do); the message had a trailing ": <nil>".
func TestReportRefusesWhatItCannotRender(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct{ body, want string }{
		"garbage.json": {"nope", "is not a relayout report: invalid character"},
		"other.json":   {`{"format": "something-else"}`, `is not a relayout report (format "something-else", want "relayout-report")`},
		"newer.json":   {`{"format": "relayout-report", "format_version": 99}`, "is report format version 99; this relayout renders version 1 and older"},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		r := relayout(t, nil, "report", "--html", filepath.Join(dir, "page.html"), p)
		if r.code != 3 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, "<nil>") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q; want exit 3 saying %q", name, r.code, r.stderr, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "page.html")); err == nil {
			t.Errorf("%s: a page was written", name)
		}
	}
}
