package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/faultproxy"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
)

// faultyS3 starts a loopback S3-protocol server behind a fault-injecting
// proxy and returns the URL parameters that reach it through the proxy.
func faultyS3(t *testing.T, bucket string, seed uint64) (string, *faultproxy.Proxy) {
	t.Helper()
	var px *faultproxy.Proxy
	srv := testutil.S3Server(t, bucket, func(inner http.Handler) http.Handler {
		px = faultproxy.New(inner, seed)
		return px
	})
	return srv.Params, px
}

// faultRates are harsh but survivable: the SDK retries requests, relayout
// retries cut bodies.
var faultRates = faultproxy.Rates{Status503: 0.01, Reset: 0.01, CutBody: 0.04, Slow: 0.02, SlowDelay: 2 * time.Millisecond}

// outcome checks a step that ran through faults: it either succeeded or
// failed as transient (exit 4: safe to retry); any other class is a bug in
// how a network fault is classified.
func outcome(t *testing.T, what string, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	if c := errs.ClassOf(err); c != errs.Transient {
		t.Fatalf("%s under network faults: %v (class %v), want success or exit 4", what, err, c)
	}
	return false
}

// TestRunAndVerifyUnderNetworkFaults: run (with tensors), verify and verify
// --deep against S3 through a proxy that answers 503, resets connections
// and cuts response bodies. Every attempt either commits an output
// byte-identical to a clean local run, or fails with exit 4 and commits
// nothing; verify of an intact output passes or exits 4, never 3. Retries,
// as an orchestrator's, get through.
func TestRunAndVerifyUnderNetworkFaults(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 3, Seed: 40})
	withTensors := func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 256 << 10 }
	ref := filepath.Join(t.TempDir(), "ref")
	smallRun(t, in, ref, withTensors)
	want := readTree(t, ref)
	ctx := context.Background()
	params, px := faultyS3(t, "bkt", 1)
	loc, err := storage.OpenDir(ctx, "s3://bkt/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "in/", in)
	px.SetRates(faultRates)
	failed, committed := 0, 0
	for trial := 0; trial < testutil.Trials(3); trial++ {
		out := fmt.Sprintf("s3://bkt/out-%d/%s", trial, params)
		var runErr error
		if trial == 1 {
			// A storm: most bodies cut, more than the retries absorb. The
			// attempt must fail as transient and leave nothing a reader or
			// the next attempt could mistake for output.
			px.SetRates(faultproxy.Rates{CutBody: 0.7})
		}
		for attempt := 0; attempt < 8; attempt++ {
			_, runErr = Run(ctx, RunOptions{Inputs: []string{"s3://bkt/in/" + params}, Output: out, SliceKeys: []string{"country", "date"},
				RowGroupBytes: 512 << 10, MinRowGroupBytes: 64 << 10, FileBytes: 1 << 20, Tensors: true, ShardBytes: 256 << 10})
			if outcome(t, "run", runErr) {
				break
			}
			failed++
			// A failed attempt commits nothing.
			px.SetRates(faultproxy.Rates{})
			if ok, err := loc.Bucket.Exists(ctx, fmt.Sprintf("out-%d/%s", trial, manifests.FileName)); err != nil || ok {
				t.Fatalf("trial %d attempt %d failed (%v) but a manifest exists (%v)", trial, attempt, runErr, err)
			}
			px.SetRates(faultRates)
		}
		if runErr != nil {
			t.Fatalf("trial %d: 8 attempts failed, last: %v", trial, runErr)
		}
		t.Logf("trial %d: committed; %s", trial, &px.Counts)
		committed++
		px.SetRates(faultproxy.Rates{})
		got := testutil.BucketTree(t, loc.Bucket, fmt.Sprintf("out-%d/", trial))
		delete(got, report.FileName)
		requireSameOutput(t, fmt.Sprintf("trial %d", trial), want, got)
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Fatalf("trial %d: stray object %s (a failed attempt's debris?)", trial, k)
			}
		}
		// verify of an intact output under faults; --deep (thousands of
		// range reads) once, under lighter faults.
		modes := []bool{false}
		if trial == 2 && trial < 3 {
			modes = append(modes, true)
		}
		for _, deep := range modes {
			if !deep {
				px.SetRates(faultRates)
			} else {
				px.SetRates(faultproxy.Rates{CutBody: 0.01, Reset: 0.002, Status503: 0.002})
			}
			t0 := time.Now()
			res, err := verify.Output(ctx, out, deep, 2)
			t.Logf("trial %d: verify (deep %v) %.1fs, %v", trial, deep, time.Since(t0).Seconds(), err)
			if outcome(t, fmt.Sprintf("verify (deep %v)", deep), err) && !res.OK {
				t.Fatalf("trial %d: verify (deep %v) of an intact output under faults: %s", trial, deep, res.Problem)
			}
		}
		px.SetRates(faultRates)
	}
	t.Logf("%s; %d runs committed, %d attempts failed as transient and were retried", &px.Counts, committed, failed)
	if px.Counts.CutBody.Load() == 0 || px.Counts.Status503.Load() == 0 || px.Counts.Reset.Load() == 0 {
		t.Fatalf("the proxy injected too few faults to mean anything: %s", &px.Counts)
	}
}

