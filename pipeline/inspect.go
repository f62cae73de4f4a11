package pipeline

import (
	"context"
	"sort"
	"strings"

	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/storage"
)

// InspectOptions configures Inspect.
type InspectOptions struct {
	Inputs []string
	// HivePartitioning and HiveTypes read partition columns from the
	// inputs' key=value folders, as RunOptions' do.
	HivePartitioning, HiveTypes string
	SliceKeys                   []string
	Parallel                    int
}

// InspectResult describes a table and, with slice keys, what reading each
// slice costs a reader that prunes row groups by their statistics.
type InspectResult struct {
	Files     []InspectFile  `json:"files"`
	Totals    InspectTotals  `json:"totals"`
	SliceKeys []string       `json:"slice_keys"`
	Slices    []InspectSlice `json:"slices"`
	// SliceSummary weighs every slice by its rows.
	SliceSummary *SliceSummary `json:"slice_summary,omitempty"`
	// Cost is what inspect itself read.
	Cost InspectCost `json:"cost"`
}

// InspectFile is one file.
type InspectFile struct {
	Path      string   `json:"path"`
	Bytes     int64    `json:"bytes"`
	Rows      int64    `json:"rows"`
	RowGroups int      `json:"row_groups"`
	Codecs    []string `json:"codecs"`
	CreatedBy string   `json:"created_by"`
	PageIndex bool     `json:"page_index"`
}

// InspectTotals sums the files.
type InspectTotals struct {
	Files     int   `json:"files"`
	Bytes     int64 `json:"bytes"`
	Rows      int64 `json:"rows"`
	RowGroups int   `json:"row_groups"`
	// DataBytes sums the compressed column chunks (bytes a full scan reads);
	// UncompressedBytes the row groups' total_byte_size (decoded size).
	DataBytes         int64 `json:"data_bytes"`
	UncompressedBytes int64 `json:"uncompressed_bytes"`
}

// InspectSlice is one slice.
type InspectSlice struct {
	Key manifests.KeyValues `json:"key"`
	// Rows; RowGroupsTouched holds at least one of its rows;
	// RowGroupsRead must be read by a statistics-pruning reader;
	// ReadBytes is the compressed bytes of those row groups (SELECT *);
	// ShareBytes is the slice's share of the data bytes (by rows);
	// Amplification is ReadBytes / ShareBytes.
	Rows             int64   `json:"rows"`
	RowGroupsTouched int     `json:"row_groups_touched"`
	RowGroupsRead    int     `json:"row_groups_read"`
	ReadBytes        int64   `json:"read_bytes"`
	ShareBytes       int64   `json:"share_bytes"`
	Amplification    float64 `json:"amplification"`
}

// SliceSummary sums the slices.
type SliceSummary struct {
	Slices int `json:"slices"`
	// Amplification is sum(read bytes x rows) / sum(share bytes x rows):
	// the read amplification of a slice drawn in proportion to its rows.
	Amplification float64 `json:"amplification_weighted_by_rows"`
	// MeanRowGroupsRead is weighted by rows too.
	MeanRowGroupsRead float64 `json:"row_groups_read_weighted_by_rows"`
}

// InspectCost is what inspect read to answer.
type InspectCost struct {
	BytesRead int64 `json:"bytes_read"`
	Requests  int64 `json:"requests"`
}

