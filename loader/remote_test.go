package loader_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/faultproxy"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/pipeline"
	"github.com/relayout/relayout/storage"
)

// s3Out is an output uploaded to a real S3-protocol server on loopback,
// behind a fault-injecting proxy, with server-side counts of GET bodies.
type s3Out struct {
	*testutil.S3
	url         string
	proxy       *faultproxy.Proxy
	getBytes    atomic.Int64
	gets        atomic.Int64 // GET requests for tensors/
	tensorBytes int64
	// latency delays every request (nanoseconds, 0: none), as a store far
	// away does; inFlight and peak count the requests being answered.
	latency, inFlight, peak atomic.Int64
	// refuseSigned answers 403 AccessDenied to presigned requests (a
	// bucket policy against query-string auth); refused counts them.
	refuseSigned atomic.Bool
	refused      atomic.Int64
	// unavailable answers 503 to every GET of tensors/ (a store down for
	// longer than any retry).
	unavailable atomic.Bool
}

type countWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

func uploadS3(t *testing.T, local, bucket string) *s3Out {
	t.Helper()
	o := &s3Out{}
	o.S3 = testutil.S3Server(t, bucket, func(inner http.Handler) http.Handler {
		counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/tensors/") {
				w = countWriter{w, &o.getBytes}
				o.gets.Add(1)
			}
			n := o.inFlight.Add(1)
			defer o.inFlight.Add(-1)
			for p := o.peak.Load(); n > p && !o.peak.CompareAndSwap(p, n); p = o.peak.Load() {
			}
			if d := o.latency.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if o.refuseSigned.Load() && r.URL.Query().Has("X-Amz-Signature") {
				o.refused.Add(1)
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>query-string authentication is denied by policy</Message></Error>`)
				return
			}
			if o.unavailable.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/tensors/") {
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>down</Message></Error>`)
				return
			}
			inner.ServeHTTP(w, r)
		})
		o.proxy = faultproxy.New(counted, 7)
		return o.proxy
	})
	o.url = "s3://" + bucket + "/out/" + o.Params
	o.tensorBytes = uploadTree(t, local, o.url)
	return o
}

// epochOf reads one reader's epoch: each batch's sample indices and
// tensor hashes.
func epochOf(t *testing.T, path string, opts loader.Options, o loader.ReadOptions) ([]string, loader.RemoteStats) {
	t.Helper()
	d, err := loader.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r, err := d.NewReader(o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for {
		b, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		var sb strings.Builder
		for _, x := range b.Tensors {
			fmt.Fprintf(&sb, "%s:%016x;", x.Name, xxhash.Sum64(x.Data))
		}
		out = append(out, sb.String())
	}
	return out, d.RemoteStats()
}

// peakSampler records the most a folder held, sampled every millisecond.
type peakSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done sync.WaitGroup
}

// remoteEqualsLocal reads local and its copy at url (s3://, gs://) in
// window and block order, 2 ranks x 2 workers, with base's seed, batch and
// window: every reader's batches from the store (through a cache of a quarter of the tensors;
// block order, whose views of mapped shards stay, twice them) equal, in
// order, the local ones, and each reader downloaded something.
func remoteEqualsLocal(t *testing.T, name, local, url string, tensorBytes int64, base loader.ReadOptions) {
	t.Helper()
	for _, order := range []string{loader.OrderWindow, loader.OrderBlock} {
		for rank := 0; rank < 2; rank++ {
			for worker := 0; worker < 2; worker++ {
				ro := base
				ro.Order, ro.Index = order, true
				ro.Shuffle, ro.Rank, ro.World, ro.Worker, ro.NumWorkers = true, rank, 2, worker, 2
				want, _ := epochOf(t, local, loader.Options{}, ro)
				opts := loader.Options{CacheDir: t.TempDir(), CacheBytes: tensorBytes / 4}
				if order == loader.OrderBlock {
					opts.CacheBytes = tensorBytes * 2
				}
				got, st := epochOf(t, url, opts, ro)
				if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%s %s r%d w%d: %d batches from %s differ from the %d local ones", name, order, rank, worker, len(got), url, len(want))
				}
				if st.Downloads == 0 {
					t.Fatalf("%s %s r%d w%d: nothing was downloaded", name, order, rank, worker)
				}
			}
		}
	}
}

// samplePeak samples dir until Stop.
func samplePeak(dir string) *peakSampler {
	p := &peakSampler{stop: make(chan struct{})}
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		for {
			p.peak.Store(max(p.peak.Load(), dirBytes(dir)))
			select {
			case <-p.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return p
}

// Stop ends the sampling.
func (p *peakSampler) Stop() { close(p.stop); p.done.Wait() }

// Load is the most the folder held so far.
func (p *peakSampler) Load() int64 { return p.peak.Load() }

// dirBytes is a cache folder's bytes on disk (apparent sizes).
func dirBytes(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}

// TestRemoteBatchesEqualLocal: batches read from s3:// through the cache
// equal, byte for byte and in order, those of the same output on local
// disk: flat and packed, window and block order, 2 ranks x 2 workers.
func TestRemoteBatchesEqualLocal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 131})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 250})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 60})
	for name, local := range map[string]string{"flat": flat, "packed": packed} {
		s3 := uploadS3(t, local, "b-"+name)
		// Small windows, so that a cache of a quarter of the tensors holds
		// what one window needs.
		remoteEqualsLocal(t, name, local, s3.url, s3.tensorBytes, loader.ReadOptions{Assignment: loader.Assignment{Seed: 11, Epoch: 1}, Batch: 64, WindowBytes: 32 << 10})
	}
}

