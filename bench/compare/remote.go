package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/storage"
)

// remoteBench measures issue 15: one epoch of the Go loader (window order,
// one reader) from a loopback S3 server through the cache, against the
// same epoch from local disk: wall time, bytes downloaded and time waited
// per batch, with a cache of the whole output and of a quarter of it.
func remoteBench(dir string, reps int, res map[string]any) {
	out := filepath.Join(dir, "tensors-dense")
	if _, err := os.Stat(filepath.Join(out, "manifest.json")); err != nil {
		fmt.Println("\nremote bench: no tensors-dense output (run BENCH_ONLY=tensors first)")
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	// latency delays every request (nanoseconds), as a store away from the
	// reader does; inflight and peak count the requests being answered.
	var gets, latency, inflight, peak atomic.Int64
	params, stop := fakeS3(ln, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/tensors/") {
				gets.Add(1)
			}
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			if d := latency.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			inner.ServeHTTP(w, r)
		})
	})
	defer stop()
	// The same dense output written with a shard per canonical block
	// (--shard-blocks 1): a block is then one request, not one per tensor.
	blocks := filepath.Join(dir, "tensors-dense-blocks")
	timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", filepath.Join(dir, "events-1000000"), "--output", blocks,
		"--slice-keys", "country,date", "--tensor-spec", "bench/tensors-dense.yaml", "--shard-blocks", "1")
	results := map[string]any{}
	upload := func(local, prefix string) (string, int64) {
		loc, err := storage.OpenDir(context.Background(), "s3://bench/"+prefix+"/"+params, false)
		if err != nil {
			panic(err)
		}
		var tensorBytes int64
		filepath.Walk(local, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(local, p)
			data, _ := os.ReadFile(p)
			if filepath.Dir(rel) == "tensors" {
				tensorBytes += int64(len(data))
			}
			return loc.Bucket.WriteAll(context.Background(), prefix+"/"+filepath.ToSlash(rel), data, nil)
		})
		return "s3://bench/" + prefix + "/" + params, tensorBytes
	}
	epoch := func(path string, opts loader.Options, window int64) (time.Duration, int, loader.RemoteStats, error) {
		d, err := loader.Open(path, opts)
		if err != nil {
			panic(err)
		}
		defer d.Close()
		r, err := d.NewReader(loader.ReadOptions{Assignment: loader.Assignment{Seed: 1, Shuffle: true, World: 1, NumWorkers: 1}, Batch: 512, WindowBytes: window})
		if err != nil {
			return 0, 0, loader.RemoteStats{}, err
		}
		defer r.Close()
		t0 := time.Now()
		n := 0
		for {
			b, err := r.Next()
			if err != nil {
				panic(err)
			}
			if b == nil {
				break
			}
			n++
		}
		return time.Since(t0), n, d.RemoteStats(), nil
	}
	type benchCase struct {
		name        string
		cache       int64
		window      int64
		latency     time.Duration
		maxRequests int
	}
	measure := func(out, url string, tensorBytes int64, label string, cases []benchCase) {
		fmt.Printf("\n== loader from loopback S3 (gofakes3), %s: %.0f MB of tensors, window order, batches of 512, medians of %d\n", label, float64(tensorBytes)/1e6, reps)
		for _, c := range cases {
			var loc, rem, again []time.Duration
			var st loader.RemoteStats
			var batches int
			var refused error
			var requests, inFlight int64
			for i := 0; i < reps && refused == nil; i++ {
				l, _, _, _ := epoch(out, loader.Options{}, c.window)
				// BENCH_CPUPROFILE profiles the last epoch of one loopback
				// case: "whole", or the one BENCH_CPUPROFILE_CASE names.
				profiling := false
				if p := os.Getenv("BENCH_CPUPROFILE"); p != "" && c.latency == 0 && c.name == cmp.Or(os.Getenv("BENCH_CPUPROFILE_CASE"), "whole") && i == reps-1 {
					f, _ := os.Create(p)
					profiling = pprof.StartCPUProfile(f) == nil
					if t := os.Getenv("BENCH_TRACE"); t != "" {
						tf, _ := os.Create(t)
						trace.Start(tf)
					}
				}
				cacheDir, _ := os.MkdirTemp(dir, "cache-")
				g0 := gets.Load()
				latency.Store(int64(c.latency))
				peak.Store(0)
				r, n, s, err := epoch(url, loader.Options{CacheDir: cacheDir, CacheBytes: c.cache, MaxRequests: c.maxRequests}, c.window)
				latency.Store(0)
				if profiling {
					trace.Stop()
					pprof.StopCPUProfile()
				}
				requests, inFlight = gets.Load()-g0, peak.Load()
				if err == nil && c.cache >= tensorBytes && c.latency == 0 {
					// A second epoch from the filled cache: no download.
					r2, _, _, _ := epoch(url, loader.Options{CacheDir: cacheDir, CacheBytes: c.cache, MaxRequests: c.maxRequests}, c.window)
					again = append(again, r2)
				}
				os.RemoveAll(cacheDir)
				refused = err
				loc, rem, st, batches = append(loc, l), append(rem, r), s, n
			}
			if refused != nil {
				fmt.Printf("cache %-7s (%4.0f MB, window %2d MB): refused up front: %v\n", c.name, float64(c.cache)/1e6, c.window>>20, refused)
				results[c.name] = map[string]any{"cache_bytes": c.cache, "refused": refused.Error()}
				continue
			}
			l, r := medianDur(loc), medianDur(rem)
			fmt.Printf("cache %-7s (%4.0f MB, window %2d MB): local %.2f s, S3 %.2f s (%.2fx local throughput, target >= 0.8x); downloaded %.4fx the tensors in %d GETs, at most %d in flight; waited %.2f ms per batch\n",
				c.name, float64(c.cache)/1e6, c.window>>20, l.Seconds(), r.Seconds(), l.Seconds()/r.Seconds(), float64(st.BytesDownloaded)/float64(tensorBytes),
				requests, inFlight, float64(st.Waited.Microseconds())/1000/float64(max(batches, 1)))
			results[c.name] = map[string]any{"cache_bytes": c.cache, "window_bytes": c.window, "local_seconds": l.Seconds(), "s3_seconds": r.Seconds(),
				"throughput_ratio": l.Seconds() / r.Seconds(), "downloaded_over_tensor_bytes": float64(st.BytesDownloaded) / float64(tensorBytes),
				"waited_ms_per_batch": float64(st.Waited.Microseconds()) / 1000 / float64(max(batches, 1)), "get_requests": requests,
				"latency_ms": c.latency.Milliseconds(), "max_in_flight": inFlight}
			if len(again) > 0 {
				a := medianDur(again)
				fmt.Printf("        %-7s the next epoch from the filled cache: %.2f s (%.2fx local throughput)\n", c.name, a.Seconds(), l.Seconds()/a.Seconds())
				results[c.name].(map[string]any)["cached_epoch_seconds"] = a.Seconds()
			}
		}
	}
	// The last two dense cases: a store that answers every request after
	// 20 ms (server-side, no CPU spent), with the ten requests in flight
	// the AWS SDK's connection pool allowed before and with the default.
	// BENCH_REMOTE_ONLY=blocks measures (and uploads) only the
	// shard-per-block output.
	dense := os.Getenv("BENCH_REMOTE_ONLY") != "blocks"
	var denseURL string
	var denseBytes int64
	if dense {
		denseURL, denseBytes = upload(out, "out")
		results["tensor_bytes"] = denseBytes
		measure(out, denseURL, denseBytes, "shards of 93 MB", []benchCase{{"whole", 2 * denseBytes, 16 << 20, 0, 0}, {"quarter", denseBytes / 4, 2 << 20, 0, 0},
			{"whole, store 20 ms away, 10 requests in flight", 2 * denseBytes, 16 << 20, 20 * time.Millisecond, 10},
			{"whole, store 20 ms away", 2 * denseBytes, 16 << 20, 20 * time.Millisecond, 0}})
	}
	blocksURL, blocksBytes := upload(blocks, "blocks")
	measure(blocks, blocksURL, blocksBytes, "a shard per block (--shard-blocks 1)", []benchCase{{"blocks, whole", 2 * blocksBytes, 16 << 20, 0, 0},
		{"blocks, quarter", blocksBytes / 4, 2 << 20, 0, 0}, {"blocks, whole, store 20 ms away", 2 * blocksBytes, 16 << 20, 20 * time.Millisecond, 0}})
	// The Python reader (NumPy), the same epochs with a quarter cache.
	pyEpoch := func(local, url string, tensorBytes int64, window int64, label string) {
		cmd := exec.Command("/usr/bin/python3", "bench/remote_epoch.py", local, url, dir, fmt.Sprint(tensorBytes/4), fmt.Sprint(window), fmt.Sprint(reps))
		cmd.Env = append(os.Environ(), "PYTHONPATH=python")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			fmt.Printf("python %s: %v: %s\n", label, err, stderr)
			return
		}
		var r struct {
			Local, S3 float64
			Batches   int
			Stats     map[string]float64
		}
		if err := json.Unmarshal(out, &r); err != nil {
			fmt.Printf("python %s: %v: %s\n", label, err, out)
			return
		}
		fmt.Printf("python, %s, quarter cache: local %.2f s, S3 %.2f s (%.2fx local throughput); waited %.2f ms per batch\n",
			label, r.Local, r.S3, r.Local/r.S3, r.Stats["waited_seconds"]*1000/float64(max(r.Batches, 1)))
		results["python "+label] = map[string]any{"local_seconds": r.Local, "s3_seconds": r.S3, "throughput_ratio": r.Local / r.S3}
	}
	if dense {
		pyEpoch(out, denseURL, denseBytes, 2<<20, "shards of 93 MB")
	}
	pyEpoch(blocks, blocksURL, blocksBytes, 2<<20, "a shard per block")
	res["remote_loader"] = results
}
