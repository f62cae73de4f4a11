package manifests

import (
	"encoding/json"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

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
	// ShardBlocks, when set, is how many canonical blocks a shard holds:
	// shards are cut at block boundaries, not by size (--shard-blocks).
	ShardBlocks int64 `json:"shard_blocks,omitempty"`
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
	// HeaderBytes is the shard's safetensors prefix (length and JSON
	// header) and HeaderXXHash64 its xxhash64: a remote reader fetches and
	// checks the header alone, then only the blocks it reads, each checked
	// against the header's block table (docs/loader.md, "Block ranges").
	// Absent in outputs written before the table: readers then download
	// whole shards.
	HeaderBytes    int64  `json:"header_bytes,omitempty"`
	HeaderXXHash64 string `json:"header_xxhash64,omitempty"`
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

// OrderAlgorithm names the determinism contract loaders implement
// (docs/loader.md): the canonical blocks and their order. The window order
// (relayout-order-v2) is a way of reading them, not written here.
const OrderAlgorithm = "relayout-order-v1"

// Order is the determinism contract: the canonical blocks fixed when the
// output was written and the algorithm that orders and assigns them (see
// docs/loader.md).
type Order struct {
	Algorithm    string `json:"algorithm"` // "relayout-order-v1"
	BlockSamples int64  `json:"block_samples"`
}

// BlockTableKey is the __metadata__ key of a shard's safetensors header
// that holds its BlockTable, as a JSON string.
const BlockTableKey = "blocks"

// BlockTable cuts a shard at the output's canonical block boundaries (every
// Order.BlockSamples samples, counted from the output's first) and says
// where each block's samples lie in every tensor, so a reader can fetch and
// check one block without the rest of the shard.
type BlockTable struct {
	// Rows are the block boundaries in samples from the shard's first:
	// block k holds samples [Rows[k], Rows[k+1]).
	Rows []int64 `json:"rows"`
	// Ranges are, per block, a [begin, end) byte pair per schema tensor in
	// schema order, counted from the start of the shard's data buffer (the
	// byte after the header): the block's rows at the tensor's level, its
	// values, or its offsets entries (one entry past the block's rows, so
	// consecutive blocks share one).
	Ranges [][]int64 `json:"ranges"`
	// XXHash64 is, per block, the xxhash64 of its ranges' bytes
	// concatenated in data order (ascending begin, the order the tensors
	// lie in the shard, widest dtype first, so each range stays aligned to
	// its dtype): a block fetched on its own is checked against it.
	XXHash64 []string `json:"xxhash64"`
}

// SpecHash identifies a tensor schema: the xxhash64 (16 hex digits) of its
// JSON. The writer records it as Tensors.SpecHash and in every shard's
// header; verify computes it again from the manifest's schema.
func SpecHash(schema []Tensor) string {
	b, _ := json.Marshal(schema)
	return fmt.Sprintf("%016x", xxhash.Sum64(b))
}

// BlockRows are the canonical block boundaries of a shard whose first
// sample is the output's firstRow and which holds rows samples: 0, every
// multiple of blockSamples counted from the output's first sample, and
// rows, each from the shard's first sample (blockSamples at least 1). A
// BlockTable's Rows are these.
func BlockRows(firstRow, rows, blockSamples int64) []int64 {
	out := []int64{0}
	for k := (firstRow/blockSamples + 1) * blockSamples; k < firstRow+rows; k += blockSamples {
		out = append(out, k-firstRow)
	}
	return append(out, rows)
}

// Validate checks a block table against its shard: rows cover [0, rows)
// in increasing order and every range lies within the data buffer.
func (b *BlockTable) Validate(rows, dataBytes int64, tensors int) error {
	n := len(b.Rows) - 1
	if n < 1 || b.Rows[0] != 0 || b.Rows[n] != rows || len(b.Ranges) != n || len(b.XXHash64) != n {
		return fmt.Errorf("block table: %d boundaries, %d ranges and %d hashes for %d rows", len(b.Rows), len(b.Ranges), len(b.XXHash64), rows)
	}
	for k := 0; k < n; k++ {
		if b.Rows[k+1] <= b.Rows[k] {
			return fmt.Errorf("block table: block %d is empty or out of order", k)
		}
		if len(b.Ranges[k]) != 2*tensors {
			return fmt.Errorf("block table: block %d has %d range bounds, want %d", k, len(b.Ranges[k]), 2*tensors)
		}
		for j := 0; j < 2*tensors; j += 2 {
			if a, e := b.Ranges[k][j], b.Ranges[k][j+1]; a < 0 || e < a || e > dataBytes {
				return fmt.Errorf("block table: block %d range [%d, %d) is outside the %d data bytes", k, a, e, dataBytes)
			}
		}
	}
	return nil
}

// Bytes is block k's size: the sum of its ranges.
func (b *BlockTable) Bytes(k int) int64 {
	var n int64
	for j := 0; j+1 < len(b.Ranges[k]); j += 2 {
		n += b.Ranges[k][j+1] - b.Ranges[k][j]
	}
	return n
}

// Check refuses a tensors section of another order contract, or whose
// counts do not add up, before a reader sizes anything by them (an edited
// or damaged manifest): shards
// that tile the samples (and, packed, the items) in order, totals that are
// their sums, canonical blocks of at least one sample, and shard slices
// that lie inside their shard and name one of the manifest's slices
// (slices of them). A shard's own bytes are checked against its header
// when it is read.
func (t *Tensors) Check(slices []Slice) error {
	if t.Order.Algorithm != OrderAlgorithm {
		return fmt.Errorf("tensors: order algorithm %q; this relayout reads %q (a newer relayout wrote it, or the manifest is damaged)", t.Order.Algorithm, OrderAlgorithm)
	}
	if t.Order.BlockSamples < 1 {
		return fmt.Errorf("tensors: %d samples per block, want at least 1", t.Order.BlockSamples)
	}
	if len(t.Schema) == 0 {
		return fmt.Errorf("tensors: no tensors in the schema")
	}
	if t.Totals.Shards != len(t.Shards) {
		return fmt.Errorf("tensors: totals count %d shards, the manifest lists %d", t.Totals.Shards, len(t.Shards))
	}
	var rows, items, bytes int64
	for k, sh := range t.Shards {
		if sh.FirstRow != rows || sh.Rows < 0 || sh.FirstItem != items || sh.Items < 0 || sh.Bytes < 0 || sh.HeaderBytes < 0 || sh.HeaderBytes > sh.Bytes {
			return fmt.Errorf("tensors: shard %d (%s): samples [%d, +%d), items [%d, +%d), %d bytes (header %d), where the shards before it end at sample %d, item %d",
				k, sh.Path, sh.FirstRow, sh.Rows, sh.FirstItem, sh.Items, sh.Bytes, sh.HeaderBytes, rows, items)
		}
		for _, ss := range sh.Slices {
			if ss.Slice < 0 || ss.Slice >= len(slices) || ss.FirstRow < 0 || ss.Rows < 0 || ss.FirstRow > sh.Rows-ss.Rows {
				return fmt.Errorf("tensors: shard %d (%s): slice %d at samples [%d, +%d) of its %d (the manifest has %d slices)", k, sh.Path, ss.Slice, ss.FirstRow, ss.Rows, sh.Rows, len(slices))
			}
		}
		rows, items, bytes = rows+sh.Rows, items+sh.Items, bytes+sh.Bytes
	}
	if rows != t.Totals.Rows || items != t.Totals.Items || bytes != t.Totals.Bytes {
		return fmt.Errorf("tensors: the shards hold %d samples, %d items and %d bytes; the totals say %d, %d and %d", rows, items, bytes, t.Totals.Rows, t.Totals.Items, t.Totals.Bytes)
	}
	for i, s := range slices {
		if s.FirstRow < 0 || s.Rows < 0 || s.FirstRow > rows-s.Rows {
			return fmt.Errorf("slice %d: rows [%d, +%d) of the %d samples", i, s.FirstRow, s.Rows, rows)
		}
	}
	return nil
}
