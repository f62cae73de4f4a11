package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/dedupe"
	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/writer"
)

// DefaultParallel is how many files Output checks at once by default:
// checking is bound by reading, and two keep one core busy decoding.
const DefaultParallel = 2

// Result is the outcome of a verification.
type Result struct {
	OK bool `json:"ok"`
	// Problem describes the first mismatch found ("" when OK).
	Problem string `json:"problem,omitempty"`
	Files   int    `json:"files"`
	Rows    int64  `json:"rows"`
	Bytes   int64  `json:"bytes"`
	Deep    bool   `json:"deep"`
	// Shards is the number of tensor shards checked; Rederived says that
	// deep verification converted the Parquet rows again and found every
	// shard equal (skipped for outputs of another relayout version).
	Shards    int  `json:"shards,omitempty"`
	Rederived bool `json:"rederived,omitempty"`
	// Warnings lists what is wrong but does not make the output unreadable:
	// files under parquet/ or tensors/ that the manifest does not name.
	Warnings []string `json:"warnings,omitempty"`
	// Checked holds, per file of the manifest, what a later check needs to
	// trust it without reading it again (see Checked): the stored object's
	// ETag and its first and last encoded keys.
	Checked []Checked `json:"-"`
}

// Checked is what a check that read a file found: the object's ETag when
// it was read, and its first and last encoded keys (slice keys, then sort
// keys; nil for files without key columns or rows). A reduce task checks
// the files it wrote and hands these to commit, which then only confirms
// that each object is still the one checked (size and ETag) and that keys
// do not decrease across the files (ManifestChecked).
type Checked struct {
	Path  string `json:"path"`
	ETag  string `json:"etag"`
	First []byte `json:"first,omitempty"`
	Last  []byte `json:"last,omitempty"`
}

// Output checks an output folder against its manifest: every file exists with
// the recorded size and xxhash64, footers hold the recorded rows and row
// groups, key order and slice boundaries match the slice index, key statistics
// are present (and min == max in row groups owned by one slice); deep also
// decodes every value and compares the content fingerprint.
func Output(ctx context.Context, output string, deep bool, parallel int) (*Result, error) {
	out, err := storage.OpenDir(ctx, output, false)
	if err != nil {
		return nil, err
	}
	data, err := storage.Get(ctx, out, manifests.FileName)
	if err != nil {
		if storage.IsNotFound(err) {
			return &Result{Problem: fmt.Sprintf("%s: no manifest (the run did not complete)", out.URL(manifests.FileName))}, nil
		}
		return nil, err
	}
	m, err := manifests.Decode(data)
	if err != nil {
		return &Result{Problem: fmt.Sprintf("%s: %v", out.URL(manifests.FileName), err)}, nil
	}
	if parallel < 1 {
		parallel = DefaultParallel
	}
	res, err := Manifest(ctx, out, m, deep, parallel, nil)
	if err != nil || !res.OK {
		return res, err
	}
	// Only here, not in a run's own check: its claim emptied the prefixes.
	if res.Warnings, err = strayFiles(ctx, out, m); err != nil {
		return nil, err
	}
	return res, nil
}

type rgExpect struct {
	slices []int // manifest slice indices in order
	rows   []int64
}

// Manifest checks the output under out against its manifest m, as Output
// does (a run checks its output so before it commits m). prog, which may
// be nil, receives the rows checked.
func Manifest(ctx context.Context, out storage.Location, m *manifests.Manifest, deep bool, parallel int, prog Progress) (*Result, error) {
	return manifest(ctx, out, m, deep, parallel, prog, Prior{}, false, nil)
}

// ManifestEach is Manifest that also hands each file it read and found
// sound to each, as a table of that file alone, before closing it: what
// else needs the written files' footers (the run's report) reads them
// once. each is called from several goroutines, once per file.
func ManifestEach(ctx context.Context, out storage.Location, m *manifests.Manifest, deep bool, parallel int, prog Progress, each func(fi int, tbl *source.Table)) (*Result, error) {
	return manifest(ctx, out, m, deep, parallel, prog, Prior{}, false, each)
}

// Part checks the files of one partition (a reduce task's) against the
// manifest of that partition alone, as Manifest checks an output, without
// what only a whole output's manifest holds: the packing's column lists
// and item counts, and the tensor section.
func Part(ctx context.Context, out storage.Location, m *manifests.Manifest, parallel int) (*Result, error) {
	return manifest(ctx, out, m, false, parallel, nil, Prior{}, true, nil)
}

