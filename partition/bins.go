package partition

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

// A one-pass shuffle cuts every unit into one piece per input row group
// (each map routes a row group at a time). At a small --memory-limit on a
// large input both are many: 256 row groups and 791 units for 16M rows at
// 128 MiB, 200,000 pieces of 80 rows, each an IPC batch written, read
// back, decoded into arrays and gathered from. The pieces' fixed costs
// (allocation, collection, compression frames) grew the run's time with
// the square of the input. A run with small pieces shuffles in two passes
// instead: the map routes rows to bins (runs of consecutive units), each
// row with its unit; then each bin is read back in input order, a map
// row group's worth at a time, and routed to its units. With √units bins,
// pieces are about rowGroups·2·√units, each bins-fold larger, for one
// more write and read of the spill.

// MinPieceRows is the smallest average piece (rows of a unit routed from
// one input row group) a one-pass shuffle is left with; below it, a run
// shuffles in two passes (Bins).
const MinPieceRows = 1024

// UnitColumn is the column the first pass adds to each routed row: its
// unit.
const UnitColumn = "__relayout_unit"

// Bins returns, for a shuffle of rows over units from rowGroups input row
// groups, each unit's bin for a two-pass shuffle, or nil when the pieces
// of one pass are large enough (MinPieceRows). Bins are runs of
// consecutive units, about √units of them, of about equal rows.
func Bins(units []Unit, rowGroups int) []int {
	var rows int64
	for _, u := range units {
		rows += u.Rows
	}
	if len(units) < 4 || rowGroups < 2 || rows/int64(len(units)*rowGroups) >= MinPieceRows {
		return nil
	}
	n := int(math.Ceil(math.Sqrt(float64(len(units)))))
	per := (rows + int64(n) - 1) / int64(n)
	bins := make([]int, len(units))
	var acc int64
	b := 0
	for i, u := range units {
		if acc >= per*int64(b+1) && b < n-1 {
			b++
		}
		bins[i] = b
		acc += u.Rows
	}
	return bins
}

// NumBins is the number of bins in bins (Bins' result); 0 for nil.
func NumBins(bins []int) int {
	if len(bins) == 0 {
		return 0
	}
	return slices.Max(bins) + 1
}

// BinSchema is schema with UnitColumn appended: the rows of the first
// pass of a two-pass shuffle.
func BinSchema(schema *arrow.Schema) *arrow.Schema {
	fs := append(slices.Clone(schema.Fields()), arrow.Field{Name: UnitColumn, Type: arrow.PrimitiveTypes.Int32})
	md := schema.Metadata()
	return arrow.NewSchema(fs, &md)
}

// withUnits appends the units column to part, releasing part; binSchema
// is BinSchema(part.Schema()).
func withUnits(binSchema *arrow.Schema, part arrow.RecordBatch, units []int32) arrow.RecordBatch {
	b := array.NewInt32Builder(memory.DefaultAllocator)
	b.AppendValues(units, nil)
	col := b.NewArray()
	b.Release()
	cols := append(slices.Clone(part.Columns()), col)
	out := array.NewRecordBatch(binSchema, cols, part.NumRows())
	col.Release()
	part.Release()
	return out
}

// Rebin is the second pass of a two-pass shuffle over bin's segments (one
// per map task, in map order, in a local work folder, of BinSchema(schema)
// rows): it reads them in input order, batchRows rows or a little more at
// a time, and hands each unit's rows of each such batch, in input order
// and without UnitColumn, to emit. parallel units are taken at once.
func Rebin(ctx context.Context, work storage.Location, segs []Segment, schema *arrow.Schema, batchRows int64, parallel int, emit func(u int, part arrow.RecordBatch) error) (rows int64, err error) {
	binSchema := BinSchema(schema)
	var held []arrow.RecordBatch
	var heldRows int64
	flush := func() error {
		if len(held) == 0 {
			return nil
		}
		recs := held
		held, heldRows = nil, 0
		byUnit := map[int][]int64{}
		var at, bytes int64
		for _, r := range recs {
			bytes += RecordBytes(r)
			us := r.Column(r.Schema().NumFields() - 1).(*array.Int32)
			if us.NullN() > 0 {
				for _, r := range recs {
					r.Release()
				}
				return fmt.Errorf("internal: the shuffle's unit column has nulls")
			}
			for i, u := range us.Int32Values() {
				byUnit[int(u)] = append(byUnit[int(u)], at+int64(i))
			}
			at += r.NumRows()
		}
		return takeGroups(ctx, binSchema, schema, recs, byUnit, parallel, pieceRowsOf(bytes, at), func(u, _ int, part arrow.RecordBatch) error {
			defer part.Release()
			return emit(u, part)
		})
	}
	defer func() {
		for _, r := range held {
			r.Release()
		}
	}()
	for _, seg := range segs {
		err := eachSegmentBatch(ctx, work, seg, func(rec arrow.RecordBatch) error {
			held = append(held, rec)
			heldRows += rec.NumRows()
			rows += rec.NumRows()
			if heldRows >= batchRows {
				return flush()
			}
			return nil
		})
		if err != nil {
			return rows, err
		}
	}
	return rows, flush()
}

// eachSegmentBatch streams a plain segment of a local work folder batch by
// batch to fn, which takes ownership of each batch; the segment's pages
// are dropped from the page cache once read. A segment cut short or
// damaged is bad input; fn's errors are returned as they are.
func eachSegmentBatch(ctx context.Context, work storage.Location, seg Segment, fn func(arrow.RecordBatch) error) error {
	if work.Local == "" {
		return fmt.Errorf("internal: a two-pass shuffle reads a local work folder")
	}
	name := filepath.Join(work.Local, filepath.FromSlash(seg.Path))
	f, err := os.Open(name)
	if err != nil {
		return storage.Classify(fmt.Errorf("read %s: %w", name, err))
	}
	defer f.Close()
	defer storage.DropCached(f, seg.Offset, seg.Length)
	var fnErr error
	err = eachStreamBatch(bufio.NewReaderSize(io.NewSectionReader(f, seg.Offset, seg.Length), 1<<20), func(rec arrow.RecordBatch) error {
		if fnErr = ctx.Err(); fnErr == nil {
			fnErr = fn(rec)
		} else {
			rec.Release()
		}
		return fnErr
	})
	if err != nil && err == fnErr {
		return err
	}
	if err != nil {
		return errs.WithHint(errs.BadInputf("read %s at %d: the shuffle is damaged: %v", name, seg.Offset, err), "run relayout again")
	}
	return nil
}
