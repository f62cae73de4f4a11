package pipeline

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
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
	backend = s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	counts = &httpCounts{}
	inner := gofakes3.New(backend).Server()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counts.requests.Add(1)
		switch r.Method {
		case http.MethodGet: // object reads, not listings (GET /bucket?...)
			if strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 {
				counts.gets.Add(1)
				w = countingWriter{w, &counts.getBytes}
			}
		case http.MethodPut, http.MethodPost:
			counts.puts.Add(1)
		case http.MethodDelete:
			counts.deletes.Add(1)
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_REGION", "us-east-1")
	return "?region=us-east-1&endpoint=" + ts.URL + "&use_path_style=true&disable_https=true&request_checksum_calculation=when_required&response_checksum_validation=when_required", backend, counts
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

// TestObjectStorageMatchesLocal runs the same job local->local, S3->S3 (a
// real S3-protocol server over HTTP on loopback, through gocloud's s3blob) and
// mem->mem, and requires byte-identical data files and manifests (inputs are
// named differently, so the manifests' input paths are normalised).
func TestObjectStorageMatchesLocal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 20_000, Files: 3, Seed: 21})
	local := filepath.Join(t.TempDir(), "out")
	withTensors := func(o *RunOptions) { o.Tensors = true; o.ShardBytes = 256 << 10 }
	smallRun(t, in, local, withTensors)
	want := readTree(t, local)

	params, _ := s3Server(t, "bkt")
	ctx := context.Background()
	s3loc, err := storage.OpenDir(ctx, "s3://bkt/impressions"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	upload(t, s3loc.Bucket, "impressions/", in)
	smallRun(t, "s3://bkt/impressions/"+params, "s3://bkt/relaid/"+params, withTensors)
	gotS3 := testutil.BucketTree(t, s3loc.Bucket, "relaid/")

	mem := storage.MemBucket("conformance-test")
	upload(t, mem, "in/", in)
	smallRun(t, "mem://conformance-test/in/", "mem://conformance-test/out/", withTensors)
	gotMem := testutil.BucketTree(t, mem, "out/")

	for name, got := range map[string]map[string][]byte{"s3": gotS3, "mem": gotMem} {
		if len(got) != len(want) {
			t.Fatalf("%s: %d objects, local %d", name, len(got), len(want))
		}
		for k, v := range want {
			g := got[k]
			if k == "manifest.json" {
				g, v = normaliseInputs(g), normaliseInputs(v)
			}
			if !bytes.Equal(g, v) {
				t.Fatalf("%s: %s differs from the local run", name, k)
			}
		}
		// verify works on the remote output too.
	}
	res, err := verify.Output(ctx, "s3://bkt/relaid/"+params, true, 2)
	if err != nil || !res.OK {
		t.Fatalf("verify on S3: %+v %v", res, err)
	}
	res, err = verify.Output(ctx, "mem://conformance-test/out/", true, 2)
	if err != nil || !res.OK {
		t.Fatalf("verify on mem: %+v %v", res, err)
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
