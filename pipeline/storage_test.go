package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/faultproxy"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/sourcetest"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
)

// s3Server starts a real S3-protocol server on loopback and returns the URL
// parameters that point s3blob at it.
func s3Server(t *testing.T, bucket string) (params string, backend *s3mem.Backend) {
	t.Helper()
	params, backend, _ = s3ServerCounting(t, bucket)
	return params, backend
}

// httpCounts counts what an S3 server was asked for and sent.
type httpCounts struct {
	requests, gets, puts, deletes atomic.Int64
	getBytes                      atomic.Int64 // response body bytes of object GETs
	mu                            sync.Mutex
	listed                        []string         // the prefix of each listing
	byName                        map[string]int64 // object GETs by the key's last element
}

// getsOf returns the object GETs of keys whose last element is name.
func (c *httpCounts) getsOf(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byName[name]
}

// getsEnding returns the object GETs of keys whose last element ends with
// suffix.
func (c *httpCounts) getsEnding(suffix string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for k, v := range c.byName {
		if strings.HasSuffix(k, suffix) {
			n += v
		}
	}
	return n
}

// listings returns the prefixes listed since the last call.
func (c *httpCounts) listings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.listed
	c.listed = nil
	return l
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// s3ServerCounting is s3Server that also counts requests and bytes served,
// on the server side: independent of relayout's own counters.
func s3ServerCounting(t *testing.T, bucket string) (params string, backend *s3mem.Backend, counts *httpCounts) {
	t.Helper()
	counts = &httpCounts{}
	srv := testutil.S3Server(t, bucket, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			counts.requests.Add(1)
			switch r.Method {
			case http.MethodGet: // object reads, not listings (GET /bucket?...)
				if strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 {
					counts.gets.Add(1)
					w = countingWriter{w, &counts.getBytes}
					counts.mu.Lock()
					if counts.byName == nil {
						counts.byName = map[string]int64{}
					}
					counts.byName[path.Base(r.URL.Path)]++
					counts.mu.Unlock()
				} else {
					counts.mu.Lock()
					counts.listed = append(counts.listed, r.URL.Query().Get("prefix"))
					counts.mu.Unlock()
				}
			case http.MethodPut, http.MethodPost:
				counts.puts.Add(1)
			case http.MethodDelete:
				counts.deletes.Add(1)
			}
			inner.ServeHTTP(w, r)
		})
	})
	return srv.Params, srv.Backend, counts
}

func upload(t *testing.T, b *blob.Bucket, prefix, dir string) {
	t.Helper()
	for _, p := range testutil.Files(t, dir) {
		data, _ := os.ReadFile(p)
		if err := b.WriteAll(context.Background(), prefix+filepath.Base(p), data, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestObjectStorageMatchesLocal runs the same job local->local and, on
// each store, store->store: S3 (a real S3-protocol server over HTTP on
// loopback, through gocloud's s3blob), GCS (fake-gcs-server, gcsblob),
// Azure (Azurite, azureblob) and mem. It requires byte-identical data
// files and manifests (inputs are named differently, so the manifests'
// input paths are normalised), and verify --deep to pass on each store.
func TestObjectStorageMatchesLocal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 3, Seed: 21})
	local := filepath.Join(t.TempDir(), "out")
	withTensors := func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 256 << 10 }
	smallRun(t, in, local, withTensors)
	want := readTree(t, local)

	s3params, _ := s3Server(t, "bkt")
	testutil.GCSServer(t, "bkt")
	azure := testutil.Azurite(t, "bkt")
	ctx := context.Background()
	for _, st := range []struct{ name, root, query string }{
		{"s3", "s3://bkt/", s3params}, {"gs", "gs://bkt/", ""}, {"azure", "azblob://bkt/", azure}, {"mem", "mem://conformance-test/", ""},
	} {
		loc, err := storage.OpenDir(ctx, st.root+st.query, false)
		if err != nil {
			t.Fatal(err)
		}
		upload(t, loc.Bucket, "impressions/", in)
		out := st.root + "relaid/" + st.query
		smallRun(t, st.root+"impressions/"+st.query, out, withTensors)
		sameObjects(t, st.name, want, testutil.BucketTree(t, loc.Bucket, "relaid/"))
		if res, err := verify.Output(ctx, out, true, 2); err != nil || !res.OK {
			t.Fatalf("verify on %s: %+v %v", st.name, res, err)
		}
	}
}

// normaliseInputs blanks the input section, which names where inputs were.
func normaliseInputs(m []byte) []byte {
	i := bytes.Index(m, []byte(`"inputs": [`))
	j := bytes.Index(m, []byte(`"files": [`))
	if i < 0 || j < 0 {
		return m
	}
	return append(append(bytes.Clone(m[:i]), "INPUTS\n "...), m[j:]...)
}

