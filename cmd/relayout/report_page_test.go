package main

import (
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/report"
)

// chromium returns Debian's Chromium, failing under RELAYOUT_REQUIRE_PEERS
// when it is missing.
func chromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		testutil.Missing(t, "chromium not installed (make deps installs Debian's chromium)")
	}
	return p
}

// headless runs Chromium headless on a local page (flags as the machine
// notes say: no background networking, a fresh profile) and returns its
// DOM; with shot set it also writes a screenshot there.
func headless(t *testing.T, page, shot string) string {
	t.Helper()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--hide-scrollbars", "--user-data-dir=" + t.TempDir(), "--window-size=1100,1100"}
	if shot != "" {
		args = append(args, "--screenshot="+shot)
	} else {
		args = append(args, "--dump-dom")
	}
	out, err := exec.Command(chromium(t), append(args, "file://"+page)...).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return string(out)
}

// TestReportPageInChromium: `relayout report --html` renders a run's and a
// dry run's report as a self-contained page; in headless Chromium the chart
// is drawn (bars of both colours, their areas in the ratio of the bytes the
// JSON lists) and every figure shown equals the JSON's.
func TestReportPageInChromium(t *testing.T) {
	chromium(t)
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 2, Seed: 101})
	dir := t.TempDir()
	runRep, dryRep := filepath.Join(dir, "run.json"), filepath.Join(dir, "dry.json")
	common := []string{"--quiet", "--input", in, "--slice-keys", "country", "--query-key", "query_id", "--tensors"}
	if r := relayout(t, nil, append([]string{"run", "--output", filepath.Join(dir, "out"), "--report-json", runRep}, common...)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := relayout(t, nil, append([]string{"run", "--dry-run", "--output", filepath.Join(dir, "o2"), "--report-json", dryRep}, common...)...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, src := range []string{runRep, dryRep} {
		page := strings.TrimSuffix(src, ".json") + ".html"
		if r := relayout(t, nil, "report", src, "--html", page); r.code != 0 {
			t.Fatal(r.stderr)
		}
		html, _ := os.ReadFile(page)
		for _, bad := range []string{"<script", "<link", "<img", "https://", "@import", "url("} {
			if strings.Contains(string(html), bad) {
				t.Fatalf("%s: the page holds %q: it must not fetch anything", page, bad)
			}
		}
		var rep report.Report
		data, _ := os.ReadFile(src)
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		dom := headless(t, page, "")
		want := map[string]string{
			"input-bytes": fmt.Sprint(rep.Input.Bytes), "input-rows": fmt.Sprint(rep.Input.Rows), "output-bytes": fmt.Sprint(rep.Output.ParquetBytes),
			"output-shards": fmt.Sprint(rep.Output.Shards), "slices-count": fmt.Sprint(rep.Slices.Count),
			"read-bytes-before": fmt.Sprint(rep.Slices.Totals.ReadBytesBefore), "read-bytes-after": fmt.Sprint(rep.Slices.Totals.ReadBytesAfter),
			"read-reduction": fmt.Sprintf("%.2fx", rep.Slices.Totals.ReadReduction), "memory-bytes": fmt.Sprint(rep.Resources.MemoryBytes),
			"packing-queries": fmt.Sprint(rep.Packing.Queries), "transfer-packed-bytes": fmt.Sprint(rep.Transfer.PackedBytes),
			"config-hash": rep.ConfigHash,
		}
		for id, v := range want {
			m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
			if m == nil || m[1] != v {
				t.Errorf("%s: #%s shows %v, the JSON says %s", filepath.Base(page), id, m, v)
			}
		}
		// The chart: bars of both colours, drawn in proportion to the bytes.
		shot := strings.TrimSuffix(page, ".html") + ".png"
		headless(t, page, shot)
		f, err := os.Open(shot)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		count := func(hex string) int {
			r0, _ := strconv.ParseUint(hex[1:3], 16, 8)
			g0, _ := strconv.ParseUint(hex[3:5], 16, 8)
			b0, _ := strconv.ParseUint(hex[5:7], 16, 8)
			n := 0
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					r, g, bl, _ := img.At(x, y).RGBA()
					if near(r>>8, r0) && near(g>>8, g0) && near(bl>>8, b0) {
						n++
					}
				}
			}
			return n
		}
		before, after := count(report.ColorBefore), count(report.ColorAfter)
		var sumB, sumA float64
		for _, m := range regexp.MustCompile(`data-before="(\d+)" data-after="(\d+)"`).FindAllStringSubmatch(dom, -1) {
			b, _ := strconv.ParseFloat(m[1], 64)
			a, _ := strconv.ParseFloat(m[2], 64)
			sumB, sumA = sumB+b, sumA+a
		}
		if before < 2000 || after < 500 || sumB == 0 {
			t.Fatalf("%s: the chart is not drawn (%d before-coloured pixels, %d after-coloured)", filepath.Base(shot), before, after)
		}
		t.Logf("%s: %d before-coloured, %d after-coloured pixels; bytes charted %.0f before, %.0f after", filepath.Base(shot), before, after, sumB, sumA)
		// Legend swatches aside (144 px each), bar areas follow the bytes.
		got, wantRatio := float64(after-144)/float64(before-144), sumA/sumB
		if got < wantRatio*0.85 || got > wantRatio*1.15 {
			t.Fatalf("%s: after/before bar area %.3f, the bytes charted give %.3f", filepath.Base(shot), got, wantRatio)
		}
	}
}

func near(a uint32, b uint64) bool { return int64(a)-int64(b) <= 3 && int64(b)-int64(a) <= 3 }
