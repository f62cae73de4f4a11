package source

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
)

// OpenOutput opens data files of a written output (files indexes
// m.Files; nil: all) as one table in the manifest's column order: the
// columns of a Hive-partitioned output's folders are restored from the
// paths, typed as the manifest records them.
func OpenOutput(ctx context.Context, out storage.Location, m *manifests.Manifest, files []int, counts *storage.Counters) (*Table, error) {
	return openOutput(ctx, out, m, files, counts, nil)
}

// OpenOutputFile is OpenOutput of file fi alone, whose bytes, read
// already, are data: the table reads them, not the store.
func OpenOutputFile(ctx context.Context, out storage.Location, m *manifests.Manifest, fi int, data []byte) (*Table, error) {
	return openOutput(ctx, out, m, []int{fi}, nil, data)
}

func openOutput(ctx context.Context, out storage.Location, m *manifests.Manifest, files []int, counts *storage.Counters, data []byte) (*Table, error) {
	if files == nil {
		files = make([]int, len(m.Files))
		for i := range files {
			files[i] = i
		}
	}
	objs := make([]storage.Object, len(files))
	rels, urls := make([]string, len(files)), make([]string, len(files))
	for i, fi := range files {
		f := m.Files[fi]
		objs[i] = storage.Object{Loc: out, Key: out.Key(f.Path), URL: out.URL(f.Path), Size: f.Bytes, Rel: strings.TrimPrefix(f.Path, "parquet/")}
		if data != nil {
			objs[i].Data, objs[i].Size = data, int64(len(data))
		} else if out.Local != "" {
			objs[i].LocalPath = out.Local + "/" + f.Path
		}
		rels[i], urls[i] = objs[i].Rel, objs[i].URL
	}
	tbl, err := Open(ctx, objs, counts)
	if err != nil {
		return nil, err
	}
	pt := m.Partitioning
	if pt == nil {
		return tbl, nil
	}
	declared := map[string]arrow.DataType{}
	for i, k := range pt.Keys {
		var t arrow.DataType
		ok := i < len(pt.Types)
		if ok {
			t, ok = hive.TypeOf(pt.Types[i])
		}
		if !ok {
			tbl.Close()
			return nil, fmt.Errorf("manifest: partition key %q has no known type", k)
		}
		declared[k] = t
	}
	p, err := hive.Discover(rels, urls, hive.On, declared)
	if err == nil {
		err = tbl.AddPartitions(p)
	}
	if err == nil {
		names := make([]string, len(m.Schema))
		for i, c := range m.Schema {
			names[i] = c.Name
		}
		err = tbl.Reorder(names)
	}
	if err == nil {
		// A folder column is as nullable as the column it was written from.
		fields := tbl.Schema.Fields()
		for i, c := range m.Schema {
			if tbl.Files[0].colMap[i] < 0 {
				fields[i].Nullable = c.Nullable
			}
		}
		md := tbl.Schema.Metadata()
		tbl.Schema = arrow.NewSchema(fields, &md)
	}
	if err != nil {
		tbl.Close()
		return nil, err
	}
	return tbl, nil
}
