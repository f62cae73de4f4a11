package writer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
)

// ShardName returns the relative path of the k-th tensor shard of output
// file f: a shard never spans two Parquet files, so shards are numbered by
// the file whose rows they hold (and a distributed reduce task, which writes
// one file, names its shards without knowing the others').
func ShardName(f, k int) string { return fmt.Sprintf("tensors/shard-%05d-%04d.safetensors", f, k) }

// DefaultShardBytes is the default target shard size.
const DefaultShardBytes = 256 << 20

// HeaderAlign is the alignment of a shard's data buffer within the file:
// the JSON header is padded with spaces so that 8+len(header) is a multiple
// of it, and with tensors laid out widest dtype first every tensor is
// aligned to its dtype in the file (and in a memory map of it).
const HeaderAlign = 64

// TensorOptions configures a Tensors sink.
type TensorOptions struct {
	// ShardBytes is the target shard size (default 256 MiB). A shard is
	// closed after the sample that brings it to at least this size.
	ShardBytes int64
	// Metadata is added to every shard's __metadata__.
	Metadata map[string]string
	// BlockSamples, when positive, is the output's canonical block size:
	// every shard's header then holds its block table (manifests.BlockTable)
	// and the manifest entry the header's size and hash, so a remote reader
	// can fetch single blocks.
	BlockSamples int64
	// ShardBlocks, when positive (with BlockSamples), cuts shards at
	// canonical block boundaries instead of by size: a shard ends where its
	// ShardBlocks-th block boundary falls (or where its Parquet file ends),
	// so a block never spans two shards and, with 1, a shard is one block,
	// which a remote reader fetches in one request.
	ShardBlocks int64
	// FirstFile is the Parquet file whose samples the sink converts (a
	// shard never spans two files: each file's samples get their own
	// sink); FirstRow and FirstItem number its first sample and item.
	FirstFile           int
	FirstRow, FirstItem int64
}

// Tensors is a sink that converts samples in output order into tensors and
// writes them as safetensors shards under tensors/.
type Tensors struct {
	ctx    context.Context
	out    storage.Location
	plan   *tensors.Plan
	opts   TensorOptions
	buf    *tensors.Buffers
	acc    int64 // bytes of the samples in buf
	shards []Shard
	rows   int64 // samples in closed shards
	items  int64
	sizes  []int64
	file   int // the Parquet file whose samples this sink converts
	inFile int // shards closed
}

// NewTensors returns a sink writing plan's tensors under out.
func NewTensors(ctx context.Context, out storage.Location, plan *tensors.Plan, opts TensorOptions) *Tensors {
	if opts.ShardBytes <= 0 {
		opts.ShardBytes = DefaultShardBytes
	}
	return &Tensors{ctx: ctx, out: out, plan: plan, opts: opts, buf: plan.NewBuffers(),
		file: opts.FirstFile, rows: opts.FirstRow, items: opts.FirstItem}
}

// Write converts rec's samples (flat rows, or packed queries) and closes
// shards as they fill. Samples must come in output order.
func (w *Tensors) Write(rec arrow.RecordBatch) error {
	n := int(rec.NumRows())
	w.sizes = w.plan.SampleBytes(rec, 0, n, w.sizes)
	start := 0
	for i, s := range w.sizes {
		w.acc += s
		if w.full(w.buf.Rows + int64(i+1-start)) {
			if err := w.plan.Append(w.buf, rec, start, i+1); err != nil {
				return convertErr(err)
			}
			w.buf.Seal()
			if err := w.flush(); err != nil {
				return err
			}
			start = i + 1
		}
	}
	if err := w.plan.Append(w.buf, rec, start, n); err != nil {
		return convertErr(err)
	}
	w.buf.Seal()
	return nil
}

// full reports whether a shard of rows samples (from w.rows) is closed.
func (w *Tensors) full(rows int64) bool {
	if b, n := w.opts.BlockSamples, w.opts.ShardBlocks; b > 0 && n > 0 {
		next := w.rows + rows
		return next%b == 0 && next/b-w.rows/b >= n
	}
	return w.acc >= w.opts.ShardBytes
}

// convertErr classifies a conversion failure: a spec that does not fit the
// data is a usage error (exit 2), a value that cannot be converted bad
// input (exit 3).
func convertErr(err error) error {
	var ce *tensors.ConfigError
	if errors.As(err, &ce) {
		return errs.Usagef("tensors: %v", err)
	}
	return errs.Or(errs.BadInput, fmt.Errorf("tensors: %w", err))
}

// EndRowGroup implements Sink: shards are cut by size, not at row groups.
func (w *Tensors) EndRowGroup() error { return nil }

// Finish writes the last shard and returns every shard.
func (w *Tensors) Finish() (Written, error) {
	if w.buf.Rows > 0 {
		if err := w.flush(); err != nil {
			return Written{}, err
		}
	}
	return Written{Shards: w.shards}, nil
}