// TestRemoteCacheStaysInItsBudget: with CacheBytes a quarter of the tensor
// bytes the cache folder never holds more (sampled all epoch), what is
// downloaded is reported, and a cache larger than the output makes the
// second epoch download nothing. A window larger than the cache is refused
// up front.
func TestRemoteCacheStaysInItsBudget(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 40_000, Files: 2, Seed: 132})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 500})
	s3 := uploadS3(t, local, "budget")
	dir := t.TempDir()
	limit := s3.tensorBytes / 4
	peak := samplePeak(dir)
	// The folder starts with another output's files, half the budget, and
	// a ledger (cache.lock) that does not count them: the reader lists
	// the folder at its first reservation and evicts them as it needs.
	for i := 0; i < 8; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%016x-%d.safetensors", i, limit/16)), make([]byte, limit/16), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "cache.lock"), []byte("0"), 0o644)
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 3, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100, WindowBytes: 48 << 10, Index: true}
	got, st := epochOf(t, s3.url, loader.Options{CacheDir: dir, CacheBytes: limit}, ro)
	peak.Stop()
	if len(got) == 0 {
		t.Fatal("no batches")
	}
	if p := peak.Load(); p > limit {
		t.Fatalf("the cache folder reached %d bytes, CacheBytes is %d", p, limit)
	}
	amp := float64(s3.getBytes.Load()) / float64(s3.tensorBytes)
	t.Logf("cache %d of %d tensor bytes: peak %d on disk, downloaded %d (%.4fx the tensor bytes, server side), %d downloads, %d listings, waited %v",
		limit, s3.tensorBytes, peak.Load(), st.BytesDownloaded, amp, st.Downloads, st.Listings, st.Waited)
	// Read by block, an epoch fetches every block once (and the headers),
	// counted by the server, not by the loader.
	if st.BytesDownloaded < s3.tensorBytes*99/100 || amp > 1.05 {
		t.Fatalf("downloaded %d bytes (%.4fx server side) for %d tensor bytes; want at most 1.05x", st.BytesDownloaded, amp, s3.tensorBytes)
	}
	if shards := countShards(t, local); st.Downloads <= int64(2*shards) {
		t.Fatalf("%d downloads for %d shards: not read by block", st.Downloads, shards)
	}
	// A full folder is listed once per eighth of the budget downloaded, not
	// at every reservation: about 8 listings per budget's worth of
	// downloads past the first (plus the first listing, and what freeing
	// the other output's files takes).
	if want := 4 + 8*(st.BytesDownloaded-limit)/limit*3/2; st.Listings > want || st.Listings*4 > st.Downloads {
		t.Fatalf("the cache folder was listed %d times for %d downloads (%d bytes, budget %d): want at most %d", st.Listings, st.Downloads, st.BytesDownloaded, limit, want)
	}

	// An output written before block tables (no header entries in its
	// manifest) is read by whole shards, the same batches.
	old := stripHeaders(t, local)
	s3old := uploadS3(t, old, "budget-old")
	want, _ := epochOf(t, local, loader.Options{}, ro)
	gotOld, stOld := epochOf(t, s3old.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: 4 * s3.tensorBytes}, ro)
	if strings.Join(gotOld, "\n") != strings.Join(want, "\n") || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatal("batches by block or by whole shard differ from the local ones")
	}
	if shards := countShards(t, old); stOld.Downloads != int64(shards) || stOld.BytesDownloaded != s3.tensorBytes {
		t.Fatalf("without header entries: %d downloads (%d bytes), want the %d whole shards (%d bytes)", stOld.Downloads, stOld.BytesDownloaded, shards, s3.tensorBytes)
	}

	// A cache larger than the output: the second epoch downloads nothing.
	big := t.TempDir()
	opts := loader.Options{CacheDir: big, CacheBytes: 4 * s3.tensorBytes}
	epochOf(t, s3.url, opts, ro)
	before := s3.getBytes.Load()
	ro.Epoch = 1
	if _, st := epochOf(t, s3.url, opts, ro); st.Downloads != 0 || s3.getBytes.Load() != before {
		t.Fatalf("the second epoch downloaded %d shards (%d bytes)", st.Downloads, s3.getBytes.Load()-before)
	}

	// Too small for the windows: refused before any download.
	d, err := loader.Open(s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.NewReader(loader.ReadOptions{Assignment: ro.Assignment, Batch: 256, WindowBytes: 8 << 20}); err == nil || !strings.Contains(err.Error(), "CacheBytes") {
		t.Fatalf("a window larger than the cache: %v", err)
	}
}

