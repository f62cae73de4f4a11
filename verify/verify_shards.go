package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/loader"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/tensors"
)

// verifyShards checks the tensor shards against the manifest: prefix sums
// and totals, the slice index, and for every shard its size, xxhash64 and a
// safetensors header that parses (offsets tiling the buffer), holds the
// schema's tensors with their dtypes and shapes for the shard's rows and
// items, and repeats the spec hash. A shard with an earlier check on record
// (checked[i], nil for none) is only confirmed to be that object (size and
// ETag); one rewritten since is checked in full.
func verifyShards(ctx context.Context, out storage.Location, m *manifests.Manifest, parallel int, checked []Checked) (string, error) {
	mt := m.Tensors
	var rows, items, bytesSum int64
	for _, s := range mt.Shards {
		if s.FirstRow != rows || s.FirstItem != items {
			return fmt.Sprintf("manifest: %s starts at row %d item %d, want %d and %d", s.Path, s.FirstRow, s.FirstItem, rows, items), nil
		}
		var sl int64
		for _, x := range s.Slices {
			if x.Slice < 0 || x.Slice >= len(m.Slices) || x.FirstRow < 0 || x.FirstRow+x.Rows > s.Rows {
				return fmt.Sprintf("manifest: %s: slice entry %+v is out of range", s.Path, x), nil
			}
			if g := s.FirstRow + x.FirstRow; g < m.Slices[x.Slice].FirstRow || g+x.Rows > m.Slices[x.Slice].FirstRow+m.Slices[x.Slice].Rows {
				return fmt.Sprintf("manifest: %s: slice %d rows are outside the slice", s.Path, x.Slice), nil
			}
			sl += x.Rows
		}
		if len(m.Slices) > 0 && sl != s.Rows {
			return fmt.Sprintf("manifest: %s: slices cover %d of its %d rows", s.Path, sl, s.Rows), nil
		}
		rows += s.Rows
		items += s.Items
		bytesSum += s.Bytes
	}
	if rows != m.Totals.Rows || rows != mt.Totals.Rows || bytesSum != mt.Totals.Bytes || len(mt.Shards) != mt.Totals.Shards {
		return fmt.Sprintf("manifest: shards hold %d rows and %d bytes; totals say %d rows, %d bytes; the Parquet files %d rows", rows, bytesSum, mt.Totals.Rows, mt.Totals.Bytes, m.Totals.Rows), nil
	}
	if m.Packing != nil && (items != m.Packing.Items || items != mt.Totals.Items) {
		return fmt.Sprintf("manifest: shards hold %d items, packing says %d", items, m.Packing.Items), nil
	}
	if checked != nil && len(checked) != len(mt.Shards) {
		return fmt.Sprintf("%d checked shards for the manifest's %d", len(checked), len(mt.Shards)), nil
	}
	workers := parallel
	if checked != nil {
		workers = max(min(16, len(mt.Shards)), 1) // a HEAD each: latency-bound
	}
	problems := make([]string, len(mt.Shards))
	err := par.ForEach(ctx, len(mt.Shards), workers, func(i int) error {
		if checked != nil {
			p, same, err := confirmObject(ctx, out, mt.Shards[i].Path, mt.Shards[i].Bytes, checked[i])
			if same || p != "" || err != nil {
				problems[i] = p
				return err
			}
		}
		p, err := verifyShard(ctx, out, mt, i, nil)
		problems[i] = p
		return err
	})
	if err != nil {
		return "", err
	}
	for _, p := range problems {
		if p != "" {
			return p, nil
		}
	}
	return "", nil
}

