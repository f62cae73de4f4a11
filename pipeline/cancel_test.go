package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
)

// TestCancelAtAnyPointReturns cancels runs at many points (planning,
// reading, spilling, gathering, writing, checking) and requires each to
// return promptly with a retryable error (or finish), leaving no manifest
// and no temp files. A hang here once left a SIGTERM'd run blocked forever.
func TestCancelAtAnyPointReturns(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 60_000, Files: 3, Seed: 31})
	delays := []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond,
		60 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	for _, spillMode := range []bool{false, true} {
		cancelled := 0
		for _, d := range delays {
			out := filepath.Join(t.TempDir(), "out")
			tmp := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			o := RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"},
				RowGroupBytes: 512 << 10, FileBytes: 1 << 20, TmpDir: tmp}
			if spillMode {
				o.UnitRows = 15_000
			}
			done := make(chan error, 1)
			go func() {
				_, err := Run(ctx, o)
				done <- err
			}()
			time.Sleep(d)
			cancel()
			select {
			case err := <-done:
				if err == nil {
					continue // finished before the cancel
				}
				cancelled++
				if !errs.Is(err, errs.Transient) {
					t.Errorf("spill=%v cancel after %v: %v (class %v), want transient", spillMode, d, err, errs.ClassOf(err))
				}
				if _, err := os.Stat(filepath.Join(out, "manifest.json")); err == nil {
					t.Errorf("spill=%v cancel after %v: manifest left behind", spillMode, d)
				}
				if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
					t.Errorf("spill=%v cancel after %v: temp files left: %v", spillMode, d, ents)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("spill=%v: run cancelled after %v did not return", spillMode, d)
			}
		}
		// The zero delay cancels before the run starts: at least that one
		// is cancelled, or the test checked nothing.
		if cancelled == 0 {
			t.Errorf("spill=%v: every run finished before its cancel; the test checked no cancelled run", spillMode)
		}
	}
}
