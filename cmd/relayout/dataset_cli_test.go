package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestDatasetKillAtRandomPoints: an incremental dataset run (generation 1
// has 4 days, the run adds 3) killed at random points leaves the current
// generation either as it was or wholly committed, verifying either way;
// a rerun then completes with the uninterrupted run's generation (same
// parts). Also checks gc, files and inspect on the result.
func TestDatasetKillAtRandomPoints(t *testing.T) {
	flat := testutil.Generate(t, gen.Options{Rows: 70_000, Files: 2, Days: 7, Seed: 61})
	all := filepath.Join(t.TempDir(), "all")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * exclude (date), date from read_parquet('%s/*.parquet')) to '%s' (format parquet, partition_by (date))`, flat, all))
	ents, _ := os.ReadDir(all)
	var days []string
	for _, e := range ents {
		days = append(days, e.Name())
	}
	if len(days) != 7 {
		t.Fatalf("%d days", len(days))
	}
	link := func(in string, ds []string) {
		for _, d := range ds {
			os.MkdirAll(filepath.Join(in, d), 0o755)
			if err := os.Link(filepath.Join(all, d, "data_0.parquet"), filepath.Join(in, d, "data_0.parquet")); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
		}
	}
	args := func(root, in string) []string {
		return []string{"run", "--quiet", "--dataset", root, "--input", in, "--slice-keys", "date,country", "--tensors", "--shard-bytes", "256KiB", "--memory-limit", "128MiB"}
	}
	// The reference: 4 days, then 7, uninterrupted.
	base := t.TempDir()
	in := filepath.Join(base, "in")
	link(in, days[:4])
	ref := filepath.Join(base, "ref")
	if r := relayout(t, nil, args(ref, in)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	link(in, days)
	t0 := time.Now()
	if r := relayout(t, nil, args(ref, in)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	incr := time.Since(t0)
	want, _ := os.ReadFile(filepath.Join(ref, "generations", "00000002.json"))
	parts := func(gen []byte) string { // the part paths a generation lists
		var b strings.Builder
		for _, l := range strings.Split(string(gen), "\n") {
			if strings.Contains(l, `"path": "parts/`) {
				b.WriteString(strings.TrimSpace(l))
			}
		}
		return b.String()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for trial := 0; trial < testutil.Trials(5); trial++ {
		root := filepath.Join(t.TempDir(), "ds")
		os.RemoveAll(in) // the reference's input path: the same part ids
		link(in, days[:4])
		if r := relayout(t, nil, args(root, in)...); r.code != 0 {
			t.Fatal(r.stderr)
		}
		link(in, days)
		sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[trial%2]
		delay := time.Duration(rng.Float64() * 1.1 * float64(incr))
		cmd := exec.Command(bin, args(root, in)...)
		var se bytes.Buffer
		cmd.Stderr = &se
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		cmd.Process.Signal(sig)
		cmd.Wait()
		// Whatever happened, the current generation verifies.
		if r := relayout(t, nil, "verify", root); r.code != 0 {
			t.Fatalf("trial %d (%v after %v): the current generation does not verify: %s", trial, sig, delay, r.stderr)
		}
		if r := relayout(t, nil, args(root, in)...); r.code != 0 {
			t.Fatalf("trial %d: rerun after %v at %v: exit %d: %s", trial, sig, delay, r.code, r.stderr)
		}
		got, _ := os.ReadFile(filepath.Join(root, "generations", "00000002.json"))
		if parts(got) != parts(want) || parts(want) == "" {
			t.Fatalf("trial %d (%v after %v): generation 2 lists other parts than the uninterrupted run's", trial, sig, delay)
		}
		if r := relayout(t, nil, "verify", "--deep", root); r.code != 0 {
			t.Fatalf("trial %d: verify --deep: %s", trial, r.stderr)
		}
		// gc removes what a killed run left unreferenced, nothing else.
		if r := relayout(t, nil, "gc", root, "--keep", "2"); r.code != 0 {
			t.Fatalf("trial %d: gc: %s", trial, r.stderr)
		}
		for _, g := range []string{"1", "2"} {
			if r := relayout(t, nil, "verify", "--generation", g, root); r.code != 0 {
				t.Fatalf("trial %d: generation %s after gc: %s", trial, g, r.stderr)
			}
		}
	}
	r := relayout(t, nil, "files", ref)
	if r.code != 0 || strings.Count(r.stdout, "\n") < 7 || !strings.Contains(r.stdout, "/parts/date=") {
		t.Fatalf("files: %d %q", r.code, r.stdout)
	}
	r = relayout(t, nil, "inspect", ref)
	if r.code != 0 || !strings.Contains(r.stdout, "current: generation 2") {
		t.Fatalf("inspect: %d %s %s", r.code, r.stdout, r.stderr)
	}
}