// TestRemoteRunsOfBlocks: when a window draws consecutive blocks of a
// shard, they are fetched as one ranged read per tensor spanning them, not
// one per block and tensor, and each block is still checked on its own:
// one window holding the whole output reads it in a few requests a shard,
// the batches equal the local ones, and each byte is downloaded once.
func TestRemoteRunsOfBlocks(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 1, Seed: 136})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 2 << 20, BlockSamples: 250})
	s3 := uploadS3(t, local, "runs")
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 8, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100, WindowBytes: 1 << 30, Index: true}
	want, _ := epochOf(t, local, loader.Options{}, ro)
	got, st := epochOf(t, s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: 4 * s3.tensorBytes}, ro)
	if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatal("batches read in runs of blocks differ from the local ones")
	}
	m := manifestOf(t, local)
	blocks := 0
	for _, sh := range m.Tensors.Shards {
		blocks += int((sh.FirstRow+sh.Rows+249)/250 - sh.FirstRow/250)
	}
	tensors := len(m.Tensors.Schema)
	gets := s3.gets.Load()
	amp := float64(s3.getBytes.Load()) / float64(s3.tensorBytes)
	t.Logf("%d blocks in %d shards, %d tensors: %d GETs (one per block and tensor: %d), %d files downloaded, %.4fx the tensor bytes",
		blocks, len(m.Tensors.Shards), tensors, gets, blocks*tensors, st.Downloads, amp)
	if gets*4 > int64(blocks*tensors) || amp > 1.05 || st.Downloads < int64(blocks) {
		t.Fatalf("%d GETs for %d blocks of %d tensors (%.4fx the bytes, %d files): blocks were not fetched in runs", gets, blocks, tensors, amp, st.Downloads)
	}
}

// TestRemoteRequestsInFlight: against a store that answers every request
// after 20 ms, a reader keeps many ranged reads in flight (an epoch of
// requests one round trip at a time would be latency-bound), and reuses its
// connections: the AWS SDK's client keeps 10 per host, so with more requests
// at once every one past the tenth opened a connection (on a real store a
// TLS handshake) and closed it.
func TestRemoteRequestsInFlight(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 1, Seed: 137})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 2 << 20, BlockSamples: 250})
	s3 := uploadS3(t, local, "inflight")
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 9, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100, WindowBytes: 1 << 20}
	want, _ := epochOf(t, local, loader.Options{}, ro)
	s3.latency.Store(int64(20 * time.Millisecond))
	c0 := s3.Conns.Load()
	cache := t.TempDir()
	got, _ := epochOf(t, s3.url, loader.Options{CacheDir: cache, CacheBytes: 4 * s3.tensorBytes}, ro)
	if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatal("batches from the slow store differ from the local ones")
	}
	noLockFiles(t, cache)
	peak, conns, gets := s3.peak.Load(), s3.Conns.Load()-c0, s3.gets.Load()
	t.Logf("%d GETs for tensors, at most %d requests in flight, %d connections opened (limit %d)", gets, peak, conns, loader.DefaultMaxRequests)
	if peak < 24 {
		t.Errorf("at most %d requests in flight against a store of 20 ms: the reader waits a round trip per few requests", peak)
	}
	// The reader's requests, and the few the dataset makes beside them
	// (the manifest, shard headers), on reused connections. A loaded
	// machine opens a few more (a request that finds no idle connection at
	// that instant dials one: 72-80 beside two spinning processes and the
	// test suite); without reuse it was 586.
	if conns > 2*int64(loader.DefaultMaxRequests) {
		t.Errorf("%d connections opened for %d requests at most %d at once: connections are not reused", conns, gets, peak)
	}
	// A new Dataset on the same store, with an empty cache (a training
	// loop that opens one an epoch): the first's client and connections.
	// With a client per Dataset it opened as many as the first epoch.
	c0 = s3.Conns.Load()
	if again, _ := epochOf(t, s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: 4 * s3.tensorBytes}, ro); strings.Join(again, "\n") != strings.Join(want, "\n") {
		t.Fatal("a second Dataset's batches differ from the local ones")
	}
	if n := s3.Conns.Load() - c0; n > 16 {
		t.Errorf("a second Dataset on the same store opened %d connections: it did not reuse the first's", n)
	} else {
		t.Logf("a second Dataset opened %d connections", n)
	}
	// The NumPy loader, with boto3's pool sized to its requests.
	if err := exec.Command("/usr/bin/python3", "-c", "import boto3, xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-boto3 or python3-xxhash not installed (make deps)")
	}
	s3.peak.Store(0)
	c0, g0 := s3.Conns.Load(), s3.gets.Load()
	pyCache := t.TempDir()
	args := []string{local, s3.url, pyCache}
	if n := os.Getenv("RELAYOUT_TEST_PY_MAXREQ"); n != "" {
		args = append(args, n) // to compare by hand
	}
	out := testutil.Python(t, append([]string{filepath.Join(testutil.Root(), "python", "tests", "remote_inflight.py")}, args...)...)
	peak, conns, gets = s3.peak.Load(), s3.Conns.Load()-c0, s3.gets.Load()-g0
	t.Logf("python: %s: %d GETs for tensors, at most %d requests in flight, %d connections opened", strings.TrimSpace(string(out)), gets, peak, conns)
	if peak <= 16 { // its pool was 16; GIL-bound, it keeps fewer in flight than Go
		t.Errorf("python: at most %d requests in flight against a store of 20 ms", peak)
	}
	// Three epochs, each a new Dataset downloading everything: one
	// client's connections (with a client per Dataset, three times one's).
	if conns > 2*int64(loader.DefaultMaxRequests) {
		t.Errorf("python: %d connections opened for %d requests at most %d at once, three Datasets: connections are not reused", conns, gets, peak)
	}
	noLockFiles(t, pyCache)
	// A Dataset made in one process and used in forked ones (a DataLoader
	// worker or multiprocessing child given it): each child its own
	// client, connections and locks. On the parent's pooled connections and
	// lock files, the two children hung (checked before the fix).
	c0 = s3.Conns.Load()
	out = testutil.Python(t, append([]string{filepath.Join(testutil.Root(), "python", "tests", "remote_inflight.py"), "--fork"}, args...)...)
	conns = s3.Conns.Load() - c0
	t.Logf("python, forked: %s: %d connections opened", strings.TrimSpace(string(out)), conns)
	if conns > 3*2*int64(loader.DefaultMaxRequests) { // the parent and two children, a client each
		t.Errorf("python, forked: %d connections opened by a parent and two children", conns)
	}
}