// Prior is what earlier checks found (their Result.Checked, or Shards'
// result): Files[i] for m.Files[i] and Shards[i] for m.Tensors.Shards[i];
// a nil list means none on record (those are read in full).
type Prior struct {
	Files  []Checked
	Shards []Checked
}

// ManifestChecked is Manifest for files and shards an earlier check
// already read (prior): it checks the manifest as Manifest does, and of
// each file or shard on record only that it is still the object checked
// (its size and ETag) and, for files, that keys do not decrease from the
// previous file; one rewritten since (another ETag) is read and checked in
// full, as is everything without a record.
func ManifestChecked(ctx context.Context, out storage.Location, m *manifests.Manifest, prior Prior, parallel int) (*Result, error) {
	if prior.Files != nil && len(prior.Files) != len(m.Files) {
		return &Result{Files: len(m.Files), Problem: fmt.Sprintf("%d checked files for the manifest's %d", len(prior.Files), len(m.Files))}, nil
	}
	return manifest(ctx, out, m, false, parallel, nil, prior, false, nil)
}

func manifest(ctx context.Context, out storage.Location, m *manifests.Manifest, deep bool, parallel int, prog Progress, prior Prior, part bool, each func(int, *source.Table)) (*Result, error) {
	checked := prior.Files
	if prog == nil {
		prog = nopProgress{}
	}
	res := &Result{Deep: deep, Files: len(m.Files)}
	fail := func(format string, a ...any) (*Result, error) {
		res.Problem = fmt.Sprintf(format, a...)
		return res, nil
	}
	// Manifest self-consistency.
	var rows int64
	expect := make([][]rgExpect, len(m.Files))
	for i, f := range m.Files {
		expect[i] = make([]rgExpect, len(f.RowGroups))
		var sum int64
		for _, g := range f.RowGroups {
			sum += g.Rows
		}
		if sum != f.Rows {
			return fail("manifest: %s: row groups hold %d rows, file says %d", f.Path, sum, f.Rows)
		}
		if f.FirstRow != rows {
			return fail("manifest: %s: first_row %d, want %d", f.Path, f.FirstRow, rows)
		}
		rows += f.Rows
	}
	flatRows := rows
	if m.Packing != nil {
		flatRows = m.Packing.Items
		if rows != m.Packing.Queries {
			return fail("manifest: files hold %d rows, packing says %d queries", rows, m.Packing.Queries)
		}
	}
	if rows != m.Totals.Rows || flatRows != m.Fingerprint.Rows {
		return fail("manifest: files hold %d rows, totals say %d, fingerprint %d", rows, m.Totals.Rows, m.Fingerprint.Rows)
	}
	var srows int64
	for si, s := range m.Slices {
		if s.FirstRow != srows {
			return fail("manifest: slice %d starts at row %d, want %d", si, s.FirstRow, srows)
		}
		var segRows int64
		for _, sg := range s.Segments {
			if sg.File < 0 || sg.File >= len(m.Files) || sg.RowGroup < 0 || sg.RowGroup >= len(m.Files[sg.File].RowGroups) {
				return fail("manifest: slice %d names a missing row group", si)
			}
			e := &expect[sg.File][sg.RowGroup]
			e.slices = append(e.slices, si)
			e.rows = append(e.rows, sg.Rows)
			segRows += sg.Rows
		}
		if segRows != s.Rows {
			return fail("manifest: slice %d has %d rows in segments, %d in total", si, segRows, s.Rows)
		}
		srows += s.Rows
	}
	if len(m.Slices) > 0 && srows != rows {
		return fail("manifest: slices hold %d rows, files %d", srows, rows)
	}
	if p := checkManifestFields(m); p != "" {
		return fail("manifest: %s", p)
	}
	if !part {
		if p := checkOutputFields(m); p != "" {
			return fail("manifest: %s", p)
		}
	}

	type fileResult struct {
		problem string
		fp      fingerprint.Sum
		first   []byte // first and last encoded key of the file
		last    []byte
		err     error
	}
	results := make([]fileResult, len(m.Files))
	fileWorkers := max(min(parallel, len(m.Files)), 1)
	colWorkers := max(parallel/fileWorkers, 1)
	if checked != nil {
		fileWorkers = max(min(16, len(m.Files)), 1) // a HEAD each: latency-bound
	}
	res.Checked = make([]Checked, len(m.Files))
	// A deep check of a packed output counts each slice's items from its
	// rows' lists.
	var items []int64
	if deep && m.Packing != nil && !part && len(m.SliceKeys) > 0 {
		items = make([]int64, len(m.Slices))
	}
	par.ForEach(ctx, len(m.Files), fileWorkers, func(i int) error {
		r := &results[i]
		if checked != nil {
			var same bool
			r.problem, r.first, r.last, same, r.err = confirmFile(ctx, out, m.Files[i], checked[i])
			if same || r.problem != "" || r.err != nil {
				res.Checked[i] = checked[i]
				return nil
			}
			// Rewritten since its check (a duplicated task, or damage):
			// read it again.
		}
		var etag string
		r.problem, r.fp, r.first, r.last, r.err = verifyFile(ctx, out, m, i, expect[i], deep, colWorkers, prog, &etag, part, items, each)
		res.Checked[i] = Checked{Path: m.Files[i].Path, ETag: etag, First: r.first, Last: r.last}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, errs.TransientErr(err)
	}
	var fp fingerprint.Sum
	var prevLast []byte
	for i, r := range results {
		if r.err != nil {
			return nil, r.err
		}
		if r.problem != "" {
			return fail("%s", r.problem)
		}
		if prevLast != nil && r.first != nil && bytes.Compare(prevLast, r.first) > 0 {
			return fail("%s: keys decrease from the previous file", out.URL(m.Files[i].Path))
		}
		if r.last != nil {
			prevLast = r.last
		}
		fp.Add(r.fp)
		res.Rows += m.Files[i].Rows
		res.Bytes += m.Files[i].Bytes
	}
	if deep {
		if fp.Rows != m.Fingerprint.Rows || fp.String() != m.Fingerprint.Hash {
			return fail("content fingerprint is %s over %d rows, manifest says %s over %d rows", fp.String(), fp.Rows, m.Fingerprint.Hash, m.Fingerprint.Rows)
		}
		for i, n := range items {
			if n != m.Slices[i].Items {
				return fail("slice %d holds %d items, manifest says %d", i, n, m.Slices[i].Items)
			}
		}
	}
	if m.Tensors != nil {
		if err := m.Tensors.Check(m.Slices); err != nil {
			return fail("%v", err)
		}
		problem, err := verifyShards(ctx, out, m, parallel, prior.Shards)
		if err != nil {
			return nil, err
		}
		if problem != "" {
			return fail("%s", problem)
		}
		res.Shards = len(m.Tensors.Shards)
		res.Bytes += m.Tensors.Totals.Bytes
		if deep {
			problem, skipped, err := rederiveShards(ctx, out, m, parallel)
			if err != nil {
				return nil, err
			}
			if problem != "" {
				return fail("%s", problem)
			}
			res.Rederived = !skipped
		}
	}
	res.OK = true
	return res, nil
}

// checkManifestFields checks the fields readers rely on against each other:
// totals, slice-key names, and each segment's byte range and rows against
// its row group's.
func checkManifestFields(m *manifests.Manifest) string {
	var rgs int
	var bytes int64
	for _, f := range m.Files {
		rgs += len(f.RowGroups)
		bytes += f.Bytes
		var first int64
		for g, rg := range f.RowGroups {
			if rg.FirstRow != first {
				return fmt.Sprintf("%s: row group %d: first_row %d, want %d", f.Path, g, rg.FirstRow, first)
			}
			first += rg.Rows
		}
	}
	if m.Totals.Files != len(m.Files) || m.Totals.RowGroups != rgs || m.Totals.Bytes != bytes || m.Totals.Slices != len(m.Slices) {
		return fmt.Sprintf("totals (%d files, %d row groups, %d bytes, %d slices) disagree with the lists (%d, %d, %d, %d)",
			m.Totals.Files, m.Totals.RowGroups, m.Totals.Bytes, m.Totals.Slices, len(m.Files), rgs, bytes, len(m.Slices))
	}
	for si, s := range m.Slices {
		if len(s.Key) != len(m.SliceKeys) {
			return fmt.Sprintf("slice %d has %d key values for %d slice keys", si, len(s.Key), len(m.SliceKeys))
		}
		for k, kv := range s.Key {
			if kv.Name != m.SliceKeys[k] {
				return fmt.Sprintf("slice %d: key %d is named %q, slice key %d is %q", si, k, kv.Name, k, m.SliceKeys[k])
			}
		}
		pos := s.FirstRow
		for j, sg := range s.Segments {
			f := m.Files[sg.File]
			rg := f.RowGroups[sg.RowGroup]
			if sg.Offset != rg.Offset || sg.Length != rg.Length {
				return fmt.Sprintf("slice %d segment %d: bytes [%d, +%d), its row group's are [%d, +%d)", si, j, sg.Offset, sg.Length, rg.Offset, rg.Length)
			}
			if sg.FirstRow < 0 || sg.Rows < 0 || sg.FirstRow+sg.Rows > rg.FirstRow+rg.Rows || sg.FirstRow < rg.FirstRow ||
				f.FirstRow+sg.FirstRow != pos {
				return fmt.Sprintf("slice %d segment %d: rows [%d, +%d) of %s do not continue the slice at row %d", si, j, sg.FirstRow, sg.Rows, f.Path, pos)
			}
			pos += sg.Rows
		}
	}
	return ""
}

// strayFiles lists the files under parquet/ and tensors/ that the manifest
// does not name (a reader of the manifest never sees them; a reader of the
// folder would).
func strayFiles(ctx context.Context, out storage.Location, m *manifests.Manifest) ([]string, error) {
	named := map[string]bool{}
	for _, f := range m.Files {
		named[f.Path] = true
	}
	if m.Tensors != nil {
		for _, s := range m.Tensors.Shards {
			named[s.Path] = true
		}
	}
	var stray []string
	for _, prefix := range []string{"parquet/", "tensors/"} {
		keys, err := storage.ListKeys(ctx, out, prefix)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if !named[k] {
				stray = append(stray, fmt.Sprintf("%s: not named by the manifest", out.URL(k)))
			}
		}
	}
	return stray, nil
}

