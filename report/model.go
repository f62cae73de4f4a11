package report

import (
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
)

// LeafEst is one output leaf column's bytes in the sample's output.
type LeafEst struct {
	// key: a slice-key column (what readers filter on); query: query-level
	// in a packed output (it scales with queries, the others with rows).
	Key, Query   bool
	Comp, Uncomp float64
	// dict is the dictionary pages' bytes, dictValues their entries,
	// values the column's values; fixed is the bytes every row group pays
	// whatever its rows: the dictionary, when it holds under a tenth as
	// many entries as the values (few distinct values), or, for a sample
	// of many row groups (Hive folders), the intercept of its row groups'
	// bytes against their rows. The sample paid it once per row group
	// (SampleEstimate.RowGroups).
	Dict, Fixed        float64
	DictValues, Values int64
}

// PredictOutput models the output's row groups: rows and slices from the
// layout (exact), queries from the query counts, column chunk and page
// sizes from the sample's bytes per row (or per query). It returns the
// model and the column chunk bytes in all. folderKeys is the leading slice
// keys that name Hive folders (0: a flat output).
func PredictOutput(hist *partition.Histogram, layout partition.Layout, perSliceQueries []int64, est *SampleEstimate, sliceKeys, folderKeys int, pageBytes int64) (TableCost, float64) {
	var tc TableCost
	for _, f := range layout.Files {
		ft := TableCost{footer: int64(est.FooterBase+est.FooterPerRG*float64(len(f.RowGroups))) + 8, files: 1}
		// A folder's files hold its slices alone: the first names it.
		if folderKeys > 0 && len(f.RowGroups) > 0 {
			if i := hist.Locate(f.RowGroups[0].Start); i < len(hist.Slices) && len(hist.Slices[i].Parts) >= folderKeys {
				ft.folderKeys = folderKeys
				ft.folderBytes = map[string]int64{folderKey(hist.Slices[i].Parts[:folderKeys]): ft.footer}
			}
		}
		tc.addFooters(&ft)
	}
	// qpos maps an output position in flat rows to one in output rows
	// (queries when packed): exact at slice boundaries, proportional
	// inside a slice.
	qstart := make([]float64, len(hist.Slices)+1)
	for i, s := range hist.Slices {
		n := float64(s.Rows)
		if perSliceQueries != nil {
			n = float64(perSliceQueries[i])
		}
		qstart[i+1] = qstart[i] + n
	}
	qpos := func(x int64) int64 {
		i := hist.Locate(x)
		if i >= len(hist.Slices) {
			return int64(qstart[len(hist.Slices)])
		}
		s := hist.Slices[i]
		return int64(qstart[i] + (qstart[i+1]-qstart[i])*float64(x-s.Start)/float64(max(s.Rows, 1)))
	}
	rate := func(l LeafEst, comp bool) float64 {
		v := l.Uncomp
		if comp {
			v = l.Comp - l.Fixed*float64(max(est.RowGroups, 1))
		}
		if l.Query && est.Queries > 0 {
			return v / float64(est.Queries)
		}
		if est.Rows > 0 {
			return v / float64(est.Rows)
		}
		return 0
	}
	var total float64
	for _, f := range layout.Files {
		for _, g := range f.RowGroups {
			q0, q1 := qpos(g.Start), qpos(g.Start+g.Rows)
			rc := rgCost{rows: q1 - q0, vectors: &partition.RowGroupSlices{}}
			var sl []partition.Slice
			for i := hist.Locate(g.Start); i < len(hist.Slices) && hist.Slices[i].Start < g.Start+g.Rows; i++ {
				if hist.Slices[i].Rows == 0 {
					continue
				}
				sl = append(sl, hist.Slices[i])
				lo, hi := max(int64(qstart[i]), q0)-q0, min(int64(qstart[i+1]), q1)-q0
				rc.vectors.AddVectors(int32(i), vectorsOf(rc.rows, lo, hi))
			}
			rc.stats = statsOfSlices(sl, sliceKeys)
			for _, l := range est.Leaves {
				n := float64(g.Rows)
				if l.Query {
					n = float64(rc.rows)
				}
				comp, uncomp := rate(l, true)*n+l.Fixed, rate(l, false)*n
				total += comp
				rc.bytes += int64(comp)
				if l.Key {
					rc.keyBytes += int64(comp)
					continue
				}
				// The writer cuts a page when its buffered values reach
				// --page-bytes: pages of equal rows, then the remainder.
				perPage := rc.rows
				if uncomp > 0 {
					perPage = max(int64(float64(pageBytes)/(uncomp/float64(max(rc.rows, 1)))), 1)
				}
				col := colCost{bytes: int64(comp)}
				var firsts, sizes []int64
				for first := int64(0); first < rc.rows || first == 0; first += perPage {
					n := min(perPage, rc.rows-first)
					firsts = append(firsts, first)
					sizes = append(sizes, int64(comp*float64(n)/float64(max(rc.rows, 1))))
					if rc.rows == 0 {
						break
					}
				}
				col.setPages(firsts, sizes)
				rc.others = append(rc.others, col)
			}
			tc.rgs = append(tc.rgs, rc)
		}
	}
	return tc, total
}

// SampleEstimate is the real pipeline's output for the sample.
type SampleEstimate struct {
	Rows, Queries int64
	// RowGroups is the sample output's row groups.
	RowGroups int
	// leaves are the output's leaf columns with their sample bytes.
	Leaves []LeafEst
	// footerBase is a footer without row groups; footerPerRG what each row
	// group adds to it; perRGOverhead what each adds to the file beyond its
	// column chunks (footer entry and page index).
	FooterBase, FooterPerRG, PerRGOverhead float64
	QueryColumns, ItemColumns, Moved       []string
	MultiRowQueries                        int
	TensorSchema                           []manifests.Tensor
	Tensors                                []float64
	ShardHeader                            float64
	Seconds                                float64
}
