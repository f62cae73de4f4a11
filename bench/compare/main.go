// Command compare benchmarks relayout against DuckDB side by side; see
// bench/README.md.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relayout/relayout/internal/gen"
)

type measure struct {
	Seconds float64 `json:"seconds"`
	RSS     int64   `json:"peak_rss_bytes"`
	// CPU is user plus system seconds, from /usr/bin/time; Sys the system
	// part (where a machine's cost of fresh memory shows).
	CPU float64 `json:"cpu_seconds,omitempty"`
	Sys float64 `json:"system_seconds,omitempty"`
}

var (
	rssRe  = regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)
	userRe = regexp.MustCompile(`User time \(seconds\): ([0-9.]+)`)
	sysRe  = regexp.MustCompile(`System time \(seconds\): ([0-9.]+)`)
)

// timed runs a command under /usr/bin/time -v.
func timed(name string, args ...string) (measure, string) {
	m, so, se, err := tryTimed(name, args...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %v: %v\n%s\n", name, args, err, se)
		os.Exit(1)
	}
	return m, so
}

// tryTimed is timed for a command that may fail (a peer out of memory):
// the error and its stderr are returned.
func tryTimed(name string, args ...string) (m measure, stdout, stderr string, err error) {
	cmd := exec.Command("/usr/bin/time", append([]string{"-v", name}, args...)...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return measure{}, so.String(), se.String(), err
	}
	m = measure{Seconds: time.Since(t0).Seconds()}
	if g := rssRe.FindStringSubmatch(se.String()); g != nil {
		kb, _ := strconv.ParseInt(g[1], 10, 64)
		m.RSS = kb * 1024
	}
	seconds := func(re *regexp.Regexp) float64 {
		if g := re.FindStringSubmatch(se.String()); g != nil {
			v, _ := strconv.ParseFloat(g[1], 64)
			return v
		}
		return 0
	}
	m.Sys = seconds(sysRe)
	m.CPU = seconds(userRe) + m.Sys
	return m, so.String(), se.String(), nil
}

// rotated runs each of the commands reps times, rep i starting with
// command i mod len(cmds) and going round: each command follows each other
// equally often. On a VM, memory another process just freed is slow to
// touch again (the host takes it back), so whatever ran after the tool
// that used the most memory paid for it: in a fixed order, the first
// command after a 1.2 GB peer was 0.3-0.9 s slower (perf: the kernel
// zeroing fresh huge pages).
func rotated(reps int, cmds ...func()) {
	for i := 0; i < reps; i++ {
		for k := range cmds {
			cmds[(i+k)%len(cmds)]()
		}
	}
}

func median(ms []measure) measure {
	mid := func(key func(measure) float64) measure {
		s := slices.Clone(ms)
		sort.Slice(s, func(i, j int) bool { return key(s[i]) < key(s[j]) })
		return s[len(s)/2]
	}
	return measure{
		Seconds: mid(func(m measure) float64 { return m.Seconds }).Seconds,
		RSS:     mid(func(m measure) float64 { return float64(m.RSS) }).RSS,
		CPU:     mid(func(m measure) float64 { return m.CPU }).CPU,
		Sys:     mid(func(m measure) float64 { return m.Sys }).Sys,
	}
}

// run reports whether a section runs: all of them, or the one BENCH_ONLY
// names (compare, pack, dryrun, dist, keypass, scaleout, tensors, remote,
// dataset, scale, smallfiles, hiveout, s3input, memcap).
func run(section string) bool {
	only := os.Getenv("BENCH_ONLY")
	return only == "" || only == section
}

// duckdbSort and polarsSort time the peers' flat job on the Parquet files
// of folder in: DuckDB's ORDER BY COPY and Polars' sort + write, zstd,
// into out (removed first).
func duckdbSort(in, out string) measure {
	os.Remove(out)
	m, _ := timed("node", "tools/node/duckdb.mjs", "--threads", "2",
		fmt.Sprintf("COPY (SELECT * FROM read_parquet('%s/*.parquet') ORDER BY country, date) TO '%s' (FORMAT parquet, COMPRESSION zstd)", in, out))
	return m
}

func polarsSort(in, out string) measure {
	os.Remove(out)
	m, _ := timed("node", "tools/node/polars.mjs", in+"/*.parquet", out, "country,date")
	return m
}

func envInt(k string, d int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(k), 10, 64); err == nil && v > 0 {
		return v
	}
	return d
}

func dirBytes(glob string) int64 {
	m, _ := filepath.Glob(glob)
	var n int64
	for _, p := range m {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

func duck(sql ...string) (rows []map[string]any, reads []int64) {
	args := append([]string{"tools/node/duckdb.mjs", "--threads", "2"}, sql...)
	out, err := exec.Command("node", args...).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "duckdb: %v\n", err)
		os.Exit(1)
	}
	var res struct {
		Rows      []map[string]any `json:"rows"`
		ReadBytes []int64          `json:"read_bytes"`
	}
	json.Unmarshal(out, &res)
	return res.Rows, res.ReadBytes
}

