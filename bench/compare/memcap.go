package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/relayout/relayout/internal/gen"
)

// The memory ceiling (issue 18): relayout run at one --memory-limit on 1x,
// 4x and 16x the input, with a competing CPU load, each run twice:
//
//   - free: no cgroup. Peak RSS (/usr/bin/time -v) counts the clean
//     file-backed pages of the binary (about 50 MiB of a 107 MB binary that
//     links three cloud SDKs), which nothing asks the kernel to reclaim.
//   - capped: in a memory cgroup whose limit is --memory-limit, as a
//     Kubernetes pod given that limit. It must finish (no OOM kill); the
//     cgroup's own peak and the run's peak RSS are reported.
//
// Anonymous memory (what a limit cannot reclaim) is sampled by the run
// itself ($RELAYOUT_MEMSTATS), as is the file-backed part.

type memcapRun struct {
	Seconds    float64 `json:"seconds"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
	PeakAnon   int64   `json:"peak_anon_bytes"`
	PeakFile   int64   `json:"peak_file_bytes"`
	CgroupPeak int64   `json:"cgroup_peak_bytes,omitempty"`
	OOMKills   int64   `json:"oom_kills"`
	MajFaults  int64   `json:"major_faults"`
}

// memcgroup makes a cgroup v1 memory cgroup with the given limit, or says
// why it cannot.
func memcgroup(name string, limit int64) (string, func(), error) {
	cg := filepath.Join("/sys/fs/cgroup/memory", name)
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err != nil {
		return "", func() {}, fmt.Errorf("no cgroup v1 memory controller")
	}
	os.Remove(cg)
	if err := os.Mkdir(cg, 0o755); err != nil {
		return "", func() {}, err
	}
	cleanup := func() { os.Remove(cg) }
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		cleanup()
		return "", func() {}, err
	}
	return cg, cleanup, nil
}

func readInt(p string) int64 {
	b, _ := os.ReadFile(p)
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func oomKills(cg string) int64 {
	b, _ := os.ReadFile(filepath.Join(cg, "memory.oom_control"))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// memcapOnce runs relayout once, in cg when it is not "".
func memcapOnce(cg, in, out, limit, tmp string) (memcapRun, error) {
	stats := out + ".memstats"
	args := []string{"-v", "bin/relayout", "run", "--quiet", "--overwrite", "--input", in, "--output", out,
		"--slice-keys", "country,date", "--memory-limit", limit, "--tmp-dir", tmp}
	var cmd *exec.Cmd
	if cg != "" {
		os.WriteFile(filepath.Join(cg, "memory.max_usage_in_bytes"), []byte("0"), 0o644)
		script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec /usr/bin/time "$@"`, cg)
		cmd = exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	} else {
		cmd = exec.Command("/usr/bin/time", args...)
	}
	cmd.Env = append(os.Environ(), "RELAYOUT_MEMSTATS="+stats)
	var before int64
	if cg != "" {
		before = oomKills(cg)
	}
	t0 := time.Now()
	outb, err := cmd.CombinedOutput()
	r := memcapRun{Seconds: time.Since(t0).Seconds()}
	if cg != "" {
		r.CgroupPeak = readInt(filepath.Join(cg, "memory.max_usage_in_bytes"))
		r.OOMKills = oomKills(cg) - before
	}
	if g := rssRe.FindStringSubmatch(string(outb)); g != nil {
		kb, _ := strconv.ParseInt(g[1], 10, 64)
		r.PeakRSS = kb << 10
	}
	for _, l := range strings.Split(string(outb), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Major (requiring I/O) page faults: "); ok {
			r.MajFaults, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if f, ferr := os.Open(stats); ferr == nil {
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			var t float64
			var anon, file int64
			if n, _ := fmt.Sscan(sc.Text(), &t, &anon, &file); n == 3 {
				r.PeakAnon, r.PeakFile = max(r.PeakAnon, anon<<20), max(r.PeakFile, file<<20)
			}
		}
		f.Close()
		os.Remove(stats)
	}
	if err != nil {
		return r, fmt.Errorf("%v: %s", err, lastLines(string(outb), 3))
	}
	return r, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(len(l)-n, 0):], " | ")
}