// Shards checks each shard of mt on its own, as a full check does (size,
// xxhash64, header, block table, tensors and their offsets), but not the
// shards against each other or a whole manifest. It returns, per shard,
// what a later check needs to trust it without reading it again (its path
// and ETag), and the first problem found ("" when none). A reduce task
// checks the shards it wrote so; commit then only confirms them
// (ManifestChecked).
func Shards(ctx context.Context, out storage.Location, mt *manifests.Tensors, parallel int) ([]Checked, string, error) {
	checked := make([]Checked, len(mt.Shards))
	problems := make([]string, len(mt.Shards))
	err := par.ForEach(ctx, len(mt.Shards), max(parallel, 1), func(i int) error {
		checked[i].Path = mt.Shards[i].Path
		p, err := verifyShard(ctx, out, mt, i, &checked[i].ETag)
		problems[i] = p
		return err
	})
	if err != nil {
		return nil, "", err
	}
	for _, p := range problems {
		if p != "" {
			return nil, p, nil
		}
	}
	return checked, "", nil
}

// verifyShard checks shard i of mt; etag, when not nil, receives the
// object's ETag as it was when the check began (a HEAD more).
func verifyShard(ctx context.Context, out storage.Location, mt *manifests.Tensors, i int, etag *string) (string, error) {
	s := mt.Shards[i]
	url := out.URL(s.Path)
	if etag != nil {
		var problem string
		var err error
		if *etag, problem, err = statObject(ctx, out, s.Path, -1); problem != "" || err != nil {
			return problem, err
		}
	}
	// Stream the whole shard through the hash; read the header and the
	// offsets tensors by range, so memory stays small whatever the shard size.
	hw := xxhash.New()
	n, err := storage.HashObject(ctx, out, s.Path, hw)
	if err != nil {
		if storage.IsNotFound(err) {
			return fmt.Sprintf("%s: missing", url), nil
		}
		return "", err
	}
	if n != s.Bytes {
		return fmt.Sprintf("%s: %d bytes, manifest says %d", url, n, s.Bytes), nil
	}
	if got := fmt.Sprintf("%016x", hw.Sum64()); got != s.XXHash64 {
		return fmt.Sprintf("%s: xxhash64 is %s, manifest says %s (the file was changed or damaged)", url, got, s.XXHash64), nil
	}
	ra, err := storage.NewReaderAt(ctx, storage.Object{Loc: out, Key: out.Key(s.Path), URL: url, Size: n}, nil)
	if err != nil {
		return "", err
	}
	defer ra.Close()
	h, err := loader.ReadHeader(ra, n)
	if err != nil {
		if c := errs.ClassOf(err); c == errs.Transient {
			return "", err
		}
		return fmt.Sprintf("%s: %v", url, err), nil
	}
	if s.HeaderXXHash64 != "" {
		// What a remote reader fetches first: the header alone, and the
		// block table in it.
		if s.HeaderBytes != h.DataStart {
			return fmt.Sprintf("%s: header of %d bytes, manifest says %d", url, h.DataStart, s.HeaderBytes), nil
		}
		hb := make([]byte, s.HeaderBytes)
		if _, err := ra.ReadAt(hb, 0); err != nil {
			return "", err
		}
		if got := fmt.Sprintf("%016x", xxhash.Sum64(hb)); got != s.HeaderXXHash64 {
			return fmt.Sprintf("%s: header xxhash64 is %s, manifest says %s", url, got, s.HeaderXXHash64), nil
		}
		var bt manifests.BlockTable
		if err := json.Unmarshal([]byte(h.Metadata[manifests.BlockTableKey]), &bt); err != nil {
			return fmt.Sprintf("%s: block table: %v", url, err), nil
		}
		if err := bt.Validate(s.Rows, s.Bytes-s.HeaderBytes, len(mt.Schema)); err != nil {
			return fmt.Sprintf("%s: %v", url, err), nil
		}
		// The blocks are the canonical ones: cut at every multiple of
		// the manifest's block_samples, counted from the output's first
		// sample (readers cut by that number).
		if bs := mt.Order.BlockSamples; bs > 0 && !slices.Equal(bt.Rows, manifests.BlockRows(s.FirstRow, s.Rows, bs)) {
			return fmt.Sprintf("%s: the block table is not cut every %d samples (block_samples) from the output's first", url, bs), nil
		}
	}
	readInt64s := func(ti loader.TensorInfo) ([]int64, error) {
		b := make([]byte, ti.End-ti.Begin)
		if _, err := ra.ReadAt(b, h.DataStart+ti.Begin); err != nil {
			return nil, err
		}
		return int64sOf(b), nil
	}
	if h.Metadata["spec_hash"] != mt.SpecHash || h.Metadata["rows"] != strconv.FormatInt(s.Rows, 10) || h.Metadata["first_row"] != strconv.FormatInt(s.FirstRow, 10) {
		return fmt.Sprintf("%s: metadata (spec_hash %s, rows %s, first_row %s) disagrees with the manifest", url, h.Metadata["spec_hash"], h.Metadata["rows"], h.Metadata["first_row"]), nil
	}
	if len(h.Tensors) != len(mt.Schema) {
		return fmt.Sprintf("%s: %d tensors, the schema has %d", url, len(h.Tensors), len(mt.Schema)), nil
	}
	var itemOffsets []int64
	for _, t := range mt.Schema {
		ti, ok := h.Find(t.Name)
		if !ok || ti.DType != t.DType {
			return fmt.Sprintf("%s: tensor %s (%s) is missing or has another dtype", url, t.Name, t.DType), nil
		}
		n := s.Rows
		if t.Level == tensors.LevelItem {
			n = s.Items
		}
		var want []int
		switch t.Kind {
		case tensors.KindOffsets:
			want = []int{int(n) + 1}
		case tensors.KindValues:
			want = ti.Shape[:min(1, len(ti.Shape))] // checked against its offsets below
		default:
			want = append([]int{int(n)}, t.Shape...)
		}
		if fmt.Sprint(ti.Shape) != fmt.Sprint(want) {
			return fmt.Sprintf("%s: tensor %s has shape %v, want %v", url, t.Name, ti.Shape, want), nil
		}
		if t.Kind == tensors.KindOffsets {
			o, err := readInt64s(ti)
			if err != nil {
				return "", err
			}
			if len(o) == 0 || o[0] != 0 {
				return fmt.Sprintf("%s: %s does not start at 0", url, t.Name), nil
			}
			for k := 1; k < len(o); k++ {
				if o[k] < o[k-1] {
					return fmt.Sprintf("%s: %s decreases at %d", url, t.Name, k), nil
				}
			}
			if t.Name == tensors.ItemOffsets {
				itemOffsets = o
			}
		}
	}
	for _, t := range mt.Schema {
		if t.Kind != tensors.KindValues {
			continue
		}
		ti, _ := h.Find(t.Name)
		oi, _ := h.Find(t.Offsets)
		o, err := readInt64s(oi)
		if err != nil {
			return "", err
		}
		if len(ti.Shape) != 1 || int64(ti.Shape[0]) != o[len(o)-1] {
			return fmt.Sprintf("%s: %s holds %v values, its offsets end at %d", url, t.Name, ti.Shape, o[len(o)-1]), nil
		}
	}
	if itemOffsets != nil && itemOffsets[len(itemOffsets)-1] != s.Items {
		return fmt.Sprintf("%s: item offsets end at %d, the shard holds %d items", url, itemOffsets[len(itemOffsets)-1], s.Items), nil
	}
	return "", nil
}

func int64sOf(b []byte) []int64 {
	out := make([]int64, len(b)/8)
	for i := range out {
		out[i] = int64(uint64(b[8*i]) | uint64(b[8*i+1])<<8 | uint64(b[8*i+2])<<16 | uint64(b[8*i+3])<<24 |
			uint64(b[8*i+4])<<32 | uint64(b[8*i+5])<<40 | uint64(b[8*i+6])<<48 | uint64(b[8*i+7])<<56)
	}
	return out
}
