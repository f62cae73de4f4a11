package pipeline

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestManySmallFiles: 300 files of 20 rows (as streaming ingestion writes
// them). The in-memory run joins their row groups into one batch after
// fingerprinting them, a spilling run's map tasks route them a run at a
// time, and the distributed steps do as the spilling run; every way, flat
// and packed, the output is byte-identical (and each run checks that its
// rows are the input's). The debug log must show the joins happened, so
// the test fails if they stop happening.
func TestManySmallFiles(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 6_000, Files: 300, Seed: 5})
	for _, packed := range []bool{false, true} {
		name := "flat"
		if packed {
			name = "packed"
		}
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			pack := func(o *RunOptions) {
				if packed {
					o.QueryKey = []string{"query_id"}
				}
			}
			var ref map[string][]byte
			for _, r := range []struct {
				name string
				mod  func(*RunOptions)
				want *regexp.Regexp // in the debug log
			}{
				{"memory", nil, regexp.MustCompile(`msg="small row groups joined" row_groups=300 batches=1\b`)},
				// Units of 1,500 rows: maps route runs of 750 rows.
				{"spill", func(o *RunOptions) { o.UnitRows = 1_500; o.TmpDir = t.TempDir() },
					regexp.MustCompile(`msg="small row groups routed together" map=\d+ row_groups=\d+ batches=\d+`)},
			} {
				var log bytes.Buffer
				out := filepath.Join(base, r.name)
				smallRun(t, in, out, func(o *RunOptions) {
					pack(o)
					o.Log = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
					if r.mod != nil {
						r.mod(o)
					}
				})
				if !r.want.Match(log.Bytes()) {
					t.Fatalf("%s: the debug log lacks %q:\n%s", r.name, r.want, grepLines(log.String(), "small row groups"))
				}
				if r.name == "spill" {
					// Every map joined: 300 row groups in fewer batches.
					for _, m := range regexp.MustCompile(`row_groups=(\d+) batches=(\d+)`).FindAllStringSubmatch(log.String(), -1) {
						if m[1] == m[2] {
							t.Fatalf("spill: a map routed %s row groups in %s batches", m[1], m[2])
						}
					}
				}
				got := readTree(t, out)
				if ref == nil {
					ref = got
					continue
				}
				sameTree(t, r.name, got, ref)
			}
			o := RunOptions{Inputs: []string{in}, Output: filepath.Join(base, "dist"), SliceKeys: []string{"country", "date"},
				RowGroupBytes: 512 << 10, MinRowGroupBytes: 64 << 10, FileBytes: 1 << 20, UnitRows: 1_500}
			pack(&o)
			runDistributed(t, o, 256<<10, 2)
			sameTree(t, "distributed", readTree(t, o.Output), ref)
		})
	}
}

// sameTree fails unless got holds ref's files with ref's bytes.
func sameTree(t *testing.T, name string, got, ref map[string][]byte) {
	t.Helper()
	if len(got) != len(ref) {
		t.Fatalf("%s: %d files, the first run %d", name, len(got), len(ref))
	}
	for k, v := range ref {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("%s: %s differs from the first run", name, k)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