// spin keeps n processes busy (a competing CPU load) until the returned
// function stops them: processes of their own, outside the measured run.
// The stop kills and waits for them, so that none outlives the bench (a
// cancelled context alone left them spinning when the bench exited first).
func spin(n int) (stop func()) {
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if c.Start() == nil {
			cmds = append(cmds, c)
		}
	}
	return func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
}

func memcapBench(dir, in string, rows int64, res map[string]any) {
	limit := os.Getenv("BENCH_MEMCAP_LIMIT")
	if limit == "" {
		limit = "128MiB"
	}
	limitBytes := int64(128 << 20)
	if v, err := strconv.ParseInt(strings.TrimSuffix(limit, "MiB"), 10, 64); err == nil {
		limitBytes = v << 20
	}
	scales := []int64{1, 4, 16}
	if s := os.Getenv("BENCH_MEMCAP_SCALES"); s != "" {
		scales = nil
		for _, f := range strings.Split(s, ",") {
			v, _ := strconv.ParseInt(f, 10, 64)
			scales = append(scales, v)
		}
	}
	fmt.Printf("\n== memory ceiling: --memory-limit %s, a competing load of %d spinning processes\n", limit, runtime.NumCPU())
	cg, cleanup, cgErr := memcgroup("relayout-memcap", limitBytes)
	defer cleanup()
	if cgErr != nil {
		fmt.Printf("capped runs skipped: %v (needs root and a cgroup v1 memory controller)\n", cgErr)
	}
	defer spin(runtime.NumCPU())()
	out := map[string]any{"memory_limit": limit}
	var base float64
	fmt.Printf("%-5s %-7s %9s %10s %10s %10s %11s %5s %7s\n", "input", "", "time", "peak RSS", "anon", "file", "cgroup peak", "OOM", "majflt")
	for _, k := range scales {
		src := in
		if k > 1 {
			src = filepath.Join(dir, fmt.Sprintf("events-%d", rows*k))
			if _, err := os.Stat(src); err != nil {
				fmt.Printf("generating %d rows...\n", rows*k)
				if _, err := gen.Write(src, gen.Options{Rows: rows * k, Files: int(4 * k), Seed: 1}); err != nil {
					panic(err)
				}
			}
		}
		row := map[string]any{}
		for _, mode := range []string{"free", "capped"} {
			c := ""
			if mode == "capped" {
				if cgErr != nil {
					continue
				}
				c = cg
			}
			r, err := memcapOnce(c, src, filepath.Join(dir, "memcap-out"), limit, dir)
			if err != nil {
				fmt.Printf("%dx %s: failed: %v (%d OOM kills)\n", k, mode, err, r.OOMKills)
			}
			if k == 1 && mode == "free" {
				base = r.Seconds
			}
			cgp := "-"
			if c != "" {
				cgp = fmt.Sprintf("%.1f MiB", float64(r.CgroupPeak)/(1<<20))
			}
			fmt.Printf("%-5s %-7s %7.1f s %6.1f MiB %6.1f MiB %6.1f MiB %11s %5d %7d", fmt.Sprintf("%dx", k), mode, r.Seconds,
				float64(r.PeakRSS)/(1<<20), float64(r.PeakAnon)/(1<<20), float64(r.PeakFile)/(1<<20), cgp, r.OOMKills, r.MajFaults)
			if base > 0 {
				fmt.Printf("   time ÷ 1x free: %.2fx", r.Seconds/base)
			}
			fmt.Println()
			row[mode] = r
		}
		out[fmt.Sprintf("x%d", k)] = row
	}
	res["memcap"] = out
}