// noLockFiles fails if a cache folder holds lock files other than its two
// (cache.lock, the ledger's, and blocks.lock, the downloads' byte-range
// locks): no file is left per download.
func noLockFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var locks []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".lock") && e.Name() != "cache.lock" && e.Name() != "blocks.lock" {
			locks = append(locks, e.Name())
		}
	}
	if len(locks) > 0 {
		t.Errorf("%s holds %d lock files after the epoch (%s, ...)", dir, len(locks), locks[0])
	}
}

// countShards is the shards an output's manifest lists.
func countShards(t *testing.T, out string) int { return len(manifestOf(t, out).Tensors.Shards) }

// stripHeaders copies an output with its manifest's header entries removed,
// as an output written before block tables has them.
func stripHeaders(t *testing.T, out string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == manifests.FileName {
			m, err := manifests.Decode(data)
			if err != nil {
				return err
			}
			for i := range m.Tensors.Shards {
				m.Tensors.Shards[i].HeaderBytes, m.Tensors.Shards[i].HeaderXXHash64 = 0, ""
			}
			if data, err = manifests.Marshal(m); err != nil {
				return err
			}
		}
		os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755)
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRemoteFaultsAndDamage: with ~10% of requests failing (503, resets,
// cut bodies) the epoch completes with the same batches; a shard damaged
// on the server is an error naming it, never a batch; two readers sharing
// one cache folder both read correctly.
func TestRemoteFaultsAndDamage(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 15_000, Files: 1, Seed: 133})
	// Blocks of 1000 samples: each is a ranged read per tensor (44 here),
	// and a fault costs the S3 client's backoff (a second or two).
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 1 << 20, BlockSamples: 1000})
	s3 := uploadS3(t, local, "faults")
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 5, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100, WindowBytes: 32 << 10, Index: true}
	want, _ := epochOf(t, local, loader.Options{}, ro)
	s3.proxy.SetRates(faultproxy.Rates{Status503: 0.04, Reset: 0.03, CutBody: 0.04})
	t0 := time.Now()
	got, st := epochOf(t, s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: s3.tensorBytes / 3}, ro)
	s3.proxy.SetRates(faultproxy.Rates{})
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatal("batches under faults differ from the local ones")
	}
	t.Logf("under faults: %s; %d downloads, %d retried; %v", s3.proxy.Counts.String(), st.Downloads, st.Retries, time.Since(t0))

	// The Python reader under the same faults: the same batches.
	pyOK := exec.Command("/usr/bin/python3", "-c", "import boto3, xxhash, numpy").Run() == nil
	if !pyOK {
		testutil.Missing(t, "python3-boto3, python3-xxhash or python3-numpy not installed (make deps)")
	} else {
		faults0 := s3.proxy.Counts.Status503.Load() + s3.proxy.Counts.Reset.Load() + s3.proxy.Counts.CutBody.Load()
		s3.proxy.SetRates(faultproxy.Rates{Status503: 0.04, Reset: 0.03, CutBody: 0.04})
		out, err := pythonReader(local, s3.url, t.TempDir(), s3.tensorBytes/3)
		s3.proxy.SetRates(faultproxy.Rates{})
		faults := s3.proxy.Counts.Status503.Load() + s3.proxy.Counts.Reset.Load() + s3.proxy.Counts.CutBody.Load() - faults0
		if err != nil {
			t.Fatalf("the Python reader under faults: %v\n%s", err, out)
		}
		if faults == 0 {
			t.Fatal("no fault was injected into the Python reader's requests")
		}
		t.Logf("the Python reader under %d faults: %s", faults, strings.TrimSpace(out))
	}

	// Two readers (ranks) on one cache folder, at once.
	shared := t.TempDir()
	var wg sync.WaitGroup
	res := make([][]string, 2)
	for rank := 0; rank < 2; rank++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := ro
			o.Rank, o.World = rank, 2
			res[rank], _ = epochOf(t, s3.url, loader.Options{CacheDir: shared, CacheBytes: s3.tensorBytes / 2}, o)
		}()
	}
	wg.Wait()
	for rank := 0; rank < 2; rank++ {
		o := ro
		o.Rank, o.World = rank, 2
		w, _ := epochOf(t, local, loader.Options{}, o)
		if strings.Join(res[rank], "\n") != strings.Join(w, "\n") {
			t.Fatalf("rank %d sharing the cache read other batches", rank)
		}
	}

	// Two processes on one cache folder, at once: this one (a Go reader,
	// rank 0) and a Python reader (rank 1), within one budget.
	if err := exec.Command("/usr/bin/python3", "-c", "import boto3, xxhash, numpy").Run(); err != nil {
		testutil.Missing(t, "python3-boto3, python3-xxhash or python3-numpy not installed (make deps)")
	} else {
		shared := t.TempDir()
		budget := s3.tensorBytes / 2
		py := exec.Command("/usr/bin/python3", filepath.Join(testutil.Root(), "python", "tests", "remote_shared.py"),
			local, s3.url, shared, fmt.Sprint(budget), "1", "2")
		py.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(testutil.Root(), "python"), "PYTHONDONTWRITEBYTECODE=1")
		var pyOut, pyErr strings.Builder
		py.Stdout, py.Stderr = &pyOut, &pyErr
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
		peak := samplePeak(shared)
		o := ro
		o.Rank, o.World = 0, 2
		goGot, _ := epochOf(t, s3.url, loader.Options{CacheDir: shared, CacheBytes: budget}, o)
		pyErrRun := py.Wait()
		peak.Stop()
		if pyErrRun != nil {
			t.Fatalf("the Python reader sharing the folder: %v\n%s", pyErrRun, pyErr.String())
		}
		goWant, _ := epochOf(t, local, loader.Options{}, o)
		if strings.Join(goGot, "\n") != strings.Join(goWant, "\n") {
			t.Fatal("the Go reader sharing the folder with a Python process read other batches")
		}
		if peak.Load() > budget {
			t.Fatalf("the shared folder reached %d bytes, the budget is %d", peak.Load(), budget)
		}
		t.Logf("Go and Python processes sharing one folder: peak %d of %d bytes; python %s", peak.Load(), budget, strings.TrimSpace(pyOut.String()))
	}

	// Damage a shard on the server: in its data (a block's hash catches
	// it), then in its header (the manifest's header hash catches it).
	for _, c := range []struct {
		shard string
		at    func(n int) int
	}{{"shard-00000-0000", func(n int) int { return n / 2 }}, {"shard-00000-0001", func(int) int { return 40 }}} {
		key := "out/tensors/" + c.shard + ".safetensors"
		obj, err := s3.Backend.GetObject("faults", key, nil)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, obj.Size)
		if _, err := io.ReadFull(obj.Contents, data); err != nil {
			t.Fatal(err)
		}
		obj.Contents.Close()
		data[c.at(len(data))] ^= 0x01
		loc, _ := storage.OpenDir(context.Background(), s3.url, false)
		if err := loc.Bucket.WriteAll(context.Background(), key, data, nil); err != nil {
			t.Fatal(err)
		}
		err = epochErr(s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: s3.tensorBytes}, ro)
		if err == nil {
			t.Fatalf("an epoch over a damaged %s completed", c.shard)
		}
		if !strings.Contains(err.Error(), c.shard) || !strings.Contains(err.Error(), "xxhash64") {
			t.Fatalf("the damaged shard's error does not name it: %v", err)
		}
		if pyOK {
			out, err := pythonReader(local, s3.url, t.TempDir(), s3.tensorBytes)
			if err == nil {
				t.Fatalf("the Python reader's epoch over a damaged %s completed", c.shard)
			}
			if !strings.Contains(out, c.shard) || !strings.Contains(out, "xxhash64") {
				t.Fatalf("the Python reader's error for a damaged shard does not name it: %s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			t.Logf("the Python reader over a damaged %s: %s", c.shard, lines[len(lines)-1])
		}
		data[c.at(len(data))] ^= 0x01
		if err := loc.Bucket.WriteAll(context.Background(), key, data, nil); err != nil {
			t.Fatal(err)
		}
	}

	// A store that refuses presigned URLs (a bucket policy against
	// query-string auth): the Python reader falls back to get_object.
	if pyOK {
		s3.refuseSigned.Store(true)
		out, err := pythonReader(local, s3.url, t.TempDir(), s3.tensorBytes/3)
		s3.refuseSigned.Store(false)
		if err != nil {
			t.Fatalf("the Python reader on a store refusing presigned URLs: %v\n%s", err, out)
		}
		if s3.refused.Load() == 0 {
			t.Fatal("the Python reader sent no presigned request to refuse")
		}
		t.Logf("the Python reader with presigned URLs refused (%d refusals): %s", s3.refused.Load(), strings.TrimSpace(out))
	}

	// A shard gone from the store: a persistent error, raised at once,
	// naming the shard and the store's answer.
	if pyOK {
		key := "out/tensors/shard-00000-0000.safetensors"
		loc, _ := storage.OpenDir(context.Background(), s3.url, false)
		data, err := loc.Bucket.ReadAll(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if err := loc.Bucket.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
		for _, refuse := range []bool{false, true} { // through presigned URLs, then get_object
			s3.refuseSigned.Store(refuse)
			t0 := time.Now()
			out, err := pythonReader(local, s3.url, t.TempDir(), s3.tensorBytes)
			s3.refuseSigned.Store(false)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if err == nil || !strings.Contains(last, "shard-00000-0000") || !strings.Contains(last, "404") {
				t.Fatalf("the Python reader with a shard missing from the store (presigned URLs refused: %v): %v: %s", refuse, err, out)
			}
			t.Logf("the Python reader with a shard missing (presigned URLs refused: %v), in %v: %s", refuse, time.Since(t0), last)
		}
		if err := loc.Bucket.WriteAll(context.Background(), key, data, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// pythonReader runs python/tests/remote_shared.py, one reader (rank 0 of
// 1) whose batches from url through cacheDir must equal local's; it returns
// the script's output (stdout, then stderr).
func pythonReader(local, url, cacheDir string, cacheBytes int64) (string, error) {
	py := exec.Command("/usr/bin/python3", filepath.Join(testutil.Root(), "python", "tests", "remote_shared.py"),
		local, url, cacheDir, fmt.Sprint(cacheBytes), "0", "1")
	py.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(testutil.Root(), "python"), "PYTHONDONTWRITEBYTECODE=1")
	var out, errOut strings.Builder
	py.Stdout, py.Stderr = &out, &errOut
	err := py.Run()
	return out.String() + errOut.String(), err
}

// epochErr reads one reader's epoch and returns the first error.
func epochErr(url string, opts loader.Options, ro loader.ReadOptions) error {
	d, err := loader.Open(url, opts)
	if err != nil {
		return err
	}
	defer d.Close()
	r, err := d.NewReader(ro)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		b, err := r.Next()
		if b == nil || err != nil {
			return err
		}
	}
}

// TestRemotePython: the NumPy loader (boto3) reads the same output from the
// same loopback S3 server: python/tests/remote_check.py compares it with the
// local output and checks its cache budget.
func TestRemotePython(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import boto3, xxhash").Run(); err != nil {
		testutil.Missing(t, "python3-boto3 or python3-xxhash not installed (make deps)")
	}
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 134})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 256 << 10, BlockSamples: 250})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, ShardBytes: 128 << 10, BlockSamples: 60})
	for name, local := range map[string]string{"flat": flat, "packed": packed} {
		s3 := uploadS3(t, local, "py-"+name)
		out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_check.py"), local, s3.url, t.TempDir(), fmt.Sprint(s3.tensorBytes/4))
		if !strings.Contains(string(out), `"configs": 8`) {
			t.Fatalf("remote_check.py %s: %s", name, out)
		}
		t.Logf("python %s: %s", name, out)
	}
	// The PyTorch wrapper: a DataLoader with 0 and 2 workers sharing one
	// cache folder reads the local batches.
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		testutil.Missing(t, "python3-torch not installed (make deps)")
	}
	s3 := uploadS3(t, flat, "py-torch")
	g0 := s3.gets.Load()
	out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "torch_remote.py"), flat, s3.url, t.TempDir(), fmt.Sprint(s3.tensorBytes/3))
	if !strings.Contains(string(out), `"workers_2"`) || s3.gets.Load() == g0 {
		t.Fatalf("torch_remote.py: %s (%d GETs)", out, s3.gets.Load()-g0)
	}
	t.Logf("torch: %s; %d GETs", out, s3.gets.Load()-g0)
}