// amplification measures, per country, DuckDB's bytes read for SELECT *
// WHERE country = c over share of the files' bytes; row-weighted mean.
func amplification(glob string) (float64, map[string]float64) {
	total := dirBytes(glob)
	rows, _ := duck(fmt.Sprintf("select country, count(*)::BIGINT n from read_parquet('%s') group by all order by all", glob))
	var countries []string
	counts := map[string]float64{}
	var all float64
	for _, r := range rows {
		c := fmt.Sprint(r["country"])
		n, _ := strconv.ParseFloat(fmt.Sprint(r["n"]), 64)
		countries = append(countries, c)
		counts[c] = n
		all += n
	}
	sqls := []string{"SET enable_external_file_cache = false"}
	for _, c := range countries {
		sqls = append(sqls, fmt.Sprintf("CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM read_parquet('%s') WHERE country = '%s'", glob, c))
	}
	_, reads := duck(sqls...)
	per := map[string]float64{}
	var weighted float64
	for i, c := range countries {
		share := float64(total) * counts[c] / all
		ratio := float64(reads[i+1]) / share
		per[c] = ratio
		weighted += ratio * counts[c] / all
	}
	return weighted, per
}

func main() {
	rows := envInt("BENCH_ROWS", 1_000_000)
	reps := int(envInt("BENCH_REPS", 3))
	dir := os.Getenv("BENCH_DIR")
	if dir == "" {
		dir = ".bench"
	}
	os.MkdirAll(dir, 0o755)
	in := filepath.Join(dir, fmt.Sprintf("events-%d", rows))
	if _, err := os.Stat(in); err != nil {
		fmt.Printf("generating %d rows in 4 files...\n", rows)
		if _, err := gen.Write(in, gen.Options{Rows: rows, Files: 4, Seed: 1}); err != nil {
			panic(err)
		}
	}
	inBytes := dirBytes(in + "/*.parquet")
	res := map[string]any{"rows": rows, "input_bytes": inBytes, "date": time.Now().UTC().Format(time.RFC3339), "machine": freshMemory()}

	// 1-2. relayout vs DuckDB, and slice read amplification.
	out := filepath.Join(dir, "relaid")
	if run("compare") {
		// 1. relayout vs DuckDB and Polars, the three alternating in a
		// rotating order (rotated), so that each sees the same machine state.
		var rl, dk, pl []measure
		duckOut := filepath.Join(dir, "duckdb.parquet")
		polarsOut := filepath.Join(dir, "polars.parquet")
		rotated(reps, func() {
			m, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", out, "--slice-keys", "country,date")
			rl = append(rl, m)
		}, func() {
			dk = append(dk, duckdbSort(in, duckOut))
		}, func() {
			pl = append(pl, polarsSort(in, polarsOut))
		})
		r, d, p := median(rl), median(dk), median(pl)
		rlBytes, dkBytes, plBytes := dirBytes(out+"/parquet/*.parquet"), dirBytes(duckOut), dirBytes(polarsOut)
		fmt.Printf("\n== relayout vs DuckDB (ORDER BY COPY) and Polars (sort + writeParquet), zstd, on %d rows (%.1f MB input), median of %d\n", rows, float64(inBytes)/1e6, reps)
		fmt.Printf("%-10s %10s %12s %12s %12s %12s\n", "", "seconds", "CPU seconds", "of it system", "peak RSS MB", "output MB")
		for _, row := range []struct {
			name  string
			m     measure
			bytes int64
		}{{"relayout", r, rlBytes}, {"duckdb", d, dkBytes}, {"polars", p, plBytes}} {
			fmt.Printf("%-10s %10.2f %12.2f %12.2f %12.0f %12.1f\n", row.name, row.m.Seconds, row.m.CPU, row.m.Sys, float64(row.m.RSS)/1e6, float64(row.bytes)/1e6)
		}
		fmt.Printf("%-10s %10.2fx %11.2fx %11.2fx %11.2fx %11.2fx   (targets: wall <= 0.8x, output <= 0.9x)\n", "÷ duckdb", r.Seconds/d.Seconds, r.CPU/d.CPU, r.Sys/d.Sys, float64(r.RSS)/float64(d.RSS), float64(rlBytes)/float64(dkBytes))
		fmt.Printf("%-10s %10.2fx %11.2fx %11.2fx %11.2fx %11.2fx   (target: wall <= 0.8x)\n", "÷ polars", r.Seconds/p.Seconds, r.CPU/p.CPU, r.Sys/p.Sys, float64(r.RSS)/float64(p.RSS), float64(rlBytes)/float64(plBytes))
		res["relayout"] = map[string]any{"median": r, "runs": rl, "output_bytes": rlBytes}
		res["duckdb"] = map[string]any{"median": d, "runs": dk, "output_bytes": dkBytes}
		res["polars"] = map[string]any{"median": p, "runs": pl, "output_bytes": plBytes}

		// 2. Slice read amplification, per country.
		aOut, perOut := amplification(out + "/parquet/*.parquet")
		aIn, _ := amplification(in + "/*.parquet")
		aDuck, _ := amplification(duckOut)
		fmt.Printf("\n== country slice read amplification (DuckDB rchar / slice share of bytes, weighted by rows)\n")
		fmt.Printf("relayout output %.2fx (target <= 1.25)   input %.2fx   DuckDB sorted output %.2fx\n", aOut, aIn, aDuck)
		var worst []string
		for c, v := range perOut {
			worst = append(worst, fmt.Sprintf("%s=%.2f", c, v))
		}
		sort.Strings(worst)
		fmt.Printf("per country (relayout): %s\n", strings.Join(worst, " "))
		res["amplification"] = map[string]any{"relayout": aOut, "input": aIn, "duckdb": aDuck, "relayout_per_country": perOut}
	}

	// 3. Query packing: packed vs flat, and DuckDB doing the same grouping.
	if run("pack") && os.Getenv("BENCH_SKIP_PACK") == "" {
		packedOut := filepath.Join(dir, "packed")
		var pk, fl, dg []measure
		duckPacked := filepath.Join(dir, "duckdb-packed.parquet")
		var qc, ic string
		packed := func() {
			m, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", packedOut, "--slice-keys", "country,date", "--query-key", "query_id")
			pk = append(pk, m)
			if qc == "" {
				var man struct {
					Packing struct {
						QueryColumns []string `json:"query_columns"`
						ItemColumns  []string `json:"item_columns"`
						Queries      int64    `json:"queries"`
						Items        int64    `json:"items"`
					} `json:"packing"`
				}
				data, _ := os.ReadFile(filepath.Join(packedOut, "manifest.json"))
				json.Unmarshal(data, &man)
				qc, ic = strings.Join(man.Packing.QueryColumns, ","), strings.Join(man.Packing.ItemColumns, ",")
				res["packing_counts"] = man.Packing
			}
		}
		packed() // the query and item columns the DuckDB query names
		pk = pk[:0]
		rotated(reps, packed, func() {
			m, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", out, "--slice-keys", "country,date")
			fl = append(fl, m)
		}, func() {
			os.Remove(duckPacked)
			m, _ := timed("node", "tools/node/duckdb.mjs", "--threads", "2",
				fmt.Sprintf("COPY (SELECT %s, list(struct_pack(%s)) AS items FROM read_parquet('%s/*.parquet') GROUP BY ALL ORDER BY country, date, query_id) TO '%s' (FORMAT parquet, COMPRESSION zstd)", qc, ic, in, duckPacked))
			dg = append(dg, m)
		})
		p, f, g := median(pk), median(fl), median(dg)
		pb, fb, gb := dirBytes(packedOut+"/parquet/*.parquet"), dirBytes(out+"/parquet/*.parquet"), dirBytes(duckPacked)
		fmt.Printf("\n== query packing (--query-key query_id), median of %d\n", reps)
		fmt.Printf("%-16s %10s %12s %12s\n", "", "seconds", "peak RSS MB", "output MB")
		fmt.Printf("%-16s %10.2f %12.0f %12.1f\n", "relayout packed", p.Seconds, float64(p.RSS)/1e6, float64(pb)/1e6)
		fmt.Printf("%-16s %10.2f %12.0f %12.1f\n", "relayout flat", f.Seconds, float64(f.RSS)/1e6, float64(fb)/1e6)
		fmt.Printf("%-16s %10.2f %12.0f %12.1f\n", "duckdb grouping", g.Seconds, float64(g.RSS)/1e6, float64(gb)/1e6)
		fmt.Printf("packed/flat time %.2fx (target <= 1.2)   packed/DuckDB time %.2fx (target <= 0.6), CPU %.2fx   packed/flat bytes %.2fx\n",
			p.Seconds/f.Seconds, p.Seconds/g.Seconds, p.CPU/g.CPU, float64(pb)/float64(fb))
		if c, ok := res["packing_counts"]; ok {
			data, _ := json.Marshal(c)
			var pc struct{ Queries, Items int64 }
			json.Unmarshal(data, &pc)
			if pc.Queries > 0 {
				fmt.Printf("query-level values decoded per epoch: %d rows flat -> %d queries packed (%.2fx fewer)\n", pc.Items, pc.Queries, float64(pc.Items)/float64(pc.Queries))
			}
		}
		res["packing"] = map[string]any{"packed": p, "flat": f, "duckdb": g, "packed_bytes": pb, "flat_bytes": fb, "duckdb_bytes": gb}
	}

	// 3b. Dry run: cost and accuracy.
	if run("dryrun") && os.Getenv("BENCH_SKIP_DRYRUN") == "" {
		dryRunBench(dir, in, reps, res)
	}

	// 3c. Distributed run: plan, map, reduce, commit.
	if run("dist") && os.Getenv("BENCH_SKIP_DIST") == "" {
		distBench(dir, in, inBytes, reps, res)
	}

	// 3c'. The key pass as tasks on tables 16-256x the input.
	if run("keypass") && os.Getenv("BENCH_SKIP_KEYPASS") == "" {
		keypassBench(dir, in, reps, res)
	}

	// 3d. Scale-out: W workers as separate test hosts (root only).
	if run("scaleout") && os.Getenv("BENCH_SKIP_SCALEOUT") == "" {
		scaleoutBench(dir, int(envInt("BENCH_SCALEOUT_ROWS", 2000000)), res)
	}

	// 4. Tensor shards: batches from shards vs Parquet, the NumPy loader,
	// transfer bytes packed vs flat.
	if run("tensors") && os.Getenv("BENCH_SKIP_TENSORS") == "" {
		tensorBench(dir, in, reps, res)
	}

	// 5. The loader from object storage (needs the tensors section's output).
	if run("remote") && os.Getenv("BENCH_SKIP_REMOTE") == "" {
		remoteBench(dir, reps, res)
	}

	// 6. A dataset that grows by a day.
	if run("dataset") && os.Getenv("BENCH_SKIP_DATASET") == "" {
		datasetBench(dir, in, reps, res)
	}

	// 7. Scaling at a fixed memory limit.
	if run("scale") && os.Getenv("BENCH_SKIP_SCALE") == "" {
		limit := os.Getenv("BENCH_SCALE_LIMIT")
		if limit == "" {
			limit = "512MiB"
		}
		in4 := filepath.Join(dir, fmt.Sprintf("events-%d", rows*4))
		if _, err := os.Stat(in4); err != nil {
			fmt.Printf("\ngenerating %d rows...\n", rows*4)
			if _, err := gen.Write(in4, gen.Options{Rows: rows * 4, Files: 16, Seed: 1}); err != nil {
				panic(err)
			}
		}
		m1, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", filepath.Join(dir, "s1"), "--slice-keys", "country,date", "--memory-limit", limit, "--tmp-dir", dir)
		m4, _ := timed("bin/relayout", "run", "--quiet", "--overwrite", "--input", in4, "--output", filepath.Join(dir, "s4"), "--slice-keys", "country,date", "--memory-limit", limit, "--tmp-dir", dir)
		fmt.Printf("\n== scaling at --memory-limit %s\n", limit)
		fmt.Printf("1x: %.2f s, %.0f MB peak RSS   4x: %.2f s, %.0f MB peak RSS   time ratio %.2fx (input 4.0x)\n",
			m1.Seconds, float64(m1.RSS)/1e6, m4.Seconds, float64(m4.RSS)/1e6, m4.Seconds/m1.Seconds)
		res["scaling"] = map[string]any{"memory_limit": limit, "x1": m1, "x4": m4, "input_x4_bytes": dirBytes(in4 + "/*.parquet")}
	}
	// 8. The memory ceiling, free and in a memory cgroup (memcap.go).
	if run("smallfiles") && os.Getenv("BENCH_SKIP_SMALLFILES") == "" {
		smallFilesBench(dir, reps, res)
	}

	if run("hiveout") && os.Getenv("BENCH_SKIP_HIVEOUT") == "" {
		// BENCH_HIVEOUT_ONLY=dist: the distributed steps alone; =s3: those
		// steps on an object store alone.
		only := os.Getenv("BENCH_HIVEOUT_ONLY")
		if only == "" {
			hiveOutBench(dir, in, reps, res)
		}
		if only == "" || only == "dist" {
			hiveDistBench(dir, in, reps, res)
		}
		if only == "" || only == "s3" {
			hiveDistS3Bench(in, res)
		}
	}

	if run("s3input") && os.Getenv("BENCH_SKIP_S3INPUT") == "" {
		s3InputBench(dir, in, reps, res)
	}

	if run("memcap") && os.Getenv("BENCH_SKIP_MEMCAP") == "" {
		memcapBench(dir, in, int64(rows), res)
	}
	data, _ := json.MarshalIndent(res, "", " ")
	os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644)
	fmt.Printf("\nresults: %s\n", filepath.Join(dir, "results.json"))
}