// confirmFile checks that a file a check already read is still there with
// its size; same reports that it is the very object checked (its ETag:
// on S3 the content's MD5 for a single-part upload; on local disks
// modification time and size), which then needs no reading.
func confirmFile(ctx context.Context, out storage.Location, mf manifests.File, c Checked) (problem string, first, last []byte, same bool, err error) {
	if problem, same, err = confirmObject(ctx, out, mf.Path, mf.Bytes, c); !same {
		return problem, nil, nil, false, err
	}
	return "", c.First, c.Last, true, nil
}

// confirmObject reports whether the object at path is still the one an
// earlier check read (c: its path and ETag) and has the manifest's size;
// problem says what is wrong, and same is false (with no problem) for an
// object that must be read again.
func confirmObject(ctx context.Context, out storage.Location, path string, size int64, c Checked) (problem string, same bool, err error) {
	url := out.URL(path)
	if c.Path != path {
		return fmt.Sprintf("%s: the check on record names %q", url, c.Path), false, nil
	}
	etag, problem, err := statObject(ctx, out, path, size)
	if problem != "" || err != nil {
		return problem, false, err
	}
	return "", c.ETag != "" && etag == c.ETag, nil
}

// statObject returns the ETag of the object at path (one HEAD), with a
// problem, failing the check, when it is missing or, for size >= 0, has
// another size; an error only when the store cannot answer.
func statObject(ctx context.Context, out storage.Location, path string, size int64) (etag, problem string, err error) {
	url := out.URL(path)
	attrs, err := out.Bucket.Attributes(ctx, out.Key(path))
	if err != nil {
		err = storage.Classify(fmt.Errorf("stat %s: %w", url, err))
		if errs.Is(err, errs.BadInput) {
			return "", fmt.Sprintf("%s: missing", url), nil
		}
		return "", "", err
	}
	if size >= 0 && attrs.Size != size {
		return attrs.ETag, fmt.Sprintf("%s: %d bytes, manifest says %d", url, attrs.Size, size), nil
	}
	return attrs.ETag, "", nil
}

