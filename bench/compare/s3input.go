package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/storage"
)

// s3InputBench measures `relayout run` reading its input from an object
// store against the same run reading it from local disk, medians of reps in
// alternation. The store is gofakes3 on loopback, in this process, holding
// every object request (GET, HEAD) for BENCH_S3_LATENCY (default 10ms), as
// a store across a network does; the output is written locally both ways.
// Inputs: the 1M-row log (four files of 10 row groups: a ranged GET per
// column chunk) and 2,000 files of 20 rows (a few requests per file).
func s3InputBench(dir, in string, reps int, res map[string]any) {
	lat := 10 * time.Millisecond
	if d, err := time.ParseDuration(os.Getenv("BENCH_S3_LATENCY")); err == nil {
		lat = d
	}
	small := filepath.Join(dir, "small-2000")
	if _, err := os.Stat(small); err != nil {
		if _, err := gen.Write(small, gen.Options{Rows: 40_000, Files: 2_000, Seed: 1}); err != nil {
			panic(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	var requests atomic.Int64
	params, stop := fakeS3(ln, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				requests.Add(1)
				time.Sleep(lat)
			}
			inner.ServeHTTP(w, r)
		})
	})
	defer stop()
	fmt.Printf("\n== input from an object store (gofakes3 on loopback, %v per object request) vs local disk, median of %d\n", lat, reps)
	fmt.Printf("%-18s %10s %10s %8s %10s %12s\n", "input", "local s", "store s", "ratio", "requests", "peak RSS MB")
	out := map[string]any{"latency_ms": lat.Seconds() * 1e3}
	for _, c := range []struct{ name, dir string }{{"1M-row log", in}, {"2,000 small files", small}} {
		prefix := strings.ReplaceAll(filepath.Base(c.dir), ".", "-") + "/"
		loc, err := storage.OpenDir(context.Background(), "s3://bench/"+prefix+params, false)
		if err != nil {
			panic(err)
		}
		files, _ := filepath.Glob(filepath.Join(c.dir, "*.parquet"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			if err := loc.Bucket.WriteAll(context.Background(), prefix+filepath.Base(f), data, nil); err != nil {
				panic(err)
			}
		}
		var local, remote []measure
		var reqs int64
		args := []string{"run", "--quiet", "--overwrite", "--slice-keys", "country,date", "--output", filepath.Join(dir, "s3in-out"), "--input"}
		rotated(reps, func() {
			m, _ := timed("bin/relayout", append(args, c.dir)...)
			local = append(local, m)
		}, func() {
			r0 := requests.Load()
			m, _ := timed("bin/relayout", append(args, "s3://bench/"+prefix+params)...)
			remote = append(remote, m)
			reqs = requests.Load() - r0
		})
		l, r := median(local), median(remote)
		fmt.Printf("%-18s %10.2f %10.2f %7.2fx %10d %12.0f\n", c.name, l.Seconds, r.Seconds, r.Seconds/l.Seconds, reqs, float64(r.RSS)/1e6)
		out[c.name] = map[string]any{"local": l, "store": r, "requests": reqs}
	}
	res["s3_input"] = out
}

// fakeS3 serves an in-memory S3-protocol server (gofakes3) with a bucket
// "bench" on ln, every request through wrap (nil: none), sets the test
// credentials in the environment (the relayout processes it starts inherit
// them), and returns the URL parameters that point s3blob at it and a
// function that stops it.
func fakeS3(ln net.Listener, wrap func(http.Handler) http.Handler) (string, func()) {
	backend := s3mem.New()
	backend.CreateBucket("bench")
	var h http.Handler = gofakes3.New(backend).Server()
	if wrap != nil {
		h = wrap(h)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	os.Setenv("AWS_ACCESS_KEY_ID", "test")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	return "?region=us-east-1&endpoint=http://" + ln.Addr().String() + "&use_path_style=true&disable_https=true&request_checksum_calculation=when_required&response_checksum_validation=when_required",
		func() { srv.Close() }
}