// TestUnreachableStoreIsTransient: a store that refuses connections is a
// transient I/O error (exit 4, retry), not bad input.
func TestUnreachableStoreIsTransient(t *testing.T) {
	ts := httptest.NewServer(nil)
	url := ts.URL
	ts.Close() // nothing listens there now
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	params := "?region=us-east-1&endpoint=" + url + "&use_path_style=true&disable_https=true"
	_, err := Run(context.Background(), RunOptions{Inputs: []string{"s3://bkt/in/" + params}, Output: filepath.Join(t.TempDir(), "o")})
	if !errs.Is(err, errs.Transient) {
		t.Fatalf("err = %v (class %v), want transient", err, errs.ClassOf(err))
	}
}

// TestGCSStoreDownIsTransient: a run whose gs:// input answers every
// request with 503 ends, as a transient error (exit 4: an orchestrator
// tries again later), instead of waiting for ever: Google's storage client
// retries until its context ends unless told a number of attempts.
func TestGCSStoreDownIsTransient(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 1_000, Files: 1, Seed: 139})
	srv := testutil.GCSServer(t, "bkt")
	data, err := os.ReadFile(filepath.Join(in, "part-0.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := storage.OpenDir(context.Background(), "gs://bkt/in/", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := loc.Bucket.WriteAll(context.Background(), loc.Key("part-0.parquet"), data, nil); err != nil {
		t.Fatal(err)
	}
	target, _ := neturl.Parse(srv.URL())
	proxy := faultproxy.New(httputil.NewSingleHostReverseProxy(target), 3)
	front := httptest.NewServer(proxy)
	defer front.Close()
	t.Setenv("STORAGE_EMULATOR_HOST", strings.TrimPrefix(front.URL, "http://"))
	proxy.SetRates(faultproxy.Rates{Status503: 1})
	err = runEndsTransient(t, "gs://bkt/in/", "a gs:// store answering 503", func() string { return proxy.Counts.String() })
	t.Logf("%s: %v", proxy.Counts.String(), err)
}

// runEndsTransient runs from input, a store that keeps failing, and
// fails the test unless the run ends within 3 minutes with a transient
// error (exit 4), which it returns; seen describes what the store saw,
// for the messages.
func runEndsTransient(t *testing.T, input, what string, seen func() string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), RunOptions{Inputs: []string{input}, Output: filepath.Join(t.TempDir(), "o")})
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("a run from %s had not ended after 3 minutes (%s)", what, seen())
	}
	if !errs.Is(err, errs.Transient) {
		t.Fatalf("err = %v (class %v), want transient", err, errs.ClassOf(err))
	}
	return err
}

// TestGCSGRPCStoreDownIsTransient is TestGCSStoreDownIsTransient for a
// gs:// URL with ?grpc=true, which gocloud's opener serves with a client
// of its own: a gRPC server on loopback answers UNAVAILABLE to every call.
// Unbounded, the client retried for as long as the run's context lived.
func TestGCSGRPCStoreDownIsTransient(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		calls.Add(1)
		return status.Error(codes.Unavailable, "the store is down")
	}))
	go srv.Serve(lis)
	defer srv.Stop()
	t.Setenv("STORAGE_EMULATOR_HOST_GRPC", lis.Addr().String())
	start := time.Now()
	err = runEndsTransient(t, "gs://bkt/in/?grpc=true&anonymous=true", "a gs:// store (gRPC) answering UNAVAILABLE", func() string { return fmt.Sprintf("%d calls", calls.Load()) })
	t.Logf("%d calls in %v: %v", calls.Load(), time.Since(start).Round(time.Millisecond), err)
}

// delayedS3 is an S3-protocol server on loopback that holds every object
// request (GET, HEAD) for delay, as a store across a network does, and
// records the most such requests in flight at once since the last reset.
type delayedS3 struct {
	*testutil.S3
	inFlight, most atomic.Int64
	heads          atomic.Int64
}

func (d *delayedS3) reset() { d.most.Store(0) }

func newDelayedS3(t *testing.T, bucket string, delay time.Duration) (*delayedS3, string) {
	t.Helper()
	d := &delayedS3{}
	d.S3 = testutil.S3Server(t, bucket, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			object := strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1
			if object && r.Method == http.MethodHead {
				d.heads.Add(1)
			}
			if object && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				n := d.inFlight.Add(1)
				for m := d.most.Load(); n > m && !d.most.CompareAndSwap(m, n); m = d.most.Load() {
				}
				time.Sleep(delay)
				defer d.inFlight.Add(-1)
			}
			inner.ServeHTTP(w, r)
		})
	})
	return d, d.Params
}