// verifyFile checks file fi against the manifest; etag receives the
// object's ETag as it was when the check began.
func verifyFile(ctx context.Context, out storage.Location, m *manifests.Manifest, fi int, expect []rgExpect, deep bool, parallel int, prog Progress, etag *string, part bool, items []int64, each func(int, *source.Table)) (problem string, fp fingerprint.Sum, first, last []byte, err error) {
	mf := m.Files[fi]
	url := out.URL(mf.Path)
	if *etag, problem, err = statObject(ctx, out, mf.Path, mf.Bytes); problem != "" || err != nil {
		return problem, fp, nil, nil, err
	}
	// A small object in a store is read once, whole: hashed, then read
	// as a table from memory. Hashed as a stream and then opened, each
	// file of a 1,200-folder output cost a GET more (the footer's).
	h := xxhash.New()
	var data []byte
	// (A ReaderAt fetches an object of TailBytes or less whole anyway.)
	if out.Local == "" && mf.Bytes <= storage.TailBytes {
		if data, err = storage.Get(ctx, out, mf.Path); err == nil {
			h.Write(data)
		}
	} else {
		_, err = storage.HashObject(ctx, out, mf.Path, h)
	}
	if err != nil {
		if storage.IsNotFound(err) {
			return fmt.Sprintf("%s: missing", url), fp, nil, nil, nil
		}
		return "", fp, nil, nil, err
	}
	if got := fmt.Sprintf("%016x", h.Sum64()); got != mf.XXHash64 {
		return fmt.Sprintf("%s: xxhash64 is %s, manifest says %s (the file was changed or damaged%s)", url, got, mf.XXHash64, damagedPage(ctx, out, mf)), fp, nil, nil, nil
	}
	var tbl *source.Table
	if data != nil {
		tbl, err = source.OpenOutputFile(ctx, out, m, fi, data)
	} else {
		tbl, err = source.OpenOutput(ctx, out, m, []int{fi}, nil)
	}
	if err != nil {
		return fmt.Sprintf("%s: %v", url, err), fp, nil, nil, nil
	}
	defer tbl.Close()
	f := tbl.Files[0]
	if f.Rows != mf.Rows || len(f.RowGroupRows) != len(mf.RowGroups) {
		return fmt.Sprintf("%s: footer has %d rows in %d row groups, manifest says %d in %d", url, f.Rows, len(f.RowGroupRows), mf.Rows, len(mf.RowGroups)), fp, nil, nil, nil
	}
	keyCols := make([]int, 0)
	for _, k := range append(append([]string{}, m.SliceKeys...), m.SortKeys...) {
		c, err := tbl.FieldIndex(k)
		if err != nil {
			return fmt.Sprintf("%s: %v", url, err), fp, nil, nil, nil
		}
		keyCols = append(keyCols, c)
	}
	nSlice := len(m.SliceKeys)
	md, err := f.Metadata()
	if err != nil {
		return "", fp, nil, nil, err
	}
	for g, mg := range mf.RowGroups {
		if f.RowGroupRows[g] != mg.Rows {
			return fmt.Sprintf("%s: row group %d has %d rows, manifest says %d", url, g, f.RowGroupRows[g], mg.Rows), fp, nil, nil, nil
		}
		off, n, err := writer.RowGroupSpan(md.RowGroup(g))
		if err != nil {
			return fmt.Sprintf("%s: row group %d: %v", url, g, err), fp, nil, nil, nil
		}
		if off != mg.Offset || n != mg.Length {
			return fmt.Sprintf("%s: row group %d spans bytes [%d, +%d), manifest says [%d, +%d)", url, g, off, n, mg.Offset, mg.Length), fp, nil, nil, nil
		}
	}
	if len(m.Schema) != tbl.Schema.NumFields() {
		return fmt.Sprintf("%s: %d columns, the manifest's schema has %d", url, tbl.Schema.NumFields(), len(m.Schema)), fp, nil, nil, nil
	}
	for i, c := range m.Schema {
		f := tbl.Schema.Field(i)
		if f.Name != c.Name {
			return fmt.Sprintf("%s: column %d is %q, the manifest's schema says %q", url, i, f.Name, c.Name), fp, nil, nil, nil
		}
		if sameType(f.Type.String()) != sameType(c.Type) || f.Nullable != c.Nullable {
			return fmt.Sprintf("%s: column %q is %s (nullable %v), the manifest's schema says %s (nullable %v)", url, c.Name, f.Type, f.Nullable, c.Type, c.Nullable), fp, nil, nil, nil
		}
	}
	if p := checkSorting(md, m); p != "" {
		return fmt.Sprintf("%s: %s", url, p), fp, nil, nil, nil
	}
	if m.Packing != nil && !part {
		if p := checkPackedItems(tbl.Schema, m.Packing); p != "" {
			return fmt.Sprintf("%s: %s", url, p), fp, nil, nil, nil
		}
	}
	// Row groups are checked in parallel; key order across their
	// boundaries is checked afterwards.
	type rgResult struct {
		problem     string
		fp          fingerprint.Sum
		first, last []byte
		err         error
	}
	results := make([]rgResult, len(mf.RowGroups))
	par.ForEach(ctx, len(mf.RowGroups), parallel, func(g int) error {
		r := &results[g]
		r.problem, r.fp, r.first, r.last = verifyRowGroup(ctx, tbl, url, m, g, expect[g], keyCols, nSlice, deep, md, items)
		prog.Add(mf.RowGroups[g].Rows)
		return nil
	})
	if err := ctx.Err(); err != nil {
		return "", fp, nil, nil, errs.TransientErr(err)
	}
	var prev []byte
	for g, r := range results {
		if r.problem != "" {
			return r.problem, fp, nil, nil, nil
		}
		fp.Add(r.fp)
		if r.first == nil {
			continue
		}
		if prev != nil && bytes.Compare(prev, r.first) > 0 {
			return fmt.Sprintf("%s: keys decrease between row groups %d and %d", url, g-1, g), fp, nil, nil, nil
		}
		if first == nil {
			first = r.first
		}
		prev = r.last
	}
	if each != nil {
		each(fi, tbl)
	}
	return "", fp, first, prev, nil
}

