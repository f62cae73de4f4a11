package loader_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// pyStore is an object store the Python reader's checks run on.
type pyStore struct {
	// url is the URL of the output called name.
	url func(name string) string
	// server is the store's http://host:port; through is url(name) as
	// read through a proxy at host:port front (it may set the
	// environment for the rest of the test).
	server  string
	through func(name, front string) string
}

// pythonReadsStore runs the Python reader's checks on a store, each
// against the same output on local disk: python/tests/remote_check.py on
// the flat output (window and block order, 2 ranks x 2 workers, the cache
// budget, downloads per epoch), the PyTorch wrapper with 0 and 2 forked
// DataLoader workers sharing one cache folder (each process makes its own
// client), and an epoch of the packed output through a proxy that injects
// 503s, resets and cut bodies into about 11% of requests.
func pythonReadsStore(t *testing.T, st pyStore, flat, packed string) {
	t.Helper()
	tb := uploadTree(t, flat, st.url("py-flat"))
	out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_check.py"), flat, st.url("py-flat"), t.TempDir(), fmt.Sprint(tb/4))
	if !strings.Contains(string(out), `"configs": 8`) {
		t.Fatalf("remote_check.py: %s", out)
	}
	t.Logf("python flat: %s", out)

	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		testutil.Missing(t, "python3-torch not installed (make deps)")
	}
	out = testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "torch_remote.py"), flat, st.url("py-flat"), t.TempDir(), fmt.Sprint(tb/3))
	if !strings.Contains(string(out), `"workers_2"`) {
		t.Fatalf("torch_remote.py: %s", out)
	}
	t.Logf("torch: %s", out)

	tbPacked := uploadTree(t, packed, st.url("py-packed"))
	target, err := neturl.Parse(st.server)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(httputil.NewSingleHostReverseProxy(target), 7)
	tally := &readTally{next: proxy}
	front := httptest.NewServer(tally)
	defer front.Close()
	url := st.through("py-packed", strings.TrimPrefix(front.URL, "http://"))
	proxy.SetRates(faultproxy.Rates{Status503: 0.04, Reset: 0.03, CutBody: 0.04})
	faulted, err := pythonReader(packed, url, t.TempDir(), tbPacked/3)
	proxy.SetRates(faultproxy.Rates{})
	if err != nil {
		t.Fatalf("the Python reader under faults: %v\n%s", err, faulted)
	}
	if n := proxy.Counts.Status503.Load() + proxy.Counts.Reset.Load() + proxy.Counts.CutBody.Load(); n == 0 {
		t.Fatal("no fault was injected into the Python reader's requests")
	}
	t.Logf("under faults (%s): %s", proxy.Counts.String(), strings.TrimSpace(faulted))

	// The store down for data reads (its manifest still served): an error
	// naming a shard and the 503, each read tried at most 8 times (its
	// own retries, not repeated around them; TestRemoteStoreDown has S3's).
	proxy.SetRates(faultproxy.Rates{Status503: 1, Path: "/tensors/"})
	tally.on.Store(true)
	down, err := pythonReader(packed, url, t.TempDir(), tbPacked/3)
	tally.on.Store(false)
	proxy.SetRates(faultproxy.Rates{})
	lines := strings.Split(strings.TrimSpace(down), "\n")
	last := lines[len(lines)-1]
	if err == nil || !strings.Contains(last, "shard-") || !strings.Contains(last, "503") {
		t.Fatalf("the Python reader from a store answering 503: %v: %s", err, down)
	}
	reads, most, total := tally.counts()
	if most > 8 || reads == 0 {
		t.Fatalf("the Python reader asked a store answering 503 for one read %d times (%d reads), want at most 8", most, reads)
	}
	t.Logf("the store down: %d requests for %d reads, each at most %d times: %s", total, reads, most, last)
}

// readTally passes requests on to next and, while on, counts the requests
// for each read of tensors (an object and a range: S3's and GCS's Range,
// Azure's x-ms-range).
type readTally struct {
	next  http.Handler
	on    atomic.Bool
	mu    sync.Mutex
	reads map[string]int
}

func (rt *readTally) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.on.Load() && strings.Contains(r.URL.Path, "/tensors/") {
		rt.mu.Lock()
		if rt.reads == nil {
			rt.reads = map[string]int{}
		}
		rt.reads[r.URL.Path+" "+r.Header.Get("Range")+r.Header.Get("x-ms-range")]++
		rt.mu.Unlock()
	}
	rt.next.ServeHTTP(w, r)
}

// counts returns how many reads were counted, the most requests one of
// them took, and the requests in all.
func (rt *readTally) counts() (reads, most, total int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, n := range rt.reads {
		most, total = max(most, n), total+n
	}
	return len(rt.reads), most, total
}

// pyOutputs writes the flat and packed outputs the Python store tests read.
func pyOutputs(t *testing.T, seed uint64) (flat, packed string) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: seed})
	flat = run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 250})
	packed = run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 60})
	return flat, packed
}

// TestRemotePythonAzure: the NumPy loader reads azblob:// through
// Microsoft's client (azure-storage-blob) from Azurite, opened from the
// same URL and environment as the CLI: pythonReadsStore's checks, then
// python/tests/remote_azure.py reads with each kind of credential the CLI
// takes and checks the errors.
func TestRemotePythonAzure(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import azure.storage.blob, xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-azure-storage or python3-xxhash not installed (make deps)")
	}
	flat, packed := pyOutputs(t, 136)
	params := testutil.Azurite(t, "bkt")
	server := "http://" + params[strings.Index(params, "domain=")+len("domain="):]
	pythonReadsStore(t, pyStore{
		url:    func(name string) string { return "azblob://bkt/" + name + "/" + params },
		server: server,
		through: func(name, front string) string {
			return "azblob://bkt/" + name + "/?protocol=http&localemu=true&domain=" + front
		},
	}, flat, packed)
	out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_azure.py"), flat, "azblob://bkt/py-flat/"+params, t.TempDir())
	if !strings.Contains(string(out), `"connection_string"`) {
		t.Fatalf("remote_azure.py: %s", out)
	}
	t.Logf("python credentials: %s", out)
}

