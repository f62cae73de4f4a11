package loader_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/faultproxy"
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

// TestRemotePythonAzure: the NumPy loader reads azblob:// through
// Microsoft's client (azure-storage-blob) against Azurite, opened from the
// same URL and environment as the CLI: python/tests/remote_check.py
// compares its batches of the flat output with the local ones (window and
// block order, 2 ranks x 2 workers) and checks its cache budget, as for
// S3; python/tests/remote_azure.py reads with each kind of credential; the
// reader under injected faults (the packed output), and the PyTorch
// wrapper with forked workers, read the same batches.
func TestRemotePythonAzure(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import azure.storage.blob, xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-azure-storage or python3-xxhash not installed (make deps)")
	}
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 136})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 250})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 60})
	azure := testutil.Azurite(t, "bkt")
	url := "azblob://bkt/py-flat/" + azure
	tb := uploadTree(t, flat, url)
	out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_check.py"), flat, url, t.TempDir(), fmt.Sprint(tb/4))
	if !strings.Contains(string(out), `"configs": 8`) {
		t.Fatalf("remote_check.py: %s", out)
	}
	t.Logf("python flat: %s", out)
	// Each way of authenticating the CLI accepts (the account key, a SAS
	// token, a connection string), and the errors.
	out = testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_azure.py"), flat, url, t.TempDir())
	if !strings.Contains(string(out), `"connection_string"`) {
		t.Fatalf("remote_azure.py: %s", out)
	}
	t.Logf("python credentials: %s", out)
	// Under faults injected in front of Azurite (503s, resets, cut bodies
	// on about 11% of requests): the same batches, through the token and
	// through the client's own retries.
	target, err := neturl.Parse("http://" + strings.TrimPrefix(azure[strings.Index(azure, "domain="):], "domain="))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(httputil.NewSingleHostReverseProxy(target), 7)
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	tbPacked := uploadTree(t, packed, "azblob://bkt/py-packed/"+azure)
	faulty := "azblob://bkt/py-packed/?protocol=http&localemu=true&domain=" + strings.TrimPrefix(srv.URL, "http://")
	proxy.SetRates(faultproxy.Rates{Status503: 0.04, Reset: 0.03, CutBody: 0.04})
	out2, err := pythonReader(packed, faulty, t.TempDir(), tbPacked/3)
	proxy.SetRates(faultproxy.Rates{})
	if err != nil {
		t.Fatalf("the Python reader on Azure under faults: %v\n%s", err, out2)
	}
	if n := proxy.Counts.Status503.Load() + proxy.Counts.Reset.Load() + proxy.Counts.CutBody.Load(); n == 0 {
		t.Fatal("no fault was injected into the Python reader's requests")
	}
	t.Logf("under faults (%s): %s", proxy.Counts.String(), strings.TrimSpace(out2))
	// The PyTorch wrapper, 0 and 2 forked DataLoader workers sharing one
	// cache folder: each process makes its own client.
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		testutil.Missing(t, "python3-torch not installed (make deps)")
	}
	url = "azblob://bkt/py-torch/" + azure
	tb = uploadTree(t, flat, url)
	out = testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "torch_remote.py"), flat, url, t.TempDir(), fmt.Sprint(tb/3))
	if !strings.Contains(string(out), `"workers_2"`) {
		t.Fatalf("torch_remote.py: %s", out)
	}
	t.Logf("torch: %s", out)
}

// TestRemotePythonGCS: the NumPy loader reads gs:// (google-auth's session,
// the GCS XML and JSON APIs) from fake-gcs-server, found as the CLI finds
// it (STORAGE_EMULATOR_HOST): python/tests/remote_check.py on the flat
// output (every order, 2 ranks x 2 workers, the cache budget); the packed
// output under injected faults; the PyTorch wrapper with forked workers;
// the same batches as from local disk each time.
func TestRemotePythonGCS(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import google.auth, requests, xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-google-auth or python3-xxhash not installed (make deps)")
	}
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 137})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 250})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 60})
	srv := testutil.GCSServer(t, "bkt")
	tb := uploadTree(t, flat, "gs://bkt/py-flat/")
	out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_check.py"), flat, "gs://bkt/py-flat/", t.TempDir(), fmt.Sprint(tb/4))
	if !strings.Contains(string(out), `"configs": 8`) {
		t.Fatalf("remote_check.py: %s", out)
	}
	t.Logf("python flat: %s", out)

	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		testutil.Missing(t, "python3-torch not installed (make deps)")
	}
	out = testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "torch_remote.py"), flat, "gs://bkt/py-flat/", t.TempDir(), fmt.Sprint(tb/3))
	if !strings.Contains(string(out), `"workers_2"`) {
		t.Fatalf("torch_remote.py: %s", out)
	}
	t.Logf("torch: %s", out)

	// Under faults (503s, resets, cut bodies on about 11% of requests) in
	// front of the server.
	tbPacked := uploadTree(t, packed, "gs://bkt/py-packed/")
	target, err := neturl.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(httputil.NewSingleHostReverseProxy(target), 8)
	front := httptest.NewServer(proxy)
	defer front.Close()
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(front.URL, "http://"))
	proxy.SetRates(faultproxy.Rates{Status503: 0.04, Reset: 0.03, CutBody: 0.04})
	out2, err := pythonReader(packed, "gs://bkt/py-packed/", t.TempDir(), tbPacked/3)
	proxy.SetRates(faultproxy.Rates{})
	if err != nil {
		t.Fatalf("the Python reader on GCS under faults: %v\n%s", err, out2)
	}
	if n := proxy.Counts.Status503.Load() + proxy.Counts.Reset.Load() + proxy.Counts.CutBody.Load(); n == 0 {
		t.Fatal("no fault was injected into the Python reader's requests")
	}
	t.Logf("under faults (%s): %s", proxy.Counts.String(), strings.TrimSpace(out2))

	// A missing object and the CLI's query parameters.
	out = testutil.Python(t, "-c", `
import relayout_loader as rl
g = rl._GCSObjects("bkt", {}, 4)
try:
    g.get("py-packed/tensors/no-such-shard.safetensors", 0, 10)
    raise SystemExit("a missing object was read")
except rl._StoreRefused as e:
    assert "no-such-shard" in str(e) and "404" in str(e), e
for q, want in (({"endpoint": "x"}, "unknown query parameter 'endpoint'"), ({"zonal": "true"}, "gRPC"), ({"anonymous": "maybe"}, "not a boolean")):
    try:
        rl._GCSObjects("bkt", q, 4)
        raise SystemExit(f"{q} was accepted")
    except ValueError as e:
        assert want in str(e), (q, e)
print("errors ok")
`)
	if !strings.Contains(string(out), "errors ok") {
		t.Fatalf("errors: %s", out)
	}
}