// verifyRowGroup checks one row group: its content fingerprint (deep), key
// order, its runs of slice keys against the manifest, and key statistics.
func verifyRowGroup(ctx context.Context, tbl *source.Table, url string, m *manifests.Manifest, g int, exp rgExpect, keyCols []int, nSlice int, deep bool, md *metadata.FileMetaData, items []int64) (problem string, fp fingerprint.Sum, first, last []byte) {
	ref := source.RowGroupRef{File: tbl.Files[0], RowGroup: g}
	var keys []arrow.Array
	var lists array.ListLike // a packed row group's items, counted per slice (deep)
	if deep {
		rec, err := tbl.Read(ctx, ref, nil, 1)
		if err != nil {
			return fmt.Sprintf("%v", err), fp, nil, nil
		}
		defer rec.Release()
		flat := rec
		if m.Packing != nil {
			l, err := dedupe.LayoutFromPacked(rec.Schema(), m.Packing.FlatColumns, m.Packing.QueryKey)
			if err != nil {
				return fmt.Sprintf("%s: %v", url, err), fp, nil, nil
			}
			if flat, err = dedupe.Unpack(ctx, l, rec); err != nil {
				return fmt.Sprintf("%s: row group %d: %v", url, g, err), fp, nil, nil
			}
			defer flat.Release()
		}
		s, err := fingerprint.Record(flat)
		if err != nil {
			return fmt.Sprintf("%s: %v", url, err), fp, nil, nil
		}
		fp = s
		for _, c := range keyCols {
			keys = append(keys, rec.Column(c))
		}
		if items != nil { // Hive folder keys may follow the items column
			if idx := rec.Schema().FieldIndices(dedupe.ItemsColumn); len(idx) == 1 {
				lists, _ = rec.Column(idx[0]).(array.ListLike)
			}
			if lists == nil {
				return fmt.Sprintf("%s: row group %d: no list column %q", url, g, dedupe.ItemsColumn), fp, nil, nil
			}
		}
	} else if len(keyCols) > 0 {
		rec, err := tbl.Read(ctx, ref, keyCols, 1)
		if err != nil {
			return fmt.Sprintf("%v", err), fp, nil, nil
		}
		defer rec.Release()
		keys = rec.Columns()
	}
	if len(keyCols) == 0 {
		return "", fp, nil, nil
	}
	// Walk runs of equal slice keys; compare with the manifest.
	run := -1
	var runRows, runItems int64
	var cur, prev, curSlice, prevSlice []byte
	checkRun := func(i int) string {
		if run < 0 {
			return ""
		}
		if run >= len(exp.slices) {
			return fmt.Sprintf("%s: row group %d holds more slices than the manifest says", url, g)
		}
		if runRows != exp.rows[run] {
			return fmt.Sprintf("%s: row group %d: slice %d has %d rows here, manifest says %d", url, g, exp.slices[run], runRows, exp.rows[run])
		}
		if lists != nil {
			atomic.AddInt64(&items[exp.slices[run]], runItems)
		}
		want := m.Slices[exp.slices[run]].Key
		for c := 0; c < nSlice; c++ {
			gotJ, _ := json.Marshal(partition.Value(keys[c], i))
			wantJ, _ := json.Marshal(want[c].Value)
			if string(wantJ) == "-0" { // a manifest written before -0 was named as 0, its slice's
				wantJ = []byte("0")
			}
			if !bytes.Equal(gotJ, wantJ) {
				return fmt.Sprintf("%s: row group %d: key %s is %s, manifest says %s", url, g, m.SliceKeys[c], gotJ, wantJ)
			}
		}
		return ""
	}
	n := keys[0].Len()
	for i := 0; i < n; i++ {
		cur = cur[:0]
		for c := range keyCols {
			cur = partition.AppendKey(cur, keys[c], i)
			if c == nSlice-1 {
				curSlice = append(curSlice[:0], cur...)
			}
		}
		if prev != nil && bytes.Compare(prev, cur) > 0 {
			return fmt.Sprintf("%s: row group %d row %d: keys decrease", url, g, i), fp, nil, nil
		}
		if first == nil {
			first = bytes.Clone(cur)
		}
		if run < 0 || !bytes.Equal(prevSlice, curSlice) {
			if p := checkRun(i - 1); p != "" {
				return p, fp, nil, nil
			}
			run++
			runRows, runItems = 0, 0
		}
		runRows++
		if lists != nil {
			start, end := lists.ValueOffsets(i)
			runItems += end - start
		}
		prev = append(prev[:0], cur...)
		prevSlice = append(prevSlice[:0], curSlice...)
	}
	if p := checkRun(n - 1); p != "" {
		return p, fp, nil, nil
	}
	if n > 0 && run+1 != len(exp.slices) {
		return fmt.Sprintf("%s: row group %d holds %d slices, manifest says %d", url, g, run+1, len(exp.slices)), fp, nil, nil
	}
	// Statistics of the slice keys.
	rgmd := md.RowGroup(g)
	for c := 0; c < nSlice; c++ {
		idx := md.Schema.ColumnIndexByName(m.SliceKeys[c])
		if idx < 0 {
			continue
		}
		cc, err := rgmd.ColumnChunk(idx)
		if err != nil {
			return fmt.Sprintf("%s: row group %d: %v", url, g, err), fp, nil, nil
		}
		st, err := cc.Statistics()
		if err != nil || st == nil {
			return fmt.Sprintf("%s: row group %d: no statistics for %s", url, g, m.SliceKeys[c]), fp, nil, nil
		}
		if st.HasMinMax() && len(exp.slices) == 1 && !bytes.Equal(st.EncodeMin(), st.EncodeMax()) {
			return fmt.Sprintf("%s: row group %d holds one slice but %s statistics have min != max", url, g, m.SliceKeys[c]), fp, nil, nil
		}
	}
	if prev != nil {
		last = bytes.Clone(prev)
	}
	return "", fp, first, last
}

