package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestProgressLinesOffATerminal: with stderr not a terminal, progress is
// a log line every --progress-interval (10 s by default), naming the stage
// and its done and total counts, never a bar.
func TestProgressLinesOffATerminal(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 300_000, Files: 3, Seed: 121})
	cmd := exec.Command(bin, "run", "--input", in, "--output", filepath.Join(t.TempDir(), "out"), "--slice-keys", "country,date",
		"--log-format", "json", "--progress-interval", "50ms", "--memory-limit", "256MiB")
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("run: %v: %s", err, se.String())
	}
	if strings.Contains(se.String(), "\r") || strings.Contains(se.String(), "[===") {
		t.Fatal("a progress bar was drawn off a terminal")
	}
	type line struct {
		Msg, Stage  string
		Done, Total int64
	}
	var lines []line
	sc := bufio.NewScanner(&se)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a stderr line is not JSON: %q", sc.Text())
		}
		if l.Msg == "progress" {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 {
		t.Fatalf("%d progress lines at a 50ms interval: %s", len(lines), se.String())
	}
	last := map[string]int64{}
	for _, l := range lines {
		if l.Stage == "" || l.Total <= 0 || l.Done > l.Total || l.Done < last[l.Stage] {
			t.Fatalf("progress line %+v (after %d done)", l, last[l.Stage])
		}
		last[l.Stage] = l.Done
	}
}

// TestProgressBarOnATerminal runs relayout in tmux, a real terminal: the
// bar is drawn in place (\r) and each stage ends on a "done in" line, with
// the summary after it.
func TestProgressBarOnATerminal(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		testutil.Missing(t, "tmux not installed (make deps)")
	}
	in := testutil.Generate(t, gen.Options{Rows: 300_000, Files: 3, Seed: 122})
	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock")
	script := filepath.Join(dir, "run.sh")
	os.WriteFile(script, []byte("#!/bin/sh\n"+bin+" run --input "+in+" --output "+filepath.Join(dir, "out")+
		" --slice-keys country,date --memory-limit 256MiB --log-level warn\necho EXIT=$?\nsleep 120\n"), 0o755)
	if out, err := exec.Command(tmux, "-S", sock, "new-session", "-d", "-s", "t", "-x", "110", "-y", "30", script).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	defer exec.Command(tmux, "-S", sock, "kill-server").Run()
	partial := regexp.MustCompile(`\[=* +\] +\d+\.\d%`)
	sawPartial := false
	var pane string
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		out, err := exec.Command(tmux, "-S", sock, "capture-pane", "-p", "-t", "t").Output()
		if err != nil {
			t.Fatalf("capture-pane: %v", err)
		}
		pane = string(out)
		sawPartial = sawPartial || partial.MatchString(pane)
		if strings.Contains(pane, "EXIT=") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(pane, "EXIT=0") {
		t.Fatalf("relayout did not finish in tmux:\n%s", pane)
	}
	for _, stage := range []string{"plan", "write"} {
		if !regexp.MustCompile(`(?m)^` + stage + ` +\[={30}\] done in \d+\.\ds$`).MatchString(pane) {
			t.Fatalf("no finished %s bar on the terminal:\n%s", stage, pane)
		}
	}
	if !regexp.MustCompile(`(?m)^relayout: 300000 rows from 3 input files`).MatchString(pane) {
		t.Fatalf("no summary line after the bars:\n%s", pane)
	}
	t.Logf("a bar in progress was captured: %v", sawPartial)
}
