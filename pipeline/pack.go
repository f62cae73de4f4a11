package pipeline

import (
	"context"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/compute"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/writer"
)

// packRun is the packing state of one partition (one packed file): the
// query-level columns decided over all rows (detection), then packing of
// the partition's ordered rows with row-group cuts moved to the query
// boundary at or before each planned cut; cuts at a slice boundary stay
// there (slices are query-level). The partition itself starts and ends at
// query boundaries (computePackCuts).
type packRun struct {
	qk     []int
	det    *dedupe.Detector
	layout *dedupe.Layout
	packer *dedupe.Packer
	rgEnds map[int64]bool
	// sliceStarts holds the output position of every slice's first row.
	sliceStarts map[int64]bool
	// items is the position of the next flat row; total the partition's
	// end.
	items, total int64
	// onPacked, when set, also receives every packed record (tensors).
	onPacked func(arrow.RecordBatch) error
	conflict []string // columns moved to the items by --on-query-conflict=items
}

func newPackRun(tbl *source.Table, qk []int, hist *partition.Histogram) *packRun {
	p := &packRun{qk: qk, det: dedupe.NewDetector(tbl.Schema, qk), total: tbl.Rows,
		rgEnds: map[int64]bool{}, sliceStarts: map[int64]bool{}}
	for _, s := range hist.Slices {
		if s.Rows > 0 {
			p.sliceStarts[s.Start] = true
		}
	}
	return p
}

// detectColumns feeds a sorted unit to the detector.
func (p *packRun) detectColumns(src *unitSource, schema *arrow.Schema) error {
	arrs := make([]arrow.Array, len(src.cols))
	for i, c := range src.cols {
		arrs[i] = c.(*compute.ArrayDatum).MakeArray()
	}
	n := int64(0)
	if len(arrs) > 0 {
		n = int64(arrs[0].Len())
	}
	rec := arrowRecord(schema, arrs, n)
	defer rec.Release()
	return p.det.Add(rec, src.ord)
}

// detection is what the detector found: per column, whether it varied
// inside a query, and the first place it did. Partitions cut at query
// boundaries detect apart; merging their results in order gives what one
// detector fed every row in order gives.
type detection struct {
	Varying   []bool            `json:"varying"`
	Conflicts map[string]string `json:"conflicts"` // column index -> first conflict
}

func detectionOf(d *dedupe.Detector) detection {
	c := d.Constant()
	out := detection{Varying: make([]bool, len(c)), Conflicts: map[string]string{}}
	for i, k := range c {
		out.Varying[i] = !k
		if cf, ok := d.Conflict(i); ok {
			out.Conflicts[strconv.Itoa(i)] = cf.String()
		}
	}
	return out
}

// merge adds a later partition's detection: the first conflict stays.
func (d *detection) merge(o detection) {
	if d.Varying == nil {
		d.Varying = make([]bool, len(o.Varying))
		d.Conflicts = map[string]string{}
	}
	for i, v := range o.Varying {
		if v && !d.Varying[i] {
			d.Varying[i] = true
			d.Conflicts[strconv.Itoa(i)] = o.Conflicts[strconv.Itoa(i)]
		}
	}
}

func (d detection) constant() []bool {
	out := make([]bool, len(d.Varying))
	for i, v := range d.Varying {
		out[i] = !v
	}
	return out
}

func (d detection) conflict(c int) string { return d.Conflicts[strconv.Itoa(c)] }

// decideFrom fixes the query-level columns and the packed layout from a
// detection.
func (p *packRun) decideFrom(tbl *source.Table, opts RunOptions, sliceCols []int, det detection) error {
	isQuery := det.constant()
	if len(opts.QueryColumns) > 0 {
		decl, err := dedupe.MatchColumns(tbl.Schema, opts.QueryColumns)
		if err != nil {
			return errs.Usagef("--query-columns: %v", err)
		}
		for c := range decl {
			if decl[c] && !isQuery[c] {
				cf := det.conflict(c)
				if opts.OnQueryConflict != "items" {
					return errs.WithHint(errs.BadInputf("--query-columns: %s", cf), "fix the data, or pass --on-query-conflict=items to keep the column per item")
				}
				decl[c] = false
				p.conflict = append(p.conflict, tbl.Schema.Field(c).Name)
			}
		}
		for _, k := range p.qk {
			decl[k] = true
		}
		isQuery = decl
	}
	// Slice keys must be query-level: they are added when constant, and a
	// slice key that varies within a query is an error.
	constant := det.constant()
	for _, sc := range sliceCols {
		if !constant[sc] {
			cf := det.conflict(sc)
			return errs.BadInputf("slice key %q must be query-level but varies within a query (%s)", tbl.Schema.Field(sc).Name, cf)
		}
		isQuery[sc] = true
	}
	l, err := dedupe.NewLayout(tbl.Schema, p.qk, isQuery)
	if err != nil {
		return errs.BadInputErr(err)
	}
	p.layout = l
	p.packer = dedupe.NewPacker(l)
	return nil
}