// TestRemoteDatasetRoot: a dataset root on S3, GCS (fake-gcs-server) and
// Azure (Azurite) reads as one dataset in Go and Python, the same batches
// as the root on local disk.
func TestRemoteDatasetRoot(t *testing.T) {
	flat := testutil.Generate(t, gen.Options{Rows: 12_000, Files: 2, Days: 3, Seed: 135})
	base := t.TempDir()
	daily := filepath.Join(base, "daily")
	testutil.DuckDB(t, fmt.Sprintf(`copy (select * exclude (date), date from read_parquet('%s/*.parquet')) to '%s' (format parquet, partition_by (date))`, flat, daily))
	root := filepath.Join(base, "ds")
	if _, err := pipeline.RunDataset(context.Background(), pipeline.RunOptions{Dataset: root, Inputs: []string{daily}, SliceKeys: []string{"date", "country"},
		Tensors: true, ShardBytes: 128 << 10, BlockSamples: 200}, false); err != nil {
		t.Fatal(err)
	}
	testutil.GCSServer(t, "bkt")
	azure := testutil.Azurite(t, "bkt")
	urls := []string{uploadS3(t, root, "dsroot").url, "gs://bkt/dsroot/", "azblob://bkt/dsroot/" + azure}
	for _, url := range urls[1:] {
		uploadTree(t, root, url)
	}
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 2, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100, WindowBytes: 64 << 10, Index: true}
	want, _ := epochOf(t, root, loader.Options{}, ro)
	for _, url := range urls {
		t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the default cache folders, Go's and Python's
		got, st := epochOf(t, url, loader.Options{}, ro)
		if len(want) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") || st.Downloads == 0 {
			t.Fatalf("the root at %s gave %d batches (%d downloads), the local root %d", url, len(got), st.Downloads, len(want))
		}
		goAndPython(t, url, []orderCfg{{Batch: 100, Seed: 4, World: 1, NumWorkers: 1, WindowBytes: 64 << 10}})
	}
}

