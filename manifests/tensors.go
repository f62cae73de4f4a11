package manifests

// Tensors describes an output's tensor shards (run with --tensors): dense,
// memory-mappable safetensors files cut at sample boundaries in the output
// order, their tensor schema, and the contract a loader follows to split
// them between ranks and workers.
type Tensors struct {
	// Format is "safetensors".
	Format string `json:"format"`
	// Sample is what one sample is: "row", or "query" in packed outputs.
	Sample string `json:"sample"`
	// ShardBytes is the target shard size.
	ShardBytes int64 `json:"shard_bytes"`
	// SpecHash identifies the tensor schema; every shard's metadata repeats it.
	SpecHash string       `json:"spec_hash"`
	Schema   []Tensor     `json:"schema"`
	Shards   []Shard      `json:"shards"`
	Totals   TensorTotals `json:"totals"`
	Order    Order        `json:"order"`
}

// Tensor is one tensor present in every shard.
type Tensor struct {
	Name  string `json:"name"`
	DType string `json:"dtype"` // safetensors dtype: F32, I64, U8, ...
	// Shape is the shape of one element along the first dimension: [] for a
	// scalar per sample, [D] for fixed lists, [F] for grouped columns.
	Shape []int `json:"shape"`
	// Level is what the first dimension counts: "row", "query" or "item".
	Level string `json:"level"`
	// Kind is "data" ([n, *shape]), "valid" (uint8 [n, *shape], 1 where the
	// source was not null), "offsets" (int64 [n+1], starting at 0 in each
	// shard) or "values" (the concatenated elements of a ragged list column,
	// cut by the tensor named in Offsets).
	Kind    string `json:"kind"`
	Offsets string `json:"offsets,omitempty"`
	// Columns are the source columns; Transform says how values were made
	// from them.
	Columns   []string `json:"columns"`
	Transform string   `json:"transform"`
}

// Shard is one safetensors file.
type Shard struct {
	Path     string `json:"path"` // relative to the output root
	Bytes    int64  `json:"bytes"`
	XXHash64 string `json:"xxhash64"`
	// Rows and FirstRow count samples (queries in packed outputs, as in the
	// Parquet files); Items and FirstItem count items in packed outputs.
	Rows      int64        `json:"rows"`
	FirstRow  int64        `json:"first_row"`
	Items     int64        `json:"items,omitempty"`
	FirstItem int64        `json:"first_item,omitempty"`
	Slices    []ShardSlice `json:"slices"`
}

// ShardSlice is the part of a slice inside one shard.
type ShardSlice struct {
	Slice    int   `json:"slice"`     // index into the manifest's slices
	FirstRow int64 `json:"first_row"` // within the shard
	Rows     int64 `json:"rows"`
}

// TensorTotals sums the shards.
type TensorTotals struct {
	Shards int   `json:"shards"`
	Bytes  int64 `json:"bytes"`
	Rows   int64 `json:"rows"`
	Items  int64 `json:"items,omitempty"`
}

// Order is the determinism contract: the canonical blocks fixed when the
// output was written and the algorithm that orders and assigns them (see
// docs/loader.md).
type Order struct {
	Algorithm    string `json:"algorithm"` // "relayout-order-v1"
	BlockSamples int64  `json:"block_samples"`
}