// write packs ordered flat rows and appends complete queries, cutting row
// groups at the planned boundaries.
func (p *packRun) write(ctx context.Context, w *writer.Parquet, rec arrow.RecordBatch) error {
	packed, err := p.packer.Add(ctx, rec)
	if err != nil {
		return errs.BadInputErr(err)
	}
	for _, pk := range packed {
		if err := p.append(w, pk); err != nil {
			return err
		}
	}
	p.items += rec.NumRows()
	// The held-back query is complete at the end and at a slice boundary
	// (queries never span slices): pack it before the cut, so row groups
	// end where slices end and their statistics stay tight.
	cut := p.rgEnds[p.items]
	if p.items == p.total || (cut && p.sliceStarts[p.items]) {
		if err := p.finish(ctx, w); err != nil {
			return err
		}
	}
	if cut {
		return w.EndRowGroup()
	}
	return nil
}

func (p *packRun) append(w *writer.Parquet, packed arrow.RecordBatch) error {
	if packed == nil {
		return nil
	}
	defer packed.Release()
	if err := w.Append(packed); err != nil {
		return err
	}
	if p.onPacked != nil {
		return p.onPacked(packed)
	}
	return nil
}

// finish packs the last query.
func (p *packRun) finish(ctx context.Context, w *writer.Parquet) error {
	packed, err := p.packer.Flush(ctx)
	if err != nil {
		return err
	}
	return p.append(w, packed)
}

// slicesInQueries returns the slices counted in queries (queries per
// slice rank, from the key pass).
func slicesInQueries(hist *partition.Histogram, queries []int64) []partition.Slice {
	out := make([]partition.Slice, len(hist.Slices))
	var start int64
	for i, s := range hist.Slices {
		s.Rows, s.Start = queries[i], start
		start += s.Rows
		out[i] = s
	}
	return out
}

// buildManifest is the manifest of a packed run: slices counted in
// queries (queries per slice rank, from the key pass), with their items.
func (p *packRun) buildManifest(tbl *source.Table, hist *partition.Histogram, queries []int64, files []writer.FileInfo, cfgJSON []byte, cfgHash string, opts RunOptions, inFP fingerprint.Sum, inBytes int64) *manifests.Manifest {
	m := buildManifest(tbl, p.layout.Packed, slicesInQueries(hist, queries), files, cfgJSON, cfgHash, opts, inFP)
	k := 0 // manifest slices are the histogram's non-empty slices, in order
	for _, hs := range hist.Slices {
		if hs.Rows > 0 {
			m.Slices[k].Items = hs.Rows
			k++
		}
	}
	m.SortKeys = nonNil(opts.QueryKey)
	m.Packing = p.manifest(opts, inBytes, m.Totals.Bytes, nil)
	return m
}

// manifest describes the packing.
func (p *packRun) manifest(opts RunOptions, inBytes, outBytes int64, perSliceItems []int64) *manifests.Packing {
	st := distributionOf(append([]int64{}, p.packer.ItemsPerQuery...))
	return &manifests.Packing{
		QueryKey: p.layout.Names(p.qk), QueryColumns: p.layout.Names(p.layout.QueryColumns),
		ItemColumns: p.layout.Names(p.layout.ItemColumns), FlatColumns: p.layout.Names(allCols(p.layout.Flat.NumFields())),
		ItemOrder: nonNil(opts.ItemOrder), MovedToItems: nonNil(p.conflict),
		Queries: p.packer.Queries, Items: p.packer.Items, ItemsPerQuery: st,
		BytesBefore: inBytes, BytesAfter: outBytes,
	}
}

func allCols(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// distributionOf summarises counts (and sorts them).
func distributionOf(counts []int64) manifests.Distribution {
	if len(counts) == 0 {
		return manifests.Distribution{}
	}
	slices.Sort(counts)
	q := func(f float64) int64 { return counts[min(int(f*float64(len(counts))), len(counts)-1)] }
	return manifests.Distribution{Min: counts[0], P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: counts[len(counts)-1]}
}