// TestRemoteShardPerBlock: an output written with a shard per canonical
// block (--shard-blocks 1) is read from S3 in one request per shard, its
// header included (a shard within one block is read whole), where a block
// of a larger shard is one request per tensor and its shard's header one
// more; the batches equal the local ones (flat and packed, window and block
// order, 2 ranks x 2 workers), in Go and in Python.
func TestRemoteShardPerBlock(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 2, Seed: 138})
	flat := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, BlockSamples: 250, ShardBlocks: 1})
	packed := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, QueryKey: []string{"query_id"}, Tensors: true, BlockSamples: 60, ShardBlocks: 1})
	for name, local := range map[string]string{"flat": flat, "packed": packed} {
		m := manifestOf(t, local)
		b := m.Tensors.Order.BlockSamples
		for _, sh := range m.Tensors.Shards {
			if sh.FirstRow/b != (sh.FirstRow+sh.Rows-1)/b || (sh.FirstRow+sh.Rows)%b != 0 && !endsFile(m, sh) {
				t.Fatalf("%s: shard %s holds samples [%d, %d): not one block of %d", name, sh.Path, sh.FirstRow, sh.FirstRow+sh.Rows, b)
			}
		}
		s3 := uploadS3(t, local, "spb-"+name)
		remoteEqualsLocal(t, name, local, s3.url, s3.tensorBytes, loader.ReadOptions{Assignment: loader.Assignment{Seed: 3}, Batch: 40, WindowBytes: 16 << 10})
		// One reader's epoch: every shard once, in one request each.
		ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 5, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 50, WindowBytes: 16 << 10, Index: true}
		g0 := s3.gets.Load()
		_, st := epochOf(t, s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: s3.tensorBytes / 4}, ro)
		gets := s3.gets.Load() - g0
		t.Logf("%s: %d shards, %d tensors: %d GETs, %d downloads, %d bytes of %d", name, len(m.Tensors.Shards), len(m.Tensors.Schema), gets, st.Downloads, st.BytesDownloaded, s3.tensorBytes)
		if gets != int64(len(m.Tensors.Shards)) || st.BytesDownloaded != s3.tensorBytes {
			t.Fatalf("%s: %d GETs and %d bytes for %d shards of %d bytes: want one request per shard, each byte once", name, gets, st.BytesDownloaded, len(m.Tensors.Shards), s3.tensorBytes)
		}
		// The same in Python.
		if err := exec.Command("/usr/bin/python3", "-c", "import boto3, xxhash").Run(); err != nil {
			testutil.Missing(t, "python3-boto3 or python3-xxhash not installed (make deps)")
		}
		g0 = s3.gets.Load()
		out := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_shared.py"), local, s3.url, t.TempDir(), fmt.Sprint(s3.tensorBytes/4), "0", "1")
		if gets := s3.gets.Load() - g0; gets != int64(len(m.Tensors.Shards)) {
			t.Fatalf("python %s: %d GETs for %d shards (%s)", name, gets, len(m.Tensors.Shards), out)
		}
	}
}

