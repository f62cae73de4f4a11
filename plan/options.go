package plan

import (
	"encoding/json"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/tensors"
)

// Options are the choices that fix the output's bytes: keys, row-group and
// file sizes, encoding, packing and tensors. They are recorded in the
// manifest and the plan as the config, and hashed (Config); two runs with
// equal Options on equal input write identical output, whatever their
// Resources.
type Options struct {
	SliceKeys, SortKeys []string
	// QueryKey, when set, packs each query once; QueryColumns, ItemOrder
	// and OnQueryConflict configure the packing.
	QueryKey        []string
	QueryColumns    []string
	ItemOrder       []string
	OnQueryConflict string
	// MaxItemsPerQuery caps one query's items (0: what fits a unit). It
	// bounds memory, it does not change the bytes: not in the config.
	MaxItemsPerQuery int64
	RowGroupBytes    int64
	MinRowGroupBytes int64
	RowGroupRows     int64
	FileBytes        int64
	// BoundaryKeys: row groups end where one of the first BoundaryKeys
	// slice keys changes (0: no such rule).
	BoundaryKeys int
	ZstdLevel    int
	PageBytes    int64
	// Tensors, when set, also writes tensor shards.
	Tensors *TensorOptions
	// Hive is the input's resolved Hive partitioning (partition columns
	// and types, "part=string,date=date"; "" for none): the map and reduce
	// tasks read the inputs with it.
	Hive string
	// HiveKeys, when > 0, writes the data files in Hive partition folders
	// named by the first HiveKeys slice keys (parquet/k1=v1/k2=v2/…), with
	// those columns left out of the files.
	HiveKeys int
}

// TensorOptions are the choices that fix the tensor shards.
type TensorOptions struct {
	Spec         *tensors.Spec `json:"spec"`
	ShardBytes   int64         `json:"shard_bytes"`
	BlockSamples int64         `json:"block_samples"`
	// ShardBlocks (omitted when 0, so that configs without it hash as
	// before) cuts shards at every ShardBlocks-th block boundary.
	ShardBlocks int64 `json:"shard_blocks,omitempty"`
}

// Resources are what a run may use; they never change the output.
type Resources struct {
	// MemoryLimit bounds the process's memory; TmpDir holds spill files.
	MemoryLimit int64
	TmpDir      string
	// Parallel is the goroutines doing CPU work.
	Parallel int
	// UnitRows, when > 0, caps the rows gathered in memory at once instead
	// of deriving it from MemoryLimit (forces spilling in tests).
	UnitRows int64
	// FitRowGroups lets the plan lower Options.RowGroupBytes (the user did
	// not set it) until writing fits MemoryLimit; FitMinRowGroups lowers
	// MinRowGroupBytes with it, as an eighth.
	FitRowGroups, FitMinRowGroups bool
	// FitFileBytes lets the plan lower Options.FileBytes (the user did not
	// set it) until a file's footer metadata fits its share of MemoryLimit.
	FitFileBytes bool
	// JoinPartitions lets a unit hold several consecutive partitions of at
	// most a unit's rows (run, which reads each unit once for all its
	// partitions); a distributed plan's reduce task reads only its own
	// partition's units.
	JoinPartitions bool
	// Sample marks the dry run's run of its sample, which sizes memory
	// but refuses no limit: the dry run checks the input's own figures
	// against it (its sample is one row group, and its sizes are set to
	// keep it one, so a refusal would quote those).
	Sample bool
}

// RuntimeReserve is the memory budgeted for the Go runtime and the
// binary's resident text, outside the data.
const RuntimeReserve = 48 << 20

// UnitHeadroom is left out of the units' share of the budget: heap the
// runtime keeps beyond the live data while a unit is concatenated, inside
// Go's soft memory limit (pipeline/run.go).
const UnitHeadroom = 16 << 20

