package plan

import (
	"context"

	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/source"
)

// KeyTask is one task of a distributed key pass: it reads the key columns
// of the row groups [first, end) (one map task's run, MapRuns) and returns
// their summary, priced for the report's read costs. sliceKeys are the
// slice-key names (the read-cost model finds the columns by name).
func KeyTask(ctx context.Context, tbl *source.Table, keys Keys, sliceKeys []string, first, end, parallel int) (*partition.KeySummary, error) {
	o := partition.BuildOptions{Vectors: len(keys.Slice) > 0, QueryCols: keys.Query}
	sum, vectors, err := partition.SummarizeKeys(ctx, tbl, first, end, keys.Slice, o, parallel)
	if err != nil {
		return nil, err
	}
	parts := make([][][]byte, len(sum.Slices))
	for i, s := range sum.Slices {
		parts[i] = s.Parts
	}
	present, err := report.PresentBytes(tbl, sliceKeys, first, end, parts, vectors)
	if err != nil {
		return nil, err
	}
	for i := range sum.Slices {
		sum.Slices[i].ReadBytes = present[i]
	}
	return sum, nil
}

// AnalyzeSummaries is Analyze from the key tasks' summaries (one per map
// run): the same key pass, layout and memory plan, with only the footers,
// the summaries and the encoding sample read here. fs, where not nil, is
// the sample a key task read and measured (ReadFitSample; fs.Sample, which
// it takes, may be nil): then no row is read here.
func AnalyzeSummaries(ctx context.Context, tbl *source.Table, keys Keys, sums []*partition.KeySummary, fs *FitSample, o Options, r Resources) (*KeyPass, error) {
	in := SizesOf(tbl)
	hist, sx, err := partition.BuildFromSummaries(ctx, tbl, sums, keys.Slice, partition.BuildOptions{QueryCols: keys.Query})
	if err != nil {
		return nil, err
	}
	before, err := report.CostsBeforeSummed(tbl, o.SliceKeys, hist, sx.ReadBytes)
	if err != nil {
		return nil, err
	}
	kp := &KeyPass{Hist: hist, Extra: &partition.BuildExtra{Queries: sx.Queries}, Before: before, Tasks: sx}
	if fs == nil {
		return fit(ctx, tbl, kp, in, o, r)
	}
	// The sample a key task read and measured: the same rows, scale and
	// row bytes fit would find, and no row read here.
	if err := InputFits(tbl, r); err != nil {
		if fs.Sample != nil {
			fs.Sample.Release()
		}
		return nil, err
	}
	raiseDecodeScale(tbl, fs.DecodeScale)
	return fitMeasured(tbl, kp, nil, *fs, in, o, r)
}
