package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/verify"
)

// TestShardBlocks: with ShardBlocks, shards are cut at canonical block
// boundaries, N blocks a shard (a shard starts inside a block only where
// its Parquet file does, and ends inside one only where the file does);
// the output verifies deep, the distributed steps write the same bytes,
// and the dry run counts the shards.
func TestShardBlocks(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 12_000, Files: 2, Seed: 41})
	for _, n := range []int64{1, 3} {
		base := t.TempDir()
		o := func(out string) RunOptions {
			return RunOptions{Inputs: []string{in}, Output: out, SliceKeys: []string{"country"}, FileBytes: 512 << 10,
				Tensors: true, BlockSamples: 100, ShardBlocks: n}
		}
		ref := filepath.Join(base, "run")
		dry, err := DryRun(context.Background(), o(ref))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Run(context.Background(), o(ref)); err != nil {
			t.Fatal(err)
		}
		m := readManifest(t, ref)
		mt := m.Tensors
		if mt.ShardBlocks != n || mt.Order.BlockSamples != 100 {
			t.Fatalf("manifest: shard_blocks %d, block_samples %d", mt.ShardBlocks, mt.Order.BlockSamples)
		}
		fileStart, fileEnd := map[int64]bool{}, map[int64]bool{}
		for _, f := range m.Files {
			fileStart[f.FirstRow], fileEnd[f.FirstRow+f.Rows] = true, true
		}
		for _, sh := range mt.Shards {
			first, end := sh.FirstRow, sh.FirstRow+sh.Rows
			if (first%100 != 0 && !fileStart[first]) || (end%100 != 0 && !fileEnd[end]) {
				t.Fatalf("shard-blocks %d: shard %s holds [%d, %d): cut inside a block away from a file's ends", n, sh.Path, first, end)
			}
			if blocks := (end+99)/100 - first/100; blocks > n || (blocks < n && !fileEnd[end]) {
				t.Fatalf("shard-blocks %d: shard %s holds [%d, %d), %d blocks", n, sh.Path, first, end, blocks)
			}
		}
		if d := dry.Output.Shards - len(mt.Shards); d < -len(m.Files) || d > len(m.Files) {
			t.Fatalf("shard-blocks %d: the dry run counted %d shards, the run wrote %d", n, dry.Output.Shards, len(mt.Shards))
		}
		if r, err := verify.Output(context.Background(), ref, true, 2); err != nil || !r.OK {
			t.Fatalf("shard-blocks %d: verify --deep: %+v %v", n, r, err)
		}
		out := filepath.Join(base, "dist")
		runDistributed(t, o(out), 256<<10, 2)
		want, got := readTree(t, ref), readTree(t, out)
		if len(got) != len(want) {
			t.Fatalf("shard-blocks %d: the steps wrote %d files, run %d", n, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("shard-blocks %d: %s differs from run's", n, k)
			}
		}
		t.Logf("shard-blocks %d: %d shards (dry run: %d) in %d files", n, len(mt.Shards), dry.Output.Shards, len(m.Files))
	}
}

// TestShardBlocksMemoryCountsItems: in a packed run a tensor sample is a
// query, so a shard of N blocks buffers N x block_samples queries with all
// their items: the memory model counts the key pass's rows per query
// (checked against DuckDB's count over distinct query ids), not one row
// per sample.
func TestShardBlocksMemoryCountsItems(t *testing.T) {
	in := testutil.Generate(t, gen.Options{Rows: 30_000, Files: 1, Seed: 42})
	o := RunOptions{Inputs: []string{in}, Output: filepath.Join(t.TempDir(), "out"), SliceKeys: []string{"country"}, QueryKey: []string{"query_id"},
		Tensors: true, BlockSamples: 100, ShardBlocks: 2}
	o, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tbl, keys, sizes, _, err := openTable(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	lo := o.layout(nil)
	lo.Tensors = &plan.TensorOptions{ShardBytes: o.ShardBytes, BlockSamples: o.BlockSamples, ShardBlocks: o.ShardBlocks}
	kp, err := plan.Analyze(ctx, tbl, keys, lo, o.resources()) // the run's key pass and memory plan
	if err != nil {
		t.Fatal(err)
	}
	defer kp.Release()
	rows, _ := testutil.DuckDB(t, fmt.Sprintf("SELECT count(*)::DOUBLE / count(DISTINCT query_id) AS r FROM read_parquet('%s/*.parquet')", in))
	want := rows[0]["r"].(float64)
	if got := kp.Sizes.RowsPerSample; math.Abs(got-want) > 1e-9 || want < 2 {
		t.Fatalf("rows per sample %v, DuckDB counts %v", got, want)
	}
	// The model's shard: N x block_samples x rows per sample x row bytes.
	const rowBytes = 100
	perRow, err := plan.SizeMemory(tbl, sizes, kp.Layout, rowBytes, lo, o.resources())
	if err != nil {
		t.Fatal(err)
	}
	perQuery, err := plan.SizeMemory(tbl, kp.Sizes, kp.Layout, rowBytes, lo, o.resources())
	if err != nil {
		t.Fatal(err)
	}
	n, mem := float64(o.ShardBlocks*o.BlockSamples), max(sizes.RowBytes, rowBytes) // the model takes the larger row size
	if d, wantD := perQuery.Fixed-perRow.Fixed, int64(n*want*mem)-int64(n*mem); d < wantD-1 || d > wantD+1 {
		t.Fatalf("the shard of %v queries adds %d bytes to the fixed cost over a row-per-sample estimate, want %d", n, d, wantD)
	}
}