// FooterChunkBytes is the memory a written column chunk's metadata takes
// until its file is closed: the thrift column chunk, its statistics, the
// page index builders and page checksums (measured: 16-18 MB held for a
// 245-row-group file of 40 leaf columns, about 1.7 KiB a chunk). A file's
// footer is built from all of it at close, so it grows with the file's row
// groups, and the collector scans it, pointers and all, on every cycle.
const FooterChunkBytes = 2 << 10

// FooterInReserve is the footer metadata RuntimeReserve already covers: it
// was measured (peak RSS within the limit at 128 MiB, under load) with a
// 79-row-group, 40-column file, about 6 MiB of footer; a small file's
// footer is not counted twice.
const FooterInReserve = 4 << 20

// config is the recorded form of Options: field order and omitempty fixed,
// since its bytes are hashed.
type config struct {
	SliceKeys        []string       `json:"slice_keys"`
	SortKeys         []string       `json:"sort_keys"`
	RowGroupBytes    int64          `json:"row_group_bytes"`
	MinRowGroupBytes int64          `json:"min_row_group_bytes"`
	RowGroupRows     int64          `json:"row_group_rows"`
	FileBytes        int64          `json:"file_bytes"`
	BoundaryKeys     int            `json:"boundary_keys"`
	QueryKey         []string       `json:"query_key,omitempty"`
	QueryColumns     []string       `json:"query_columns,omitempty"`
	ItemOrder        []string       `json:"item_order,omitempty"`
	OnQueryConflict  string         `json:"on_query_conflict,omitempty"`
	ZstdLevel        int            `json:"zstd_level"`
	PageBytes        int64          `json:"page_bytes"`
	Tensors          *TensorOptions `json:"tensors,omitempty"`
	Hive             string         `json:"hive_partitioning,omitempty"`
	HiveKeys         int            `json:"output_hive_keys,omitempty"`
}

// Config returns the options as recorded in the manifest and the plan,
// and the hash that names them (xxhash64 of those bytes).
func (o Options) Config() ([]byte, string) {
	cfg := config{
		SliceKeys: nonNil(o.SliceKeys), SortKeys: nonNil(o.SortKeys),
		RowGroupBytes: o.RowGroupBytes, MinRowGroupBytes: o.MinRowGroupBytes,
		RowGroupRows: o.RowGroupRows, FileBytes: o.FileBytes, BoundaryKeys: o.BoundaryKeys,
		ZstdLevel: o.ZstdLevel, PageBytes: o.PageBytes, Tensors: o.Tensors, Hive: o.Hive, HiveKeys: o.HiveKeys,
	}
	if len(o.QueryKey) > 0 {
		cfg.QueryKey, cfg.QueryColumns, cfg.ItemOrder, cfg.OnQueryConflict = o.QueryKey, nonNil(o.QueryColumns), nonNil(o.ItemOrder), o.OnQueryConflict
	}
	data, _ := json.Marshal(cfg)
	return data, fmt.Sprintf("%016x", xxhash.Sum64(data))
}

// DecodeConfig reads recorded options back (a plan's or a manifest's
// config). MaxItemsPerQuery is not recorded: the plan holds it.
func DecodeConfig(data []byte) (Options, error) {
	var c config
	if err := json.Unmarshal(data, &c); err != nil {
		return Options{}, err
	}
	return Options{
		SliceKeys: c.SliceKeys, SortKeys: c.SortKeys, QueryKey: c.QueryKey, QueryColumns: c.QueryColumns,
		ItemOrder: c.ItemOrder, OnQueryConflict: c.OnQueryConflict,
		RowGroupBytes: c.RowGroupBytes, MinRowGroupBytes: c.MinRowGroupBytes, RowGroupRows: c.RowGroupRows,
		FileBytes: c.FileBytes, BoundaryKeys: c.BoundaryKeys, ZstdLevel: c.ZstdLevel, PageBytes: c.PageBytes,
		Tensors: c.Tensors, Hive: c.Hive, HiveKeys: c.HiveKeys,
	}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
