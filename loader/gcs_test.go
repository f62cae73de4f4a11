package loader_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/pipeline"
	"github.com/relayout/relayout/storage"
)

// uploadTree copies the output folder local to url's prefix and returns
// its tensor bytes.
func uploadTree(t *testing.T, local, url string) int64 {
	t.Helper()
	loc, err := storage.OpenDir(context.Background(), url, false)
	if err != nil {
		t.Fatal(err)
	}
	var tensorBytes int64
	err = filepath.Walk(local, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		data, _ := os.ReadFile(p)
		if strings.HasPrefix(rel, "tensors/") {
			tensorBytes += int64(len(data))
		}
		return loc.Bucket.WriteAll(context.Background(), loc.Key(filepath.ToSlash(rel)), data, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	return tensorBytes
}

// TestRemoteGCSAndAzureBatchesEqualLocal: from gs:// (fake-gcs-server on
// loopback) and azblob:// (Azurite), through gocloud's drivers as the CLI
// opens them, batches equal the local ones, flat and packed, window and
// block order, 2 ranks x 2 workers.
func TestRemoteGCSAndAzureBatchesEqualLocal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 131})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 250})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 60})
	testutil.GCSServer(t, "bkt")
	azure := testutil.Azurite(t, "bkt")
	for _, store := range []string{"gs://bkt/%s/", "azblob://bkt/%s/" + azure} {
		for name, local := range map[string]string{"flat": flat, "packed": packed} {
			url := fmt.Sprintf(store, name)
			tb := uploadTree(t, local, url)
			remoteEqualsLocal(t, name, local, url, tb, loader.ReadOptions{Assignment: loader.Assignment{Seed: 11, Epoch: 1}, Batch: 64, WindowBytes: 32 << 10})
		}
	}
}