// Abort drops the samples not yet written. A shard is written whole
// (cancelled before it becomes visible on failure), so nothing is in
// flight; the shards already written stay, as Parquet's closed files do:
// a retried task rewrites the same names.
func (w *Tensors) Abort() {
	w.buf = w.plan.NewBuffers()
	w.acc = 0
}

// Shards returns the shards written so far.
func (w *Tensors) Shards() []Shard { return w.shards }

func (w *Tensors) flush() error {
	name := ShardName(w.file, w.inFile)
	meta := map[string]string{
		"format":    "relayout-tensors",
		"file":      strconv.Itoa(w.file),
		"shard":     strconv.Itoa(w.inFile),
		"first_row": strconv.FormatInt(w.rows, 10),
		"rows":      strconv.FormatInt(w.buf.Rows, 10),
		"sample":    w.plan.Sample(),
		"spec_hash": w.plan.Hash(),
	}
	if w.plan.Sample() == tensors.LevelQuery {
		meta["first_item"] = strconv.FormatInt(w.items, 10)
		meta["items"] = strconv.FormatInt(w.buf.Items, 10)
	}
	for k, v := range w.opts.Metadata {
		meta[k] = v
	}
	w.buf.Seal()
	order, begin := layout(w.plan, w.buf)
	if w.opts.BlockSamples > 0 {
		bt, err := json.Marshal(blockTable(w.plan, w.buf, order, begin, w.rows, w.opts.BlockSamples))
		if err != nil {
			return err
		}
		meta[manifests.BlockTableKey] = string(bt)
	}
	header, err := encodeHeader(w.plan, w.buf, order, begin, meta)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	bw, err := storage.NewWriter(ctx, w.out, w.out.Key(name), nil)
	if err != nil {
		return storage.Classify(fmt.Errorf("create %s: %w", w.out.URL(name), err))
	}
	hw := &hashWriter{w: bw, h: xxhash.New()}
	werr := writeAll(hw, header)
	for _, i := range order {
		for _, blk := range w.buf.Blocks(i) {
			if werr != nil {
				break
			}
			werr = writeAll(hw, blk)
		}
	}
	if werr != nil {
		cancel() // the blob never becomes visible
		bw.Close()
		return storage.Classify(fmt.Errorf("write %s: %w", w.out.URL(name), werr))
	}
	if err := bw.Close(); err != nil {
		return storage.Classify(fmt.Errorf("write %s: %w", w.out.URL(name), err))
	}
	tb := make([]int64, len(w.plan.Tensors()))
	for i := range tb {
		tb[i] = w.buf.Len(i)
	}
	ms := manifests.Shard{Path: name, Bytes: hw.n, XXHash64: fmt.Sprintf("%016x", hw.h.Sum64()),
		Rows: w.buf.Rows, FirstRow: w.rows, Items: w.buf.Items, FirstItem: w.items, Slices: []manifests.ShardSlice{},
		HeaderBytes: int64(len(header))}
	if w.opts.BlockSamples > 0 {
		ms.HeaderXXHash64 = fmt.Sprintf("%016x", xxhash.Sum64(header))
	}
	w.shards = append(w.shards, Shard{Shard: ms, TensorBytes: tb})
	w.rows += w.buf.Rows
	w.items += w.buf.Items
	w.inFile++
	w.buf = w.plan.NewBuffers()
	w.acc = 0
	return nil
}

func writeAll(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}

// layout returns the order in which the tensors' bytes follow the header
// (widest dtype first, then schema order, so every tensor is aligned to
// its dtype) and each tensor's offset in the data buffer, in plan order.
func layout(plan *tensors.Plan, b *tensors.Buffers) ([]int, []int64) {
	ts := plan.Tensors()
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int {
		return tensors.DType(ts[y].DType).Size() - tensors.DType(ts[x].DType).Size()
	})
	begin := make([]int64, len(ts))
	var off int64
	for _, i := range order {
		begin[i] = off
		off += b.Len(i)
	}
	return order, begin
}

// encodeHeader returns the safetensors prefix (length and padded JSON
// header) for tensors laid out as layout says.
func encodeHeader(plan *tensors.Plan, b *tensors.Buffers, order []int, begin []int64, meta map[string]string) ([]byte, error) {
	ts := plan.Tensors()
	var h bytes.Buffer
	h.WriteString(`{"__metadata__":`)
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			h.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(meta[k])
		h.Write(kb)
		h.WriteByte(':')
		h.Write(vb)
	}
	h.WriteByte('}')
	for _, i := range order {
		t := ts[i]
		shape := plan.Shape(b, i)
		nb, _ := json.Marshal(t.Name)
		sb, _ := json.Marshal(shape)
		fmt.Fprintf(&h, `,%s:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, nb, t.DType, sb, begin[i], begin[i]+b.Len(i))
	}
	h.WriteByte('}')
	for (8+h.Len())%HeaderAlign != 0 {
		h.WriteByte(' ')
	}
	out := make([]byte, 8, 8+h.Len())
	binary.LittleEndian.PutUint64(out, uint64(h.Len()))
	return append(out, h.Bytes()...), nil
}
