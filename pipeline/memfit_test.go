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
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/verify"
)

// TestRowGroupsFitTheMemoryLimit: with --row-group-bytes left to its
// default, a memory limit too small for the default row groups lowers
// them instead of refusing the run; the manifest records the row-group
// target used, the output verifies and equals a run given that target
// explicitly, and the dry run predicts the same config. An explicit target
// that cannot fit is still refused up front (exit 2).
func TestRowGroupsFitTheMemoryLimit(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 600_000, Files: 4, Seed: 21})
	const limit = 128 << 20
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
		FileBytes        int64 `json:"file_bytes"`
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
	// The same bytes as a run told those targets (and a roomy limit).
	ref := opts(filepath.Join(base, "ref"), cfg.RowGroupBytes)
	ref.MemoryLimit, ref.FileBytes = 1<<30, cfg.FileBytes
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

// TestRowGroupsFitWhereTheModelFitsThem: at a limit where the fixed-cost
// model says the default row groups fit, they are still lowered to an
// eighth of the memory after the runtime. At 192 MiB on the 4M-row
// generated log the default's row groups (which the model passed) peaked
// at 207-211 MiB RSS; lowered to 16 MiB, at 176 MiB.
func TestRowGroupsFitWhereTheModelFitsThem(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 600_000, Files: 4, Seed: 21})
	const limit = 192 << 20
	ctx := context.Background()
	res, err := Run(ctx, RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country", "date"},
		MemoryLimit: limit, TmpDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RowGroupBytes int64 `json:"row_group_bytes"`
	}
	if err := json.Unmarshal(res.Manifest.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	most := int64(limit-plan.RuntimeReserve) / 8
	if cfg.RowGroupBytes > most || cfg.RowGroupBytes < most/2 {
		t.Fatalf("recorded row_group_bytes %d KiB at a %d MiB limit: want the largest halving of the default at most %d KiB", cfg.RowGroupBytes>>10, limit>>20, most>>10)
	}
	// A limit with room for the default keeps it.
	res, err = Run(ctx, RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "o"), SliceKeys: []string{"country", "date"},
		MemoryLimit: 2 << 30, TmpDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(res.Manifest.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.RowGroupBytes != DefaultRowGroupBytes {
		t.Fatalf("recorded row_group_bytes %d at 2 GiB, want the default %d", cfg.RowGroupBytes, int64(DefaultRowGroupBytes))
	}
}

// TestFilesFitTheMemoryLimit: with --file-bytes left to its default, the
// plan makes files small enough that the footer metadata the writer holds
// for a file until it closes it (plan.FooterChunkBytes per column chunk)
// stays within its share of the memory limit: at 16x the generated log in
// a 128 MiB pod, one file of ~1,000 row groups held ~65 MB of it and the
// run was OOM-killed late in its write stage. Counted with parquet-go (not
// the writer's library): no file has more row groups than the budget; the
// manifest records the lowered target and the output equals a run given
// it explicitly. An explicit --file-bytes is kept as given.
func TestFilesFitTheMemoryLimit(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 600_000, Files: 4, Seed: 22})
	const limit = 128 << 20
	ctx := context.Background()
	base := t.TempDir()
	// Row groups small enough that one file would hold more than the
	// budget allows (40 leaf columns: 64 row groups at 128 MiB).
	opts := func(out string, fileBytes int64) RunOptions {
		return RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country", "date"}, MemoryLimit: limit,
			RowGroupBytes: 1 << 20, FileBytes: fileBytes, TmpDir: t.TempDir()}
	}
	rowGroups := func(out string) (files []int) {
		ents, err := filepath.Glob(filepath.Join(out, "parquet", "*.parquet"))
		if err != nil || len(ents) == 0 {
			t.Fatalf("no output files under %s: %v", out, err)
		}
		for _, p := range ents {
			files = append(files, len(testutil.ParquetGoFile(t, p).RowGroups()))
		}
		return files
	}
	leaves := int64(40)
	budget := int((limit - plan.RuntimeReserve) / 16 / (leaves * plan.FooterChunkBytes))

	// Explicit and too large for the limit (with small row groups, a
	// 1 GiB file's footer alone takes tens of MiB): refused up front,
	// naming the setting.
	small := opts(filepath.Join(base, "refused"), 1<<30)
	small.RowGroupBytes = 256 << 10
	_, err := Run(ctx, small)
	if !errs.Is(err, errs.Usage) || !strings.Contains(err.Error(), "--file-bytes") {
		t.Fatalf("explicit --file-bytes 1GiB at a %d MiB limit: %v, want the up-front refusal naming --file-bytes", limit>>20, err)
	}
	// Explicit, with room: one large file, as asked.
	explicit := opts(filepath.Join(base, "explicit"), 1<<30)
	explicit.MemoryLimit = 1 << 30
	if _, err := Run(ctx, explicit); err != nil {
		t.Fatal(err)
	}
	if got := rowGroups(explicit.Output); len(got) != 1 || got[0] <= budget {
		t.Fatalf("explicit --file-bytes 1GiB: files of %v row groups, want one file of more than %d (else this test proves nothing)", got, budget)
	}
	// Default: lowered.
	out := filepath.Join(base, "fitted")
	res, err := Run(ctx, opts(out, 0))
	if err != nil {
		t.Fatal(err)
	}
	got := rowGroups(out)
	for _, n := range got {
		if n > budget {
			t.Fatalf("default --file-bytes at a %d MiB limit: files of %v row groups, want at most %d each", limit>>20, got, budget)
		}
	}
	var cfg struct {
		FileBytes int64 `json:"file_bytes"`
	}
	if err := json.Unmarshal(res.Manifest.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.FileBytes >= DefaultFileBytes || cfg.FileBytes < plan.MinFitFileBytes {
		t.Fatalf("recorded file_bytes %d: want a lowered target", cfg.FileBytes)
	}
	t.Logf("files lowered to %d KiB: %v row groups each (budget %d)", cfg.FileBytes>>10, got, budget)
	if v, err := verify.Output(ctx, out, true, 2); err != nil || !v.OK {
		t.Fatalf("verify: %v %+v", err, v)
	}
	ref := opts(filepath.Join(base, "ref"), cfg.FileBytes)
	ref.MemoryLimit = 1 << 30
	rres, err := Run(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.ConfigHash != rres.Manifest.ConfigHash {
		t.Fatalf("fitted run (config %s) differs from the explicit one (config %s)", res.Manifest.ConfigHash, rres.Manifest.ConfigHash)
	}
	requireSameOutput(t, "the fitted run against the explicit one", readTree(t, ref.Output), readTree(t, out))
	rep, err := DryRun(ctx, opts(filepath.Join(base, "dry"), 0))
	if err != nil {
		t.Fatal(err)
	}
	if rep.ConfigHash != res.Manifest.ConfigHash {
		t.Fatalf("dry run config %s, the run's %s", rep.ConfigHash, res.Manifest.ConfigHash)
	}
}