// TestRemotePythonGCS: the NumPy loader reads gs:// (google-auth's session,
// the GCS XML and JSON APIs) from fake-gcs-server, found as the CLI finds
// it (STORAGE_EMULATOR_HOST): pythonReadsStore's checks, then the errors
// (a missing object, the CLI's query parameters).
func TestRemotePythonGCS(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import google.auth, requests, xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-google-auth or python3-xxhash not installed (make deps)")
	}
	flat, packed := pyOutputs(t, 137)
	srv := testutil.GCSServer(t, "bkt")
	pythonReadsStore(t, pyStore{
		url:    func(name string) string { return "gs://bkt/" + name + "/" },
		server: srv.URL(),
		through: func(name, front string) string {
			t.Setenv("STORAGE_EMULATOR_HOST", front)
			return "gs://bkt/" + name + "/"
		},
	}, flat, packed)
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(srv.URL(), "http://")) // the server again, not the proxy
	out := testutil.Python(t, "-c", `
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

// TestRemoteGCSAndAzureReuseConnections: the Go loader reading gs:// and
// azblob:// with its default 64 requests in flight, against stores that
// answer after 20 ms, reuses its connections. Go's default transport (the
// GCS client's through gocloud) keeps 2 idle connections per host and the
// Azure SDK's 10, so every request past those opened a connection (a TLS
// handshake on a real store) and closed it: 395 and 197 connections for
// about 4,600 requests here before storage opened both with
// StoreConnections idle connections.
func TestRemoteGCSAndAzureReuseConnections(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 1, Seed: 138})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 2 << 20, BlockSamples: 250})
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 9, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100, WindowBytes: 1 << 20}
	want, _ := epochOf(t, local, loader.Options{}, ro)
	srv := testutil.GCSServer(t, "bkt")
	params := testutil.Azurite(t, "bkt")
	uploadTree(t, local, "gs://bkt/conns/")
	uploadTree(t, local, "azblob://bkt/conns/"+params)
	for _, store := range []string{"gcs", "azure"} {
		target := srv.URL()
		if store == "azure" {
			target = "http://" + params[strings.Index(params, "domain=")+len("domain="):]
		}
		tu, err := neturl.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(tu)
		var conns, reqs, inFlight, peak atomic.Int64
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reqs.Add(1)
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			rp.ServeHTTP(w, r)
		}))
		ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				conns.Add(1)
			}
		}
		ts.Start()
		front := strings.TrimPrefix(ts.URL, "http://")
		url := "gs://bkt/conns/"
		if store == "azure" {
			url = "azblob://bkt/conns/?protocol=http&localemu=true&domain=" + front
		} else {
			t.Setenv("STORAGE_EMULATOR_HOST", front)
		}
		got, _ := epochOf(t, url, loader.Options{CacheDir: t.TempDir(), CacheBytes: 1 << 30}, ro)
		ts.Close()
		if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: batches differ from the local ones", store)
		}
		t.Logf("%s: %d requests, at most %d in flight, %d connections opened (limit %d)", store, reqs.Load(), peak.Load(), conns.Load(), loader.DefaultMaxRequests)
		if peak.Load() < 24 {
			t.Errorf("%s: at most %d requests in flight against a store of 20 ms", store, peak.Load())
		}
		// As TestRemoteRequestsInFlight allows: a loaded machine opens a
		// few more than the limit.
		if conns.Load() > 2*int64(loader.DefaultMaxRequests) {
			t.Errorf("%s: %d connections opened for %d requests, at most %d at once: connections are not reused", store, conns.Load(), reqs.Load(), peak.Load())
		}
	}
}

// TestRemoteGCSStoreDown: the Go reader on gs:// against a store that
// answers every read with 503 ends in an error naming the shard, each read
// asked for a bounded number of times. Google's storage client retries a
// read until its context ends unless told a number of attempts, so the
// reader (and the CLI) waited on such a store for ever.
func TestRemoteGCSStoreDown(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 138})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true})
	srv := testutil.GCSServer(t, "bkt")
	url := "gs://bkt/down/"
	uploadTree(t, local, url)
	target, err := neturl.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(httputil.NewSingleHostReverseProxy(target), 9)
	tally := &readTally{next: proxy}
	tally.on.Store(true)
	front := httptest.NewServer(tally)
	defer front.Close()
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(front.URL, "http://"))
	proxy.SetRates(faultproxy.Rates{Status503: 1, Path: "/tensors/"})
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 5, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100}
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- epochErr(url, loader.Options{CacheDir: t.TempDir()}, ro) }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("an epoch from a gs:// store answering 503 had not ended after 3 minutes (%s)", proxy.Counts.String())
	}
	if err == nil || !strings.Contains(err.Error(), "shard-00000-0000") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("an epoch from a gs:// store answering 503: %v", err)
	}
	reads, most, _ := tally.counts()
	if most > 15 || reads == 0 {
		t.Fatalf("one read asked of a store answering 503 %d times (%d reads), want at most 15 (5 attempts of the client's 3)", most, reads)
	}
	t.Logf("%d reads, each at most %d times, in %v: %v", reads, most, time.Since(t0), err)
}
