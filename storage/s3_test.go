package storage

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/relayout/relayout/internal/par"
)

// TestOpenS3Parameters: s3:// URLs take the query parameters gocloud's
// s3blob opener takes (its own, then the AWS config's), and refuse bad
// values and unknown parameters with a message naming them.
func TestOpenS3Parameters(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	for _, c := range []struct{ query, err string }{
		{"region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true&disable_https=true", ""},
		{"region=us-east-1&s3ForcePathStyle=true&accelerate=false&ssetype=aws:kms&kmskeyid=k1", ""},
		{"region=us-east-1&request_checksum_calculation=when_required&response_checksum_validation=when_required", ""},
		{"region=us-east-1&ssetype=AES256", ""},
		{"region=us-east-1&ssetype=rot13", `"rot13" is not a valid value for "ssetype"`},
		{"region=us-east-1&use_path_style=maybe", `invalid value for "use_path_style"`},
		{"region=us-east-1&disable_https=2x", `invalid value for "disable_https"`},
		{"region=us-east-1&requester_pays=true", ""},
		{"region=us-east-1&requester_pays=maybe", `invalid value for "requester_pays"`},
		{"region=us-east-1&colour=blue", "colour"},
	} {
		u, err := url.Parse("s3://bucket?" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		b, err := openS3(context.Background(), u)
		if c.err == "" {
			if err != nil {
				t.Errorf("%s: %v", c.query, err)
			} else {
				b.Close()
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one containing %q", c.query, err, c.err)
		}
	}
}

// TestOpenS3KeepsCABundle: a store behind TLS with a private CA, named by
// AWS_CA_BUNDLE, is reached: the connection pool is set on the AWS
// config's own HTTP client, which carries the bundle, not on a new one.
func TestOpenS3KeepsCABundle(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("tls"); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(gofakes3.New(backend).Server())
	defer ts.Close()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	if err := os.WriteFile(bundle, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CA_BUNDLE", bundle)
	loc, err := OpenDir(context.Background(), "s3://tls/out/?region=us-east-1&use_path_style=true&request_checksum_calculation=when_required&response_checksum_validation=when_required&endpoint="+ts.URL, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Bucket.Close()
	if err := loc.Bucket.WriteAll(context.Background(), "out/x", []byte("hello"), nil); err != nil {
		t.Fatalf("writing through TLS with the CA bundle: %v", err)
	}
	got, err := loc.Bucket.ReadAll(context.Background(), "out/x")
	if err != nil || string(got) != "hello" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// TestOpenDirSharesBuckets: OpenDir returns one bucket for every location
// on a bucket opened with the same parameters (in any order) and the same
// credential variables, and another when either differs.
func TestOpenDirSharesBuckets(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	open := func(name string) *blob.Bucket {
		t.Helper()
		loc, err := OpenDir(ctx, name, false)
		if err != nil {
			t.Fatal(err)
		}
		return loc.Bucket
	}
	a := open("s3://shared/in/?region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true")
	if b := open("s3://shared/out/x/?use_path_style=true&endpoint=http://127.0.0.1:9&region=us-east-1"); b != a {
		t.Error("two prefixes of one bucket, the same parameters in another order: two buckets")
	}
	if b := open("s3://shared/?region=us-east-1&endpoint=http://127.0.0.1:10&use_path_style=true"); b == a {
		t.Error("another endpoint: the same bucket")
	}
	if b := open("s3://other/in/?region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true"); b == a {
		t.Error("another bucket: the same bucket")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "someone-else")
	if b := open("s3://shared/in/?region=us-east-1&endpoint=http://127.0.0.1:9&use_path_style=true"); b == a {
		t.Error("other credentials in the environment: the same bucket")
	}
	if _, err := OpenDir(ctx, "s3://shared/?colour=blue", false); err == nil {
		t.Error("an unknown parameter opened")
	}
	if _, err := OpenDir(ctx, "s3://shared/?colour=blue", false); err == nil {
		t.Error("an unknown parameter opened the second time (a failed open was kept)")
	}
}

// slowOpener opens slowtest:// buckets: those whose host is in block wait
// for a value on it (an error to fail with, or nil), as an open waiting on
// a credential lookup does; it counts its opens by host.
type slowOpener struct {
	mu      sync.Mutex
	opens   map[string]int
	entered chan string
	block   map[string]chan error
}

func (o *slowOpener) OpenBucketURL(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	o.mu.Lock()
	o.opens[u.Host]++
	ch := o.block[u.Host]
	o.mu.Unlock()
	if ch != nil {
		o.entered <- u.Host
		if err := <-ch; err != nil {
			return nil, err
		}
	}
	return memblob.OpenBucket(nil), nil
}

func (o *slowOpener) count(host string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opens[host]
}

// TestOpenBucketWaitsPerBucket: a bucket whose open is slow delays the
// locations on it alone. Opening every bucket under one process-wide lock,
// a location on another bucket waited for it too. Callers of the bucket
// under way wait for that open rather than open again, get its error if it
// fails (and the next call opens anew), and stop waiting when their
// context ends.
func TestOpenBucketWaitsPerBucket(t *testing.T) {
	op := &slowOpener{opens: map[string]int{}, entered: make(chan string, 4), block: map[string]chan error{"slow": make(chan error)}}
	blob.DefaultURLMux().RegisterBucket("slowtest", op)
	ctx := context.Background()
	type result struct {
		b   *blob.Bucket
		err error
	}
	open := func(ctx context.Context, name string) chan result {
		ch := make(chan result, 1)
		go func() {
			loc, err := OpenDir(ctx, name, false)
			ch <- result{loc.Bucket, err}
		}()
		return ch
	}
	wait := func(ch chan result, what string) result {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: still waiting after 30 s", what)
		}
		return result{}
	}
	first := open(ctx, "slowtest://slow/a/")
	<-op.entered // its open is under way
	if r := wait(open(ctx, "slowtest://fast/x/"), "another bucket while one opens"); r.err != nil {
		t.Fatal(r.err)
	}
	second := open(ctx, "slowtest://slow/b/")
	cctx, cancel := context.WithCancel(ctx)
	cancelled := open(cctx, "slowtest://slow/c/")
	cancel()
	if r := wait(cancelled, "a caller whose context ended"); r.err == nil {
		t.Error("a caller whose context ended got a bucket")
	}
	select {
	case r := <-second:
		t.Fatalf("a second caller of the bucket under way returned (%v) before its open finished", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	op.block["slow"] <- errors.New("no credentials yet")
	for i, ch := range []chan result{first, second} {
		if r := wait(ch, "a caller of the failed open"); r.err == nil || !strings.Contains(r.err.Error(), "no credentials yet") {
			t.Errorf("caller %d of a failed open: %v", i, r.err)
		}
	}
	if n := op.count("slow"); n != 1 {
		t.Errorf("the bucket under way was opened %d times, want once (callers wait for it)", n)
	}
	// The failed open was not kept: the next caller opens again.
	again := open(ctx, "slowtest://slow/d/")
	<-op.entered
	op.block["slow"] <- nil
	r := wait(again, "an open after a failed one")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := op.count("slow"); n != 2 {
		t.Errorf("after a failed open, %d opens of the bucket, want 2", n)
	}
	if s := wait(open(ctx, "slowtest://slow/e/"), "an open bucket"); s.b != r.b || s.err != nil {
		t.Errorf("an open bucket was not shared (err %v)", s.err)
	}
	if n := op.count("slow"); n != 2 {
		t.Errorf("an open bucket was opened again (%d opens)", n)
	}
}

// TestRemovePrefixBatchesS3Deletes: on S3, RemovePrefix deletes a
// thousand keys a request (DeleteObjects) where gocloud's Delete is a
// HEAD and a DELETE per object, and leaves a key s3blob escapes ("__0x")
// to that Delete. Every key under the prefix is gone, the others stay;
// the requests are counted by the server (gofakes3 on loopback).
func TestRemovePrefixBatchesS3Deletes(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	backend := s3mem.New()
	if err := backend.CreateBucket("bkt"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	methods := map[string]int{}
	inner := gofakes3.New(backend).Server()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods[r.Method]++
		mu.Unlock()
		inner.ServeHTTP(w, r)
	}))
	defer ts.Close()
	params := "?region=us-east-1&endpoint=" + ts.URL + "&use_path_style=true&disable_https=true"
	loc, err := OpenDir(ctx, "s3://bkt/out/"+params, false)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2100
	names := []string{"keep/x", "_w/odd__0x41"}
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("_w/r-%05d/_done.json", i))
	}
	if err := par.ForEach(ctx, len(names), 16, func(i int) error { return loc.Bucket.WriteAll(ctx, loc.Key(names[i]), []byte(names[i]), nil) }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(methods)
	mu.Unlock()
	if err := RemovePrefix(ctx, loc, "_w/"); err != nil {
		t.Fatal(err)
	}
	left, err := ListKeys(ctx, loc, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "keep/x" {
		t.Fatalf("after RemovePrefix of _w/: %d keys left (%.3v), want keep/x alone", len(left), left)
	}
	mu.Lock()
	defer mu.Unlock()
	// Three DeleteObjects (POST) for 2,100 keys; the escaped one a HEAD
	// and a DELETE; listings are GETs of the bucket.
	if methods[http.MethodPost] != 3 || methods[http.MethodDelete] != 1 || methods[http.MethodHead] != 1 {
		t.Errorf("requests %v: want 3 POST (DeleteObjects), 1 HEAD and 1 DELETE (the escaped key)", methods)
	}
}
