package dedupe

import (
	"context"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/writer"
)

// Detection is what a Detector found: per column, whether it varied inside
// a query, and the first place it did. Partitions cut at query boundaries
// detect apart; merging their results in order gives what one detector fed
// every row in order gives. It is JSON so that distributed detect tasks can
// hand it to the reduces.
type Detection struct {
	Varying   []bool            `json:"varying"`
	Conflicts map[string]string `json:"conflicts"` // column index -> first conflict
}

// DetectionOf returns what d found so far.
func DetectionOf(d *Detector) Detection {
	c := d.Constant()
	out := Detection{Varying: make([]bool, len(c)), Conflicts: map[string]string{}}
	for i, k := range c {
		out.Varying[i] = !k
		if cf, ok := d.Conflict(i); ok {
			out.Conflicts[strconv.Itoa(i)] = cf.String()
		}
	}
	return out
}

// Merge adds a later partition's detection: the first conflict stays.
//
// Both must be of the same columns (Merge panics otherwise): a detection
// read from storage is checked first (CheckColumns).
func (d *Detection) Merge(o Detection) {
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

// CheckColumns refuses a detection that is not of n columns.
func (d Detection) CheckColumns(n int) error {
	if len(d.Varying) != n {
		return fmt.Errorf("a detection of %d columns, the table has %d", len(d.Varying), n)
	}
	return nil
}

// Constant reports, per column, whether it never varied inside a query.
func (d Detection) Constant() []bool {
	out := make([]bool, len(d.Varying))
	for i, v := range d.Varying {
		out[i] = !v
	}
	return out
}

// Conflict describes where column c first varied inside a query.
func (d Detection) Conflict(c int) string { return d.Conflicts[strconv.Itoa(c)] }

// Decision is what packing decided for a table: the packed layout and the
// columns declared query-level that varied and so were kept per item
// (--on-query-conflict=items).
type Decision struct {
	Layout   *Layout
	QueryKey []int
	Moved    []string
}

// DecideOptions are the user's packing choices.
type DecideOptions struct {
	// QueryColumns are declared query-level columns (patterns); empty:
	// every column the detection found constant.
	QueryColumns []string
	// OnQueryConflict is "error" (default) or "items": what to do when a
	// declared query-level column varies within a query.
	OnQueryConflict string
}

// Decide fixes the query-level columns and the packed layout from a
// detection over every row. Slice keys must be query-level: they are added
// when constant, and one that varies within a query is bad input.
func Decide(flat *arrow.Schema, queryKey, sliceCols []int, det Detection, o DecideOptions) (*Decision, error) {
	if err := det.CheckColumns(flat.NumFields()); err != nil {
		return nil, fmt.Errorf("internal: %w", err) // read detections are checked first
	}
	d := &Decision{QueryKey: queryKey}
	isQuery := det.Constant()
	if len(o.QueryColumns) > 0 {
		decl, err := MatchColumns(flat, o.QueryColumns)
		if err != nil {
			return nil, errs.Usagef("--query-columns: %v", err)
		}
		for c := range decl {
			if decl[c] && !isQuery[c] {
				cf := det.Conflict(c)
				if o.OnQueryConflict != "items" {
					return nil, errs.WithHint(errs.BadInputf("--query-columns: %s", cf), "fix the data, or pass --on-query-conflict=items to keep the column per item")
				}
				decl[c] = false
				d.Moved = append(d.Moved, flat.Field(c).Name)
			}
		}
		for _, k := range queryKey {
			decl[k] = true
		}
		isQuery = decl
	}
	constant := det.Constant()
	for _, sc := range sliceCols {
		if !constant[sc] {
			return nil, errs.BadInputf("slice key %q must be query-level but varies within a query (%s)", flat.Field(sc).Name, det.Conflict(sc))
		}
		isQuery[sc] = true
	}
	l, err := NewLayout(flat, queryKey, isQuery)
	if err != nil {
		return nil, errs.BadInputErr(err)
	}
	d.Layout = l
	return d, nil
}

// Manifest describes the packing for the manifest: its columns and the
// counts of what p packed. itemOrder is the configured item order.
func (d *Decision) Manifest(p *Packer, itemOrder []string, bytesBefore, bytesAfter int64) *manifests.Packing {
	l := d.Layout
	all := make([]int, l.Flat.NumFields())
	for i := range all {
		all[i] = i
	}
	return &manifests.Packing{
		QueryKey: l.Names(d.QueryKey), QueryColumns: l.Names(l.QueryColumns),
		ItemColumns: l.Names(l.ItemColumns), FlatColumns: l.Names(all),
		ItemOrder: nonNil(itemOrder), MovedToItems: nonNil(d.Moved),
		Queries: p.Queries, Items: p.Items, ItemsPerQuery: manifests.DistributionOf(p.ItemsPerQuery),
		BytesBefore: bytesBefore, BytesAfter: bytesAfter,
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Cuts are where a packing sink's flat rows start and end and where the
// planner cut row groups and slices, as flat-row positions in the output.
type Cuts struct {
	// Start and End are the positions of the first flat row and past the
	// last one.
	Start, End int64
	// RowGroupEnds are the planned row-group ends inside [Start, End): each
	// becomes a cut at the query boundary at or before it.
	RowGroupEnds []int64
	// SliceStarts are the slices' first rows: queries never span slices,
	// so the query held back is complete there and is packed before a cut
	// that falls on one, and row groups end where slices end.
	SliceStarts []int64
}

// PackSink is a sink decorator: it packs ordered flat rows into one row
// per query and writes the packed rows to the next sink (Parquet, tensors
// or a Tee of both), ending row groups at query boundaries.
type PackSink struct {
	ctx         context.Context
	next        writer.Sink
	packer      *Packer
	rgEnds      map[int64]bool
	sliceStarts map[int64]bool
	items, end  int64
}

// NewPackSink returns a sink packing flat rows with p and writing the
// packed rows to next.
func NewPackSink(ctx context.Context, next writer.Sink, p *Packer, c Cuts) *PackSink {
	s := &PackSink{ctx: ctx, next: next, packer: p, rgEnds: map[int64]bool{}, sliceStarts: map[int64]bool{},
		items: c.Start, end: c.End}
	for _, e := range c.RowGroupEnds {
		s.rgEnds[e] = true
	}
	for _, st := range c.SliceStarts {
		s.sliceStarts[st] = true
	}
	return s
}

// Write packs flat rows (in output order) and writes the complete queries.
func (s *PackSink) Write(rec arrow.RecordBatch) error {
	packed, err := s.packer.Add(s.ctx, rec)
	if err != nil {
		return errs.BadInputErr(err)
	}
	for i, pk := range packed {
		err := s.next.Write(pk)
		pk.Release()
		if err != nil {
			for _, r := range packed[i+1:] {
				r.Release()
			}
			return err
		}
	}
	s.items += rec.NumRows()
	cut := s.rgEnds[s.items]
	if s.items == s.end || (cut && s.sliceStarts[s.items]) {
		if err := s.flush(); err != nil {
			return err
		}
	}
	if cut {
		return s.next.EndRowGroup()
	}
	return nil
}

// flush packs the query held back.
func (s *PackSink) flush() error {
	packed, err := s.packer.Flush(s.ctx)
	if err != nil || packed == nil {
		return err
	}
	defer packed.Release()
	return s.next.Write(packed)
}

// EndRowGroup implements writer.Sink: cuts come from the planned Cuts,
// moved to query boundaries, not from the caller.
func (s *PackSink) EndRowGroup() error { return nil }

// Finish packs the last query and finishes the next sink.
func (s *PackSink) Finish() (writer.Written, error) {
	if err := s.flush(); err != nil {
		s.next.Abort()
		return writer.Written{}, err
	}
	return s.next.Finish()
}

// Abort implements writer.Sink.
func (s *PackSink) Abort() { s.next.Abort() }
