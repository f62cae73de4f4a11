package pipeline

import (
	"context"
	"errors"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
	"github.com/relayout/relayout/writer"
)

// tensorRun writes tensor shards beside the Parquet files: it profiles list
// lengths while the input is read, fixes the tensor plan once the output
// schema is known, and converts the samples handed to the Parquet writer.
type tensorRun struct {
	spec *tensors.Spec
	prof *tensors.Profile
	plan *tensors.Plan
	// first numbers the first shard (a distributed reduce task starts at
	// its partition's file and samples).
	first struct {
		file      int
		row, item int64
	}
}

// newTensorRun returns nil unless tensors were asked for.
func newTensorRun(opts RunOptions) (*tensorRun, error) {
	if !opts.Tensors {
		return nil, nil
	}
	t := &tensorRun{spec: &tensors.Spec{}, prof: tensors.NewProfile()}
	if opts.TensorSpec != "" {
		s, err := tensors.ReadSpec(opts.TensorSpec)
		if err != nil {
			return nil, errs.Usagef("%v", err)
		}
		t.spec = s
	}
	return t, nil
}

func (t *tensorRun) config(opts RunOptions) *plan.TensorOptions {
	if t == nil {
		return nil
	}
	return &plan.TensorOptions{Spec: t.spec, ShardBytes: opts.ShardBytes, BlockSamples: opts.BlockSamples, ShardBlocks: opts.ShardBlocks}
}

// open fixes the plan for the output schema and returns the sink.
func (t *tensorRun) open(ctx context.Context, out storage.Location, schema *arrow.Schema, packed bool, opts RunOptions, cfgHash string) (*writer.Tensors, error) {
	if err := t.fix(schema, packed, opts); err != nil {
		return nil, err
	}
	return writer.NewTensors(ctx, out, t.plan, writer.TensorOptions{
		ShardBytes: opts.ShardBytes, BlockSamples: opts.BlockSamples, ShardBlocks: opts.ShardBlocks,
		Metadata:  map[string]string{"relayout_version": version.Version, "config_hash": cfgHash},
		FirstFile: t.first.file, FirstRow: t.first.row, FirstItem: t.first.item,
	}), nil
}

// fix fixes the tensor plan for the output schema.
func (t *tensorRun) fix(schema *arrow.Schema, packed bool, opts RunOptions) error {
	plan, err := tensors.NewPlan(schema, packed, t.spec, t.prof)
	if err != nil {
		var ce *tensors.ConfigError
		if errors.As(err, &ce) {
			hint := "fix --tensor-spec"
			if opts.TensorSpec == "" {
				hint = "pass --tensor-spec to drop or convert the column"
			}
			return errs.WithHint(errs.Usagef("tensors: %v", err), hint)
		}
		return err
	}
	plan.Parallel = opts.Parallel
	t.plan = plan
	return nil
}

// manifest describes the shards and indexes each slice's rows in them.
func (t *tensorRun) manifest(m *manifests.Manifest, shards []writer.Shard, opts RunOptions) *manifests.Tensors {
	ms := make([]manifests.Shard, len(shards))
	for i, s := range shards {
		ms[i] = s.Shard
	}
	mt := &manifests.Tensors{
		Format: "safetensors", Sample: t.plan.Sample(), ShardBytes: opts.ShardBytes, ShardBlocks: opts.ShardBlocks,
		SpecHash: t.plan.Hash(), Schema: t.plan.Tensors(),
		Order: manifests.Order{Algorithm: manifests.OrderAlgorithm, BlockSamples: opts.BlockSamples},
	}
	mt.Shards, mt.Totals = m.IndexShards(ms)
	return mt
}
