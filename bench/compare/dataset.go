package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// datasetBench measures issue 17's nightly run: a 30-day dataset root
// gets its 30th day. It times the incremental run against re-laying that
// one day alone (target: at most 1.2x) and against rewriting all 30 days,
// with the bytes each writes (medians of reps).
func datasetBench(dir, in string, reps int, res map[string]any) {
	daily := filepath.Join(dir, "daily-"+filepath.Base(in))
	if _, err := os.Stat(daily); err != nil {
		fmt.Println("\nwriting the log as a daily Hive table...")
		duck(fmt.Sprintf(`copy (select * exclude (date), date from read_parquet('%s/*.parquet')) to '%s' (format parquet, partition_by (date))`, in, daily))
	}
	ents, _ := os.ReadDir(daily)
	var days []string
	for _, e := range ents {
		days = append(days, e.Name())
	}
	sort.Strings(days)
	if len(days) < 2 {
		fmt.Println("dataset bench: fewer than 2 days")
		return
	}
	last := days[len(days)-1]
	link := func(dst string, ds []string) {
		for _, d := range ds {
			os.MkdirAll(filepath.Join(dst, d), 0o755)
			fs, _ := os.ReadDir(filepath.Join(daily, d))
			for _, f := range fs {
				os.Link(filepath.Join(daily, d, f.Name()), filepath.Join(dst, d, f.Name()))
			}
		}
	}
	common := []string{"--quiet", "--slice-keys", "date,country"}
	var nightly, alone, full []measure
	var written, fullWritten int64
	for r := 0; r < reps; r++ {
		work := filepath.Join(dir, "ds-work")
		os.RemoveAll(work)
		dsIn, root := filepath.Join(work, "in"), filepath.Join(work, "root")
		link(dsIn, days[:len(days)-1])
		timed("bin/relayout", append([]string{"run", "--dataset", root, "--input", dsIn}, common...)...)
		link(dsIn, days[len(days)-1:])
		rep := filepath.Join(work, "nightly.json")
		m, _ := timed("bin/relayout", append([]string{"run", "--dataset", root, "--input", dsIn, "--report-json", rep}, common...)...)
		nightly = append(nightly, m)
		written = datasetWritten(rep)
		m, _ = timed("bin/relayout", append([]string{"run", "--input", filepath.Join(dsIn, last), "--output", filepath.Join(work, "alone")}, common...)...)
		alone = append(alone, m)
		rep = filepath.Join(work, "full.json")
		m, _ = timed("bin/relayout", append([]string{"run", "--dataset", filepath.Join(work, "full"), "--input", dsIn, "--report-json", rep}, common...)...)
		full = append(full, m)
		fullWritten = datasetWritten(rep)
	}
	n, a, f := median(nightly), median(alone), median(full)
	fmt.Printf("\n== nightly dataset run: +1 day (%s) on %d days, medians of %d\n", last, len(days)-1, reps)
	fmt.Printf("incremental run:       %.2f s, %.0f MB peak RSS, wrote %.1f MB\n", n.Seconds, float64(n.RSS)/1e6, float64(written)/1e6)
	fmt.Printf("that day alone (run):  %.2f s, %.0f MB peak RSS   incremental / alone: %.2fx (target <= 1.2x)\n", a.Seconds, float64(a.RSS)/1e6, n.Seconds/a.Seconds)
	fmt.Printf("full rewrite, %d days: %.2f s, %.0f MB peak RSS, wrote %.1f MB   incremental / full: %.2fx\n",
		len(days), f.Seconds, float64(f.RSS)/1e6, float64(fullWritten)/1e6, n.Seconds/f.Seconds)
	res["dataset"] = map[string]any{"days": len(days), "incremental": n, "one_day_alone": a, "full_rewrite": f,
		"incremental_over_alone": n.Seconds / a.Seconds, "incremental_over_full": n.Seconds / f.Seconds,
		"bytes_written_incremental": written, "bytes_written_full": fullWritten}
}

// datasetWritten reads the bytes a dataset run wrote from its
// --report-json.
func datasetWritten(path string) int64 {
	var r struct {
		Generation struct {
			Changes struct {
				BytesWritten int64 `json:"bytes_written"`
			} `json:"changes"`
		} `json:"generation"`
	}
	data, _ := os.ReadFile(path)
	json.Unmarshal(data, &r)
	return r.Generation.Changes.BytesWritten
}