// TestObjectStoreReadsOverlap: reads from an object store wait on the
// store, not on a core, so they overlap whatever --parallel is: the key
// pass's and the read's column chunks, and the opens of many small files a
// read needs again. Each was one request at a time with --parallel 1 (or
// two on two cores): 2,000 small files at 5 ms a request took 35 s, 7 s
// now. Listing takes S3's ETags from the listing itself (it made a HEAD
// per object, one at a time). The batches read are those of the same
// files on disk (the end-to-end equality is TestObjectStorageMatchesLocal's).
func TestObjectStoreReadsOverlap(t *testing.T) {
	ctx := context.Background()
	srv, params := newDelayedS3(t, "bkt", 20*time.Millisecond)
	loc, err := storage.OpenDir(ctx, "s3://bkt/in/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	const want = 8 // of source.DefaultRemoteReads, with --parallel 1
	check := func(what string) {
		t.Helper()
		if n := srv.most.Load(); n < want {
			t.Errorf("%s: at most %d object requests at once, want at least %d", what, n, want)
		}
		srv.reset()
	}
	open := func(prefix, dir string) (*source.Table, *source.Table) {
		t.Helper()
		upload(t, loc.Bucket, prefix, dir)
		heads := srv.heads.Load()
		objs, err := storage.List(ctx, []string{"s3://bkt/" + prefix + params})
		if err != nil {
			t.Fatal(err)
		}
		// S3 lists ETags: no HEAD per object (where a driver does not,
		// the listing asks for them, 16 at once).
		if n := srv.heads.Load() - heads; n != 0 {
			t.Errorf("%s: listing %d objects made %d HEAD requests", prefix, len(objs), n)
		}
		for _, o := range objs {
			attrs, err := loc.Bucket.Attributes(ctx, o.Key)
			if err != nil {
				t.Fatal(err)
			}
			if o.ETag == "" || o.ETag != attrs.ETag {
				t.Fatalf("%s: listed ETag %q, HEAD says %q", o.URL, o.ETag, attrs.ETag)
			}
		}
		remote, err := source.Open(ctx, objs, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { remote.Close() })
		return remote, sourcetest.Open(t, dir)
	}
	same := func(what string, got, want []arrow.RecordBatch) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d batches, %d on disk", what, len(got), len(want))
		}
		for i := range got {
			if !array.RecordEqual(got[i], want[i]) {
				t.Fatalf("%s: batch %d differs from the same row group on disk", what, i)
			}
			got[i].Release()
			want[i].Release()
		}
	}

	// Row groups past the footer's 256 KiB: a ranged GET per column chunk.
	big := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 1, RowGroupRows: 10_000, Seed: 24})
	remote, local := open("big/", big)
	refs := remote.RowGroups()[:4]
	srv.reset()
	got, err := remote.ReadRowGroups(ctx, refs, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	check("the read's column chunks")
	wantRecs, err := local.ReadRowGroups(ctx, local.RowGroups()[:4], nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	same("big", got, wantRecs)
	var keys []int // six row groups of two key columns
	for _, name := range []string{"country", "date"} {
		c, err := remote.FieldIndex(name)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, c)
	}
	if _, _, err := partition.BuildWith(ctx, remote, keys, partition.BuildOptions{}, 1); err != nil {
		t.Fatal(err)
	}
	check("the key pass")

	// Many small files, opened again for the read (a table keeps few open).
	small := testutil.Generate(t, gen.Options{Rows: 2_000, Files: 40, Seed: 25})
	remote, local = open("small/", small)
	remote.MaxOpen = 2
	if _, err := remote.ReadRowGroups(ctx, remote.RowGroups()[:1], nil, 1); err != nil { // evicts the rest
		t.Fatal(err)
	}
	srv.reset()
	got, err = remote.ReadRowGroups(ctx, remote.RowGroups(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	check("the opens of small files")
	wantRecs, err = local.ReadRowGroups(ctx, local.RowGroups(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	same("small", got, wantRecs)
}

// TestStoreClientsShared: the locations a process opens on one bucket, with
// the same parameters, share one client and so its connections. A run over
// twelve input prefixes and an output on one S3 store opened a client per
// input URL and one for the output, each with its own connection pool;
// a second run in the same process (a Go program, a test, a loader making
// a Dataset per epoch) opened them all again: 16 connections each time,
// against 11 and then none.
func TestStoreClientsShared(t *testing.T) {
	srv, params := newDelayedS3(t, "bkt", 5*time.Millisecond)
	ctx := context.Background()
	loc, err := storage.OpenDir(ctx, "s3://bkt/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	in := testutil.Generate(t, gen.Options{Rows: 24_000, Files: 12, Seed: 139})
	var inputs []string
	for i, f := range testutil.Files(t, in) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("in/day=%02d/", i)
		if err := loc.Bucket.WriteAll(ctx, prefix+"part-0.parquet", data, nil); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, "s3://bkt/"+prefix+params)
	}
	local := filepath.Join(t.TempDir(), "local")
	smallRun(t, in, local, nil)
	before := srv.Conns.Load()
	for i := range 2 {
		out := fmt.Sprintf("s3://bkt/out%d/", i)
		smallRun(t, inputs[0], out+params, func(o *RunOptions) { o.Inputs = inputs; o.HivePartitioning = "off" })
		got := srv.Conns.Load() - before
		before += got
		t.Logf("run %d: %d connections opened, at most %d requests at once", i, got, srv.most.Load())
		sameObjects(t, "s3", readTree(t, local), testutil.BucketTree(t, loc.Bucket, out[len("s3://bkt/"):]))
		// The first run's count is logged only: with a client per input it
		// was 16 here against 11, too close to tell apart on a busy machine.
		if i == 1 && got > 4 {
			t.Errorf("a second run in the same process opened %d connections, want at most 4: it did not reuse the first's", got)
		}
		srv.reset()
	}
}
