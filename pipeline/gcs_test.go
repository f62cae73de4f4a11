package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
)

// TestGCSMatchesLocal runs the same job local->local and gs->gs against a
// real GCS-protocol server (fake-gcs-server, through gocloud's gcsblob as
// the CLI opens it) and requires byte-identical data files and manifests;
// verify then reads the remote output back.
func TestGCSMatchesLocal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 3, Seed: 21})
	local := filepath.Join(t.TempDir(), "out")
	withTensors := func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 256 << 10 }
	smallRun(t, in, local, withTensors)
	want := readTree(t, local)

	testutil.GCSServer(t, "bkt")
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, "gs://bkt/impressions", false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "impressions/", in)
	smallRun(t, "gs://bkt/impressions/", "gs://bkt/relaid/", withTensors)
	sameObjects(t, "gs", want, testutil.BucketTree(t, loc.Bucket, "relaid/"))
	res, err := verify.Output(ctx, "gs://bkt/relaid/", true, 2)
	if err != nil || !res.OK {
		t.Fatalf("verify on GCS: %+v %v", res, err)
	}
}

// TestGCSStepsAndRaces: on the GCS-protocol server, the distributed steps
// (the key pass as tasks, two workers) give run's bytes, and of two runs
// racing to one prefix exactly one commits: the lease and the manifest
// are creates with a generation-0 precondition there.
func TestGCSStepsAndRaces(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 32, RowGroupRows: 8 << 10})
	ref := filepath.Join(t.TempDir(), "run")
	ctx := context.Background()
	if _, err := Run(ctx, distOpts(in, ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)

	testutil.GCSServer(t, "bkt")
	loc, err := storage.OpenDir(ctx, "gs://bkt/impressions", false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "impressions/", in)
	runDistributed(t, distOpts("gs://bkt/impressions/", "gs://bkt/relaid"), 1<<20, 2)
	sameObjects(t, "steps", want, testutil.BucketTree(t, loc.Bucket, "relaid/"))

	raceTrials(t, in, func(trial int) string { return fmt.Sprintf("gs://bkt/race-%d/", trial) })
}

// TestAzureMatchesLocal is TestGCSMatchesLocal on azblob://, against
// Azurite (Microsoft's Azure Blob Storage emulator) through gocloud's
// azureblob, with the distributed steps and two racing runs too.
func TestAzureMatchesLocal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 32, RowGroupRows: 8 << 10})
	ctx := context.Background()
	params := testutil.Azurite(t, "bkt")
	loc, err := storage.OpenDir(ctx, "azblob://bkt/impressions"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, loc.Bucket, "impressions/", in)

	local := filepath.Join(t.TempDir(), "out")
	withTensors := func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 256 << 10 }
	smallRun(t, in, local, withTensors)
	smallRun(t, "azblob://bkt/impressions/"+params, "azblob://bkt/relaid/"+params, withTensors)
	sameObjects(t, "run", readTree(t, local), testutil.BucketTree(t, loc.Bucket, "relaid/"))
	if res, err := verify.Output(ctx, "azblob://bkt/relaid/"+params, true, 2); err != nil || !res.OK {
		t.Fatalf("verify on Azure: %+v %v", res, err)
	}

	ref := filepath.Join(t.TempDir(), "run")
	if _, err := Run(ctx, distOpts(in, ref)); err != nil {
		t.Fatal(err)
	}
	runDistributed(t, distOpts("azblob://bkt/impressions/"+params, "azblob://bkt/steps"+params), 1<<20, 2)
	sameObjects(t, "steps", readTree(t, ref), testutil.BucketTree(t, loc.Bucket, "steps/"))

	raceTrials(t, in, func(trial int) string { return fmt.Sprintf("azblob://bkt/race-%d/%s", trial, params) })
}

// sameObjects fails the test unless got (objects under a prefix) holds
// exactly want's files (reports aside), each with want's bytes
// (requireSameOutput).
func sameObjects(t *testing.T, what string, want, got map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d objects, local %d: %v", what, len(got), len(want), keysOf(got))
	}
	requireSameOutput(t, what, want, got)
}
