package pipeline

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/verify"
)

// TestRowGroupsFitTheMemoryLimit: with --row-group-bytes left to its
// default, a memory limit too small for the default row groups lowers
// them instead of refusing the run; the manifest records the row-group
// target used, the output verifies and equals a run given that target
// explicitly, and the dry run predicts the same config. An explicit target
// that cannot fit is still refused up front (exit 2).
func TestRowGroupsFitTheMemoryLimit(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 300_000, Files: 4, Seed: 21})
	const limit = 96 << 20
	ctx := context.Background()
	base := t.TempDir()
	opts := func(out string, rgb int64) RunOptions {
		return RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"}, MemoryLimit: limit,
			RowGroupBytes: rgb, TmpDir: t.TempDir()}
	}
	// Explicit: refused with the figure needed.
	_, err := Run(ctx, opts(filepath.Join(base, "explicit"), DefaultRowGroupBytes))
	if !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), "too small for this table") {
		t.Fatalf("explicit --row-group-bytes %d at a %d MiB limit: %v, want the up-front refusal", DefaultRowGroupBytes, limit>>20, err)
	}
	// Default: fitted.
	out := filepath.Join(base, "fitted")
	res, err := Run(ctx, opts(out, 0))
	if err != nil {
		t.Fatalf("default row groups at a %d MiB limit: %v", limit>>20, err)
	}
	var cfg struct {
		RowGroupBytes    int64 `json:"row_group_bytes"`
		MinRowGroupBytes int64 `json:"min_row_group_bytes"`
	}
	if err := json.Unmarshal(res.Manifest.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.RowGroupBytes >= DefaultRowGroupBytes || cfg.RowGroupBytes < 1<<20 || cfg.MinRowGroupBytes != cfg.RowGroupBytes/8 {
		t.Fatalf("recorded row_group_bytes %d, min %d: want a lowered target (below %d, at least 1 MiB) with its eighth", cfg.RowGroupBytes, cfg.MinRowGroupBytes, int64(DefaultRowGroupBytes))
	}
	t.Logf("row groups lowered to %d KiB at a %d MiB limit", cfg.RowGroupBytes>>10, limit>>20)
	if v, err := verify.Output(ctx, out, true, 2); err != nil || !v.OK {
		t.Fatalf("verify: %v %+v", err, v)
	}
	// The same bytes as a run told that target (and a roomy limit).
	ref := opts(filepath.Join(base, "ref"), cfg.RowGroupBytes)
	ref.MemoryLimit = 1 << 30
	rres, err := Run(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.ConfigHash != rres.Manifest.ConfigHash || res.Manifest.Fingerprint != rres.Manifest.Fingerprint {
		t.Fatalf("fitted run (config %s) differs from the explicit one (config %s)", res.Manifest.ConfigHash, rres.Manifest.ConfigHash)
	}
	requireSameOutput(t, "the fitted run against the explicit one", readTree(t, ref.Output), readTree(t, out))
	// The dry run predicts the fitted config.
	rep, err := DryRun(ctx, opts(filepath.Join(base, "dry"), 0))
	if err != nil {
		t.Fatal(err)
	}
	if rep.ConfigHash != res.Manifest.ConfigHash {
		t.Fatalf("dry run config %s, the run's %s", rep.ConfigHash, res.Manifest.ConfigHash)
	}
}