// endsFile reports whether sh is the last shard of its Parquet file (a
// shard never spans two files, so it may end inside a block there).
func endsFile(m *manifests.Manifest, sh manifests.Shard) bool {
	for _, f := range m.Files {
		if sh.FirstRow+sh.Rows == f.FirstRow+f.Rows {
			return true
		}
	}
	return false
}

// TestRequesterPays: a requester-pays bucket (the loopback S3 server
// answers 403 AccessDenied to every request that does not carry
// x-amz-request-payer: requester, as S3 does) is read and written with
// requester_pays=true in the URL: a run from and to it gives the local
// run's bytes, and the Go and NumPy loaders read its epoch as they read the
// local output's. Without the parameter the run fails with the store's 403.
func TestRequesterPays(t *testing.T) {
	var refused, paid atomic.Int64
	srv := testutil.S3Server(t, "payer", func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("x-amz-request-payer") != "requester" && r.URL.Query().Get("x-amz-request-payer") != "requester" {
				refused.Add(1)
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>requester pays</Message></Error>`)
				return
			}
			paid.Add(1)
			inner.ServeHTTP(w, r)
		})
	})
	in := testutil.Generate(t, gen.Options{Rows: 8_000, Files: 2, Seed: 139})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, BlockSamples: 200})
	pays := srv.Params + "&requester_pays=true"
	uploadTree(t, in, "s3://payer/in/"+pays)
	out := "s3://payer/out/" + pays
	run(t, pipeline.RunOptions{Inputs: []string{"s3://payer/in/" + pays}, Output: out, SliceKeys: []string{"country"}, Tensors: true, BlockSamples: 200})
	loc, err := storage.OpenDir(context.Background(), out, false)
	if err != nil {
		t.Fatal(err)
	}
	want := manifestOf(t, local)
	for _, f := range want.Files {
		got, err := storage.Get(context.Background(), loc, f.Path)
		data, _ := os.ReadFile(filepath.Join(local, filepath.FromSlash(f.Path)))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s on the requester-pays bucket differs from the local run's (%v)", f.Path, err)
		}
	}
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 3, Shuffle: true}, Batch: 100, WindowBytes: 64 << 10}
	wantB, _ := epochOf(t, local, loader.Options{}, ro)
	gotB, _ := epochOf(t, out, loader.Options{CacheDir: t.TempDir()}, ro)
	if strings.Join(gotB, "\n") != strings.Join(wantB, "\n") || len(gotB) == 0 {
		t.Fatalf("Go loader: %d batches from the requester-pays bucket differ from the %d local ones", len(gotB), len(wantB))
	}
	_, err = pipeline.Run(context.Background(), pipeline.RunOptions{Inputs: []string{"s3://payer/in/" + srv.Params}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country"}})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a run without requester_pays: %v, want the store's 403", err)
	}
	py := testutil.Python(t, filepath.Join(testutil.Root(), "python", "tests", "remote_payer.py"), local, out, "s3://payer/out/"+srv.Params, t.TempDir())
	t.Logf("%d requests paid, %d refused; python: %s", paid.Load(), refused.Load(), strings.TrimSpace(string(py)))
	if refused.Load() == 0 {
		t.Fatal("the server refused nothing: the test does not test")
	}
}

// TestRemoteStoreDown: a store that answers every read with 503 is an
// error naming the shard and the store's answer, after a bounded number
// of requests: the Go reader's are storage.Retry's 5 attempts of the SDK's
// 3, the Python reader's 8, each read retried once at one level, not again
// around it (a download is repeated only when what arrived fails its
// check). Downloading again around exhausted retries had sent 60 GETs in
// 56 s (Go) and 20 (Python) for one shard header: 4x the load on a store
// already failing.
func TestRemoteStoreDown(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 5_000, Files: 1, Seed: 135})
	local := run(t, pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true})
	s3 := uploadS3(t, local, "down")
	ro := loader.ReadOptions{Assignment: loader.Assignment{Seed: 5, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 100}
	s3.unavailable.Store(true)
	defer s3.unavailable.Store(false)
	g0, t0 := s3.gets.Load(), time.Now()
	err := epochErr(s3.url, loader.Options{CacheDir: t.TempDir(), CacheBytes: s3.tensorBytes}, ro)
	gets := s3.gets.Load() - g0
	if err == nil || !strings.Contains(err.Error(), "shard-00000-0000") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("an epoch from a store answering 503: %v", err)
	}
	if gets > 15 {
		t.Fatalf("the Go reader sent %d GETs to a store answering 503, want at most 15 (5 attempts of the SDK's 3)", gets)
	}
	t.Logf("Go: %d GETs in %v: %v", gets, time.Since(t0), err)
	if exec.Command("/usr/bin/python3", "-c", "import boto3, xxhash, numpy").Run() != nil {
		testutil.Missing(t, "python3-boto3, python3-xxhash or python3-numpy not installed (make deps)")
		return
	}
	// Through presigned URLs (8 tries), then with presigned URLs refused:
	// two refused, then get_object, whose client tries once inside each
	// of the 8 (botocore's own 9 attempts inside each would make 74).
	for _, c := range []struct {
		refuse bool
		most   int64
	}{{false, 8}, {true, 10}} {
		s3.refuseSigned.Store(c.refuse)
		g0, t0 = s3.gets.Load(), time.Now()
		out, err := pythonReader(local, s3.url, t.TempDir(), s3.tensorBytes)
		gets = s3.gets.Load() - g0
		s3.refuseSigned.Store(false)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		if err == nil || !strings.Contains(last, "shard-00000-0000") || !strings.Contains(last, "503") {
			t.Fatalf("the Python reader from a store answering 503 (presigned URLs refused: %v): %v: %s", c.refuse, err, out)
		}
		if gets > c.most {
			t.Fatalf("the Python reader sent %d GETs to a store answering 503 (presigned URLs refused: %v), want at most %d", gets, c.refuse, c.most)
		}
		t.Logf("Python (presigned URLs refused: %v): %d GETs in %v: %s", c.refuse, gets, time.Since(t0), last)
	}
}