// Inspect reads footers and, with slice keys, only the slice-key columns.
func Inspect(ctx context.Context, o InspectOptions) (*InspectResult, error) {
	objs, err := storage.List(ctx, o.Inputs)
	if err != nil {
		return nil, err
	}
	counts := new(storage.Counters)
	tbl, err := openObjects(ctx, objs, counts, o.HivePartitioning, o.HiveTypes, 0) // footers and key columns: the default limit
	if err != nil {
		return nil, err
	}
	defer tbl.Close()
	res := &InspectResult{SliceKeys: nonNil(o.SliceKeys), Slices: []InspectSlice{}}
	type rgInfo struct {
		bytes int64
		stats []partition.StatsRange
	}
	var rgs []rgInfo
	sliceCols, err := partition.KeyColumns(tbl, o.SliceKeys, "--slice-keys")
	if err != nil {
		return nil, err
	}
	for _, f := range tbl.Files {
		md, err := f.Metadata()
		if err != nil {
			return nil, err
		}
		inf := InspectFile{Path: f.Obj.URL, Bytes: f.Obj.Size, Rows: f.Rows, RowGroups: len(f.RowGroupRows), CreatedBy: md.GetCreatedBy(), Codecs: []string{}}
		codecs := map[string]bool{}
		pageIndex := len(f.RowGroupRows) > 0
		for g := range f.RowGroupRows {
			rg := md.RowGroup(g)
			ri := rgInfo{}
			for c := 0; c < rg.NumColumns(); c++ {
				cc, err := rg.ColumnChunk(c)
				if err != nil {
					continue
				}
				ri.bytes += cc.TotalCompressedSize()
				codecs[strings.ToUpper(cc.Compression().String())] = true
				if cc.GetOffsetIndexLocation() == nil {
					pageIndex = false
				}
			}
			for _, sc := range sliceCols {
				name := tbl.Schema.Field(sc).Name
				idx := md.Schema.ColumnIndexByName(name)
				var sr partition.StatsRange
				sr.MayHaveNulls = true
				if v := f.PartitionValue(sc); v != nil {
					sr = partition.ConstantStats(v)
					v.Release()
				} else if idx >= 0 {
					if cc, err := rg.ColumnChunk(idx); err == nil {
						if st, err := cc.Statistics(); err == nil && st != nil {
							sr = partition.StatsFor(tbl.Schema.Field(sc).Type, st)
						}
					}
				}
				ri.stats = append(ri.stats, sr)
			}
			res.Totals.DataBytes += ri.bytes
			rgs = append(rgs, ri)
		}
		for c := range codecs {
			inf.Codecs = append(inf.Codecs, c)
		}
		sort.Strings(inf.Codecs)
		inf.PageIndex = pageIndex
		res.Files = append(res.Files, inf)
		res.Totals.Files++
		res.Totals.Bytes += f.Obj.Size
		res.Totals.Rows += f.Rows
		res.Totals.RowGroups += len(f.RowGroupRows)
		res.Totals.UncompressedBytes += f.UncompressedBytes
	}
	if len(sliceCols) > 0 {
		hist, err := partition.Build(ctx, tbl, sliceCols, max(o.Parallel, 1))
		if err != nil {
			return nil, err
		}
		var wRead, wShare, wRG float64
		for _, s := range hist.Slices {
			is := InspectSlice{Rows: s.Rows, RowGroupsTouched: s.InputRowGroups, Key: manifests.KeyValues{}}
			for i, k := range o.SliceKeys {
				is.Key = append(is.Key, manifests.KV{Name: k, Value: s.Values[i]})
			}
			for _, rg := range rgs {
				read := true
				for c, sr := range rg.stats {
					if !sr.MayContain(s.Parts[c]) {
						read = false
						break
					}
				}
				if read {
					is.RowGroupsRead++
					is.ReadBytes += rg.bytes
				}
			}
			if tbl.Rows > 0 {
				is.ShareBytes = int64(float64(res.Totals.DataBytes) * float64(s.Rows) / float64(tbl.Rows))
			}
			if is.ShareBytes > 0 {
				is.Amplification = float64(is.ReadBytes) / float64(is.ShareBytes)
			}
			wRead += float64(is.ReadBytes) * float64(s.Rows)
			wShare += float64(is.ShareBytes) * float64(s.Rows)
			wRG += float64(is.RowGroupsRead) * float64(s.Rows)
			res.Slices = append(res.Slices, is)
		}
		sum := &SliceSummary{Slices: len(res.Slices)}
		if wShare > 0 {
			sum.Amplification = wRead / wShare
		}
		if tbl.Rows > 0 {
			sum.MeanRowGroupsRead = wRG / float64(tbl.Rows)
		}
		res.SliceSummary = sum
	}
	res.Cost = InspectCost{BytesRead: counts.Bytes.Load(), Requests: counts.Requests.Load()}
	return res, nil
}