// TestDistributedUnderNetworkFaults: plan, map, reduce and commit against
// S3 through the faulty proxy, each step retried while it fails with exit 4
// (as Argo's retryStrategy would), commit an output byte-identical to run's.
func TestDistributedUnderNetworkFaults(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 2, Seed: 41, RowGroupRows: 8 << 10})
	ref := filepath.Join(t.TempDir(), "run")
	if _, err := Run(context.Background(), distOpts(in, ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)
	ctx := context.Background()
	params, px := faultyS3(t, "bkt", 2)
	loc, err := storage.OpenDir(ctx, "s3://bkt/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "in/", in)
	px.SetRates(faultRates)
	retries := 0
	retry := func(what string, step func() error) {
		for attempt := 0; attempt < 10; attempt++ {
			if outcome(t, what, step()) {
				return
			}
			retries++
		}
		t.Fatalf("%s: 10 attempts failed", what)
	}
	o := distOpts("s3://bkt/in/"+params, "s3://bkt/out/"+params)
	var res *PlanResult
	retry("plan", func() error {
		var err error
		res, _, err = PlanJob(ctx, o, 1<<20)
		if err != nil && errs.Is(err, errs.Precondition) {
			o.Overwrite = true // an earlier attempt committed nothing but its plan
		}
		return err
	})
	plan := "s3://bkt/out/_relayout/plan.json" + params
	local := RunOptions{Parallel: 2}
	for i := 0; i < res.MapTasks; i++ {
		retry(fmt.Sprintf("map %d", i), func() error { _, err := MapTask(ctx, plan, i, local); return err })
	}
	for j := 0; j < res.ReduceTasks; j++ {
		retry(fmt.Sprintf("reduce %d", j), func() error { _, err := ReduceTask(ctx, plan, j, local); return err })
	}
	retry("commit", func() error { _, err := CommitJob(ctx, plan, local); return err })
	px.SetRates(faultproxy.Rates{})
	requireSameOutput(t, "distributed", want, testutil.BucketTree(t, loc.Bucket, "out/"))
	t.Logf("%s; %d step attempts failed as transient and were retried", &px.Counts, retries)
}

// requireSameOutput requires every object of want but the report to be in
// got with the same bytes (manifests compared with their input paths
// blanked).
func requireSameOutput(t *testing.T, what string, want, got map[string][]byte) {
	t.Helper()
	for k, v := range want {
		if k == report.FileName {
			continue
		}
		g := got[k]
		if k == manifests.FileName {
			g, v = normaliseInputs(g), normaliseInputs(v)
		}
		if !bytes.Equal(g, v) {
			t.Fatalf("%s: %s differs from the clean local run", what, k)
		}
	}
}
