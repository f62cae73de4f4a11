package loader_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/pipeline"
)

// TestManifestEditSweep edits a committed output's manifest.json one field
// at a time (testutil.JSONEdits: negative, zero, one more, huge, emptied,
// cut, doubled, deleted, null; array members: the first and the last),
// then opens the output and reads an epoch in each order, checksums on and
// off, flat and packed: each must read or return an error, never panic
// (a user's loader holds what it opened; a panic takes the training job
// down). The manifest as written must read every sample.
func TestManifestEditSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: reads an epoch of about 1,400 edited outputs (about 25 s on 2 cores); make test runs it")
	}
	in := testutil.Generate(t, gen.Options{Rows: 3_000, Files: 2, Seed: 54})
	for _, packed := range []bool{false, true} {
		name := "flat"
		o := pipeline.RunOptions{Inputs: []string{in}, SliceKeys: []string{"country"}, Tensors: true, ShardBytes: 32 << 10, BlockSamples: 100, FileBytes: 64 << 10}
		if packed {
			name = "packed"
			o.QueryKey, o.BlockSamples = []string{"query_id"}, 20
		}
		t.Run(name, func(t *testing.T) {
			out := run(t, o)
			edits := testutil.FileEdits(t, out, manifests.FileName, nil)
			if len(edits) < 200 {
				t.Fatalf("only %d edits of the manifest: the sweep lost its reach", len(edits))
			}
			// Each edit in a folder of its own whose shards and files are
			// links to the output's (the loader only reads them).
			testutil.SweepEdits(t, edits, 1, func(e testutil.JSONEdit) string {
				dir := filepath.Join(t.TempDir(), "edit")
				defer os.RemoveAll(dir)
				if err := testutil.LinkTree(out, dir); err != nil {
					return err.Error()
				}
				if err := os.Remove(filepath.Join(dir, manifests.FileName)); err != nil {
					return err.Error()
				}
				if err := os.WriteFile(filepath.Join(dir, manifests.FileName), e.Data, 0o644); err != nil {
					return err.Error()
				}
				return readEdited(dir, e)
			})
			t.Logf("%d edits of %s", len(edits), manifests.FileName)
		})
	}
}

// readEdited opens the output at dir and reads an epoch in each order; it
// returns what went wrong: a panic, or, for the baseline, any error or a
// sample missing.
func readEdited(dir string, e testutil.JSONEdit) (msg string) {
	step := "open"
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprintf("%s: %s panicked: %v", e.What, step, r)
		}
	}()
	fail := func(err error) string {
		if !e.Baseline {
			return ""
		}
		return fmt.Sprintf("%s: %s: %v", e.What, step, err)
	}
	for _, verify := range []bool{false, true} {
		step = fmt.Sprintf("open (checksums %v)", verify)
		d, err := loader.Open(dir, loader.Options{VerifyChecksums: verify})
		if err != nil {
			return fail(err)
		}
		for _, order := range []string{loader.OrderWindow, loader.OrderBlock, loader.OrderNone} {
			step = fmt.Sprintf("read (%s order, checksums %v)", order, verify)
			r, err := d.NewReader(loader.ReadOptions{Assignment: loader.Assignment{Seed: 1, Shuffle: order != loader.OrderNone}, Batch: 64, Order: order, Index: true})
			if err != nil {
				d.Close()
				return fail(err)
			}
			var n int64
			for {
				b, err := r.Next()
				if err != nil {
					r.Close()
					d.Close()
					return fail(err)
				}
				if b == nil {
					break
				}
				n += b.Samples
			}
			r.Close()
			if e.Baseline && n != d.Samples() {
				d.Close()
				return fmt.Sprintf("%s: %s read %d of %d samples", e.What, step, n, d.Samples())
			}
		}
		d.Close()
	}
	return ""
}
