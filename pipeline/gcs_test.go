package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
)

// TestStepsAndRacesOnGCSAndAzure: on fake-gcs-server (gcsblob) and on
// Azurite (Microsoft's Azure Blob Storage emulator, azureblob), the
// distributed steps (the key pass as tasks, two workers) give run's bytes,
// and of two runs racing to one prefix exactly one commits: the lease and
// the manifest are creates with a generation-0 precondition on GCS and
// If-None-Match: * on Azure. The Azure races found gocloud v0.47's writer
// panicking on a refused conditional create.
func TestStepsAndRacesOnGCSAndAzure(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 2, Seed: 32, RowGroupRows: 8 << 10})
	ref := filepath.Join(t.TempDir(), "run")
	ctx := context.Background()
	if _, err := Run(ctx, distOpts(in, ref)); err != nil {
		t.Fatal(err)
	}
	want := readTree(t, ref)

	testutil.GCSServer(t, "bkt")
	azure := testutil.Azurite(t, "bkt")
	for _, st := range []struct{ name, root, query string }{{"gs", "gs://bkt/", ""}, {"azure", "azblob://bkt/", azure}} {
		loc, err := storage.OpenDir(ctx, st.root+st.query, false)
		if err != nil {
			t.Fatal(err)
		}
		upload(t, loc.Bucket, "impressions/", in)
		runDistributed(t, distOpts(st.root+"impressions/"+st.query, st.root+"steps"+st.query), 1<<20, 2)
		sameObjects(t, st.name+" steps", want, testutil.BucketTree(t, loc.Bucket, "steps/"))
		raceTrials(t, in, func(trial int) string { return fmt.Sprintf("%srace-%d/%s", st.root, trial, st.query) })
	}
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