// Progress receives the rows checked (the command line's progress bar).
type Progress interface {
	Add(n int64)
}

type nopProgress struct{}

func (nopProgress) Add(int64) {}

// damagedPage says where a file whose hash changed is damaged, when its
// page CRC32s tell (relayout writes one in every page header): ": row
// group R, column C, page P does not match its CRC32", or "" when no
// page's CRC disagrees (the damage is in a header, the page index or the footer,
// or the file was replaced).
func damagedPage(ctx context.Context, out storage.Location, mf manifests.File) string {
	obj := storage.Object{Loc: out, Key: out.Key(mf.Path), URL: out.URL(mf.Path), Size: mf.Bytes}
	if out.Local != "" {
		obj.LocalPath = out.Local + "/" + mf.Path
	}
	_, err := source.CheckPages(ctx, obj)
	var pe *source.PageCRCError
	if !errors.As(err, &pe) {
		return ""
	}
	return ": " + pe.Where() + " does not match its CRC32"
}

// listField matches a list type's element name in an Arrow type string.
var listField = regexp.MustCompile(`(^|[<, ])((?:large_)?list|fixed_size_list)<[A-Za-z0-9_]+: `)

// sameType is an Arrow type string with list element names left out:
// writers name them differently (item, element, key) and Parquet readers
// give back their own; the types are the same.
func sameType(t string) string {
	return listField.ReplaceAllString(t, "$1$2<: ")
}
