package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/dataset"
	"github.com/relayout/relayout/hive"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/version"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/partition"
	"github.com/relayout/relayout/source"
	"github.com/relayout/relayout/storage"
	"github.com/relayout/relayout/verify"
	"github.com/relayout/relayout/writer"
)

// DatasetResult is what a dataset run did.
type DatasetResult struct {
	// Generation is the committed generation (the current one, unchanged,
	// when Unchanged is set: nothing new to lay out).
	Generation *dataset.Generation `json:"generation"`
	Unchanged  bool                `json:"unchanged"`
	// DryRun is set when nothing was written: Generation is what the run
	// would commit.
	DryRun bool `json:"dry_run"`
	// PartsOnly is set for a --part run: it wrote its parts and committed
	// no generation (Generation is what a commit would list).
	PartsOnly bool `json:"parts_only"`
	// ToWrite lists the folders of the parts the run writes (new and
	// changed): a distributed job's --part tasks.
	ToWrite []string `json:"to_write"`
	// Seconds is the wall time.
	Seconds float64 `json:"seconds"`
}

// dsFile is one input file of a dataset run and its partition.
type dsFile struct {
	obj    storage.Object
	in     dataset.Input
	key    []byte // the partition value, key-encoded (the parts' order)
	value  any
	hashed bool // its bytes were read to hash them
}

// dsPart is one partition: its files and what becomes of it.
type dsPart struct {
	folder string
	key    []byte
	value  any
	files  []*dsFile
	part   dataset.Part
	state  string // new, changed, reused
}

// RunDataset updates a dataset root (opts.Dataset): every value of the
// partition key (opts.PartitionBy, the leading slice key) is a part laid
// out as its own output; parts whose inputs and config are unchanged since
// the current generation are reused, the others written, and generation
// N+1 is committed last (docs/datasets.md). With DryRun nothing is
// written: the result says what the run would do.
func RunDataset(ctx context.Context, opts RunOptions, dryRun bool) (*DatasetResult, error) {
	t0 := time.Now()
	o, err := opts.datasetDefaults()
	if err != nil {
		return nil, err
	}
	root, err := storage.OpenDir(ctx, o.Dataset, !dryRun)
	if err != nil {
		return nil, err
	}
	for _, in := range o.Inputs {
		if err := checkOverlap(root, in); err != nil {
			return nil, err
		}
	}
	var only map[string]bool // --part: write these parts only, commit nothing
	if len(o.Parts) > 0 {
		only = map[string]bool{}
		for _, f := range o.Parts {
			only[f] = true
		}
	}
	if !dryRun && only == nil {
		lease, err := acquireRoot(ctx, root, "run --dataset")
		if err != nil {
			return nil, err
		}
		defer lease.Release(context.WithoutCancel(ctx))
	}
	prev, err := dataset.Current(ctx, root)
	if err != nil {
		return nil, err
	}
	parts, spec, err := datasetParts(ctx, o, prev)
	if err != nil {
		return nil, err
	}
	// The config every part is laid out with.
	partOpts := o
	partOpts.Dataset, partOpts.Output = "", o.Dataset // each part sets its own
	partOpts.HivePartitioning, partOpts.HiveTypes, partOpts.hive = string(hive.Off), "", spec
	if spec != "" {
		partOpts.HivePartitioning, partOpts.HiveTypes = string(hive.On), spec
	}
	if partOpts, err = partOpts.withDefaults(); err != nil {
		return nil, err
	}
	tr, err := newTensorRun(partOpts)
	if err != nil {
		return nil, err
	}
	cfg, cfgHash := configOf(partOpts, tr)

	g := &dataset.Generation{
		Format: dataset.Format, FormatVersion: dataset.FormatVersion, RelayoutVersion: version.Version,
		Generation: 1, PartitionBy: o.PartitionBy, Config: cfg, ConfigHash: cfgHash,
		Parts: []dataset.Part{}, Inputs: []dataset.Input{},
	}
	g.Changes = dataset.Changes{New: []string{}, Changed: []string{}, Reused: []string{}, Dropped: []string{}}
	prevParts := map[string]dataset.Part{}
	if prev != nil {
		g.Generation, g.Parent = prev.Generation+1, prev.Generation
		for _, p := range prev.Parts {
			prevParts[p.Folder] = p
		}
	}
	wanted := map[string]bool{}
	for _, p := range parts {
		wanted[p.folder] = true
		for _, f := range p.files {
			g.Changes.FullInputBytes += f.in.Bytes
		}
	}
	if prev != nil {
		for _, p := range prev.Parts {
			if !wanted[p.Folder] {
				g.Changes.Dropped = append(g.Changes.Dropped, p.Folder)
			}
		}
	}
	written := 0
	for _, p := range parts {
		inputs := make([]dataset.Input, len(p.files))
		for i, f := range p.files {
			if err := hashInput(ctx, f); err != nil {
				return nil, err
			}
			inputs[i] = f.in
		}
		id := dataset.PartID(cfgHash, inputs)
		path := dataset.PartPath(p.folder, id)
		old, had := prevParts[p.folder]
		switch {
		case had && old.Path == path:
			p.part, p.state = old, "reused"
			g.Changes.Reused = append(g.Changes.Reused, p.folder)
		case had:
			p.state = "changed"
			g.Changes.Changed = append(g.Changes.Changed, p.folder)
		default:
			p.state = "new"
			g.Changes.New = append(g.Changes.New, p.folder)
		}
		if p.state != "reused" {
			p.part = dataset.Part{Value: p.value, Folder: p.folder, ID: id, Path: path, WrittenIn: g.Generation}
			for _, f := range p.files {
				p.part.Inputs = append(p.part.Inputs, f.in.Path)
				g.Changes.InputBytesRead += f.in.Bytes
			}
		}
		if p.state != "reused" && !dryRun && (only == nil || only[p.folder]) {
			adopted, err := writePart(ctx, root, o.Dataset, partOpts, p, cfgHash)
			if err != nil {
				return nil, err
			}
			if !adopted {
				g.Changes.BytesWritten += p.part.Bytes
			}
			written++
		}
		g.Parts = append(g.Parts, p.part)
		g.Inputs = append(g.Inputs, inputs...)
		g.Totals.Parts++
		g.Totals.Rows += p.part.Rows
		g.Totals.Bytes += p.part.Bytes
		g.Totals.Files += p.part.Files
	}
	// Read: the inputs of the parts laid out, and the other files whose
	// bytes were hashed to tell whether they changed.
	for _, p := range parts {
		if p.state == "reused" {
			for _, f := range p.files {
				if f.hashed {
					g.Changes.InputBytesRead += f.in.Bytes
				}
			}
		}
	}
	res := &DatasetResult{Generation: g, DryRun: dryRun, PartsOnly: only != nil,
		ToWrite: append(append([]string{}, g.Changes.New...), g.Changes.Changed...)}
	if only != nil {
		for f := range only {
			found := false
			for _, p := range parts {
				found = found || p.folder == f
			}
			if !found {
				return nil, errs.Usagef("--part %s: no such partition in the inputs' window (the dry run lists them)", f)
			}
		}
		res.Seconds = time.Since(t0).Seconds()
		return res, nil // the parts are committed; a plain run --dataset commits the generation
	}
	if prev != nil && written == 0 && len(g.Changes.Dropped) == 0 && len(g.Parts) == len(prev.Parts) && prev.ConfigHash == cfgHash {
		res.Generation, res.Unchanged = prev, true
		res.Generation.Changes = g.Changes
		res.ToWrite = []string{}
		res.Seconds = time.Since(t0).Seconds()
		return res, nil
	}
	if !dryRun {
		if err := dataset.Commit(ctx, root, g); err != nil {
			return nil, err
		}
		o.Log.Info("committed", "generation", g.Generation, "parts", len(g.Parts), "new", len(g.Changes.New),
			"changed", len(g.Changes.Changed), "reused", len(g.Changes.Reused), "dropped", len(g.Changes.Dropped))
	}
	res.Seconds = time.Since(t0).Seconds()
	return res, nil
}

// datasetDefaults checks the dataset options: the partition key is the
// leading slice key.
func (o RunOptions) datasetDefaults() (RunOptions, error) {
	if o.Output != "" {
		return o, errs.Usagef("--dataset and --output exclude each other: a dataset's parts go under its root")
	}
	keys := SplitList(o.SliceKeys)
	if o.PartitionBy == "" {
		if len(keys) == 0 {
			return o, errs.Usagef("--dataset needs --partition-by (the leading slice key, e.g. date)")
		}
		o.PartitionBy = keys[0]
	}
	if len(keys) == 0 {
		keys = []string{o.PartitionBy}
	}
	if keys[0] != o.PartitionBy {
		return o, errs.Usagef("--partition-by %s must be the leading slice key (--slice-keys %s)", o.PartitionBy, strings.Join(keys, ","))
	}
	o.SliceKeys = keys
	if o.KeepPartitions < 0 {
		return o, errs.Usagef("--keep-partitions must be positive (got %d)", o.KeepPartitions)
	}
	if o.OutputPartitioning == "hive" {
		return o, errs.Usagef("--output-partitioning hive with --dataset: parts already lie in partition folders")
	}
	o.Output = "-" // checked by withDefaults; each part sets its own
	v, err := o.withDefaults()
	v.Output = ""
	// A part's id hashes the config it is laid out with, fixed before any
	// part runs: its row groups are not lowered to fit the memory limit.
	v.autoRowGroupBytes, v.autoMinRowGroupBytes, v.autoFileBytes = false, false, false
	return v, err
}

// SplitList splits comma-separated entries ("country,date") into their
// trimmed, non-empty items, in order: how flags, the YAML config and the
// library read lists of names.
func SplitList(ks []string) []string {
	var out []string
	for _, k := range ks {
		for _, p := range strings.Split(k, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// acquireRoot takes the dataset root's lease: one run or gc at a time. A
// live holder is exit 5 (the dataset is being updated), not a retry.
func acquireRoot(ctx context.Context, root storage.Location, command string) (*storage.Lease, error) {
	lease, _, err := storage.AcquireLease(ctx, root, command, leaseTTL)
	if err != nil && errs.Is(err, errs.Transient) {
		if li, e := storage.ReadLease(ctx, root); e == nil && !li.Stale(time.Now()) {
			return nil, errs.Preconditionf("let that run finish; its generation is then current", "dataset %s is being updated by %s", root.Name, li)
		}
	}
	return lease, err
}

// datasetParts lists the inputs, finds each file's partition (from its
// folder, or by reading the key column of new and changed files: every
// file must hold one value), applies the window and returns the wanted
// parts in key order.
func datasetParts(ctx context.Context, o RunOptions, prev *dataset.Generation) (parts []*dsPart, spec string, err error) {
	objs, err := storage.List(ctx, o.Inputs)
	if err != nil {
		return nil, "", err
	}
	tbl, err := openObjects(ctx, objs, nil, o.HivePartitioning, o.HiveTypes, o.MemoryLimit)
	if err != nil {
		return nil, "", err
	}
	defer tbl.Close()
	spec = tbl.Partitioning().Spec()
	col, err := tbl.FieldIndex(o.PartitionBy)
	if err != nil {
		return nil, "", errs.WithHint(err, "--partition-by names a column of the input (or a key=value folder)")
	}
	typ := tbl.Schema.Field(col).Type
	if !writer.HiveKeyType(typ) {
		return nil, "", errs.Usagef("--partition-by %s is %s: a partition key must be a string, integer, date or boolean column", o.PartitionBy, typ)
	}
	known := map[string]dataset.Input{}
	if prev != nil {
		for _, in := range prev.Inputs {
			known[in.Path] = in
		}
	}
	byFolder := map[string]*dsPart{}
	for _, f := range tbl.Files {
		df := &dsFile{obj: f.Obj, in: dataset.Input{Path: f.Obj.URL, Bytes: f.Obj.Size, ETag: f.Obj.ETag, MTime: f.Obj.MTime}}
		if k, ok := known[df.in.Path]; ok && f.Obj.SameVersion(k.Bytes, k.ETag, k.MTime) {
			df.in.XXHash64, df.in.Folder = k.XXHash64, k.Folder
		} else if k, ok := known[df.in.Path]; ok && k.Bytes == df.in.Bytes {
			// Same size, other mtime or ETag: the content decides.
			if err := hashInput(ctx, df); err != nil {
				return nil, "", err
			}
			if df.in.XXHash64 == k.XXHash64 {
				df.in.Folder = k.Folder
			}
		}
		if df.in.Folder == "" {
			if f.Rows == 0 {
				continue // no rows: in no partition
			}
			if df.in.Folder, err = fileFolder(ctx, f, col, o.PartitionBy); err != nil {
				return nil, "", err
			}
		}
		if df.key, df.value, err = folderKey(df.in.Folder, typ); err != nil {
			return nil, "", err
		}
		p := byFolder[df.in.Folder]
		if p == nil {
			p = &dsPart{folder: df.in.Folder, key: df.key, value: df.value}
			byFolder[df.in.Folder] = p
		}
		p.files = append(p.files, df)
	}
	for _, p := range byFolder {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return bytes.Compare(parts[i].key, parts[j].key) < 0 })
	if parts, err = window(parts, o, typ); err != nil {
		return nil, "", err
	}
	return parts, spec, nil
}

// fileFolder reads a file's partition column and returns the folder of
// its one value; a file holding several is an error naming it.
func fileFolder(ctx context.Context, f *source.File, col int, key string) (string, error) {
	var first *string
	var firstKey []byte
	for rg := range f.RowGroupRows {
		a, err := f.ReadColumn(ctx, rg, col)
		if err != nil {
			return "", err
		}
		for i := 0; i < a.Len(); i++ {
			k := partition.AppendKey(nil, a, i)
			if firstKey == nil {
				firstKey, first = k, writer.FolderValue(a, i)
				continue
			}
			if !bytes.Equal(k, firstKey) {
				v := writer.FolderValue(a, i)
				a.Release()
				return "", errs.WithHint(errs.BadInputf("input %s holds several values of --partition-by %s (%s and %s): a dataset part is one value",
					f.Obj.URL, key, strOr(first), strOr(v)), "write the inputs one partition per file (Hive folders: key=value/), or partition by another key")
			}
		}
		a.Release()
	}
	return hive.Path([]string{key}, []*string{first})
}

func strOr(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// folderKey reads a folder name (key=value) back as a typed value: its
// key encoding (the parts' order) and manifest value.
func folderKey(folder string, typ arrow.DataType) ([]byte, any, error) {
	segs := hive.Segments(folder + "/x")
	if len(segs) != 1 {
		return nil, nil, fmt.Errorf("bad partition folder %q", folder)
	}
	var v *string
	if !segs[0].Null {
		v = &segs[0].Value
	}
	t := typ
	if d, ok := t.(*arrow.DictionaryType); ok {
		t = d.ValueType
	}
	a, err := hive.Constant(memory.DefaultAllocator, t, v, 1)
	if err != nil {
		return nil, nil, errs.BadInputf("partition folder %s is not a %s: %v", folder, t, err)
	}
	defer a.Release()
	return partition.AppendKey(nil, a, 0), partition.Value(a, 0), nil
}

var whereRE = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(>=|<=|==|=|!=|>|<)\s*'?(.*?)'?\s*$`)

// window keeps the parts --where and --keep-partitions select.
func window(parts []*dsPart, o RunOptions, typ arrow.DataType) ([]*dsPart, error) {
	if o.Where != "" {
		m := whereRE.FindStringSubmatch(o.Where)
		if m == nil || m[1] != o.PartitionBy {
			return nil, errs.Usagef("--where %q: want \"%s OP VALUE\" with OP one of = != < <= > >= (a filter on the partition key)", o.Where, o.PartitionBy)
		}
		v := m[3]
		bound, _, err := folderKey(hive.Escape(o.PartitionBy)+"="+hive.Escape(v), typ)
		if err != nil {
			return nil, errs.Usagef("--where %q: %q is not a %s", o.Where, v, typ)
		}
		keep := map[string]func(int) bool{
			"=": func(c int) bool { return c == 0 }, "==": func(c int) bool { return c == 0 }, "!=": func(c int) bool { return c != 0 },
			"<": func(c int) bool { return c < 0 }, "<=": func(c int) bool { return c <= 0 },
			">": func(c int) bool { return c > 0 }, ">=": func(c int) bool { return c >= 0 },
		}[m[2]]
		var kept []*dsPart
		for _, p := range parts {
			if keep(bytes.Compare(p.key, bound)) {
				kept = append(kept, p)
			}
		}
		parts = kept
	}
	if o.KeepPartitions > 0 && len(parts) > o.KeepPartitions {
		parts = parts[len(parts)-o.KeepPartitions:]
	}
	return parts, nil
}

// hashInput fills a file's content hash (xxhash64 of its bytes) unless
// known.
func hashInput(ctx context.Context, f *dsFile) error {
	if f.in.XXHash64 != "" {
		return nil
	}
	h := xxhash.New()
	if f.obj.LocalPath != "" {
		fh, err := os.Open(f.obj.LocalPath)
		if err != nil {
			return storage.Classify(fmt.Errorf("read %s: %w", f.obj.URL, err))
		}
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return storage.Classify(fmt.Errorf("read %s: %w", f.obj.URL, err))
		}
	} else {
		loc := f.obj.Loc
		rel := strings.TrimPrefix(f.obj.Key, loc.Prefix)
		if _, err := storage.HashObject(ctx, loc, rel, h); err != nil {
			return err
		}
	}
	f.in.XXHash64, f.hashed = fmt.Sprintf("%016x", h.Sum64()), true
	return nil
}

// writePart lays one part out, or adopts a committed one at the same path
// (same id: same inputs and config, so the same bytes), written by a --part
// task or by a run that died before its commit; it fills the part's record.
func writePart(ctx context.Context, root storage.Location, rootURL string, o RunOptions, p *dsPart, cfgHash string) (adopted bool, err error) {
	partURL := joinURL(rootURL, p.part.Path)
	loc, err := storage.OpenDir(ctx, partURL, true)
	if err != nil {
		return false, err
	}
	m, err := readCommitted(ctx, loc)
	if err != nil {
		return false, err
	}
	adopted = m != nil && m.ConfigHash == cfgHash
	if !adopted {
		if m != nil {
			o.Overwrite = true // same id, other config: cannot happen unless tampered with
		}
		o.Output = partURL
		o.objects = nil
		for _, f := range p.files {
			o.objects = append(o.objects, f.obj)
		}
		res, err := Run(ctx, o)
		if err != nil {
			return false, fmt.Errorf("part %s: %w", p.folder, err)
		}
		m = res.Manifest
	}
	p.part.Rows, p.part.Files, p.part.Fingerprint = m.Totals.Rows, len(m.Files), m.Fingerprint
	for _, f := range m.Files {
		p.part.Bytes += f.Bytes
	}
	if p.part.ManifestXXHash64, err = manifestXXHash(ctx, loc); err != nil {
		return false, err
	}
	return adopted, nil
}

// manifestXXHash is the xxhash64 of an output's manifest.json: what a
// generation pins each part by.
func manifestXXHash(ctx context.Context, loc storage.Location) (string, error) {
	h := xxhash.New()
	if _, err := storage.HashObject(ctx, loc, manifests.FileName, h); err != nil {
		return "", err
	}
	return fmt.Sprintf("%016x", h.Sum64()), nil
}

// readCommitted reads an output's manifest (nil: none).
func readCommitted(ctx context.Context, loc storage.Location) (*manifests.Manifest, error) {
	data, err := storage.Get(ctx, loc, manifests.FileName)
	if storage.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := manifests.Decode(data)
	if err != nil {
		return nil, errs.BadInputf("%s: %v", loc.URL(manifests.FileName), err)
	}
	return m, nil
}

// joinURL appends a relative path to a folder or URL, keeping the URL's
// query parameters (endpoint, region) at the end.
func joinURL(base, rel string) string {
	b, q, _ := strings.Cut(base, "?")
	out := strings.TrimSuffix(b, "/") + "/" + rel
	if q != "" {
		out += "?" + q
	}
	return out
}

// DatasetOpen returns a dataset root's generation n (0: current) and the
// root's location.
func DatasetOpen(ctx context.Context, rootURL string, n int) (*dataset.Generation, storage.Location, error) {
	root, err := storage.OpenDir(ctx, rootURL, false)
	if err != nil {
		return nil, root, err
	}
	g, err := dataset.Open(ctx, root, n)
	return g, root, err
}

// DatasetFiles returns the URLs of a generation's Parquet files, in part
// order: what Spark, DuckDB or Trino read to read exactly that generation.
func DatasetFiles(ctx context.Context, rootURL string, n int) ([]string, error) {
	g, root, err := DatasetOpen(ctx, rootURL, n)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range g.Parts {
		ploc, err := storage.OpenDir(ctx, joinURL(rootURL, p.Path), false)
		if err != nil {
			return nil, err
		}
		m, err := readCommitted(ctx, ploc)
		if err != nil {
			return nil, err
		}
		if m == nil {
			return nil, errs.BadInputf("%s: generation %d lists part %s, which has no manifest", root.URL(""), g.Generation, p.Path)
		}
		for _, f := range m.Files {
			out = append(out, ploc.URL(f.Path))
		}
	}
	return out, nil
}

// VerifyDataset verifies every part of generation n (0: current): its
// manifest is the one the generation pinned and its output verifies.
func VerifyDataset(ctx context.Context, rootURL string, n int, deep bool, parallel int) (*verify.Result, error) {
	g, _, err := DatasetOpen(ctx, rootURL, n)
	if err != nil {
		return nil, err
	}
	total := &verify.Result{OK: true, Deep: deep}
	for _, p := range g.Parts {
		ploc, err := storage.OpenDir(ctx, joinURL(rootURL, p.Path), false)
		if err != nil {
			return nil, err
		}
		got, err := manifestXXHash(ctx, ploc)
		if err != nil {
			if storage.IsNotFound(err) {
				total.OK, total.Problem = false, fmt.Sprintf("generation %d: part %s is missing", g.Generation, p.Path)
				return total, nil
			}
			return nil, err
		}
		if got != p.ManifestXXHash64 {
			total.OK, total.Problem = false, fmt.Sprintf("generation %d: %s/manifest.json is %s, the generation pinned %s", g.Generation, p.Path, got, p.ManifestXXHash64)
			return total, nil
		}
		r, err := verify.Output(ctx, joinURL(rootURL, p.Path), deep, parallel)
		if err != nil {
			return nil, err
		}
		if !r.OK {
			r.Problem = p.Path + ": " + r.Problem
			return r, nil
		}
		total.Files += r.Files
		total.Rows += r.Rows
		total.Bytes += r.Bytes
		total.Shards += r.Shards
	}
	return total, nil
}

// GCResult is what gc removed.
type GCResult struct {
	KeptGenerations    []int    `json:"kept_generations"`
	RemovedGenerations []int    `json:"removed_generations"`
	RemovedParts       []string `json:"removed_parts"`
	KeptParts          int      `json:"kept_parts"`
}

// GCDataset keeps the newest keep generations and removes the others and
// every part no kept generation references; a part being written (its
// lease live) is left alone.
func GCDataset(ctx context.Context, rootURL string, keep int) (*GCResult, error) {
	if keep < 1 {
		return nil, errs.Usagef("--keep must be at least 1 (the current generation)")
	}
	root, err := storage.OpenDir(ctx, rootURL, false)
	if err != nil {
		return nil, err
	}
	lease, err := acquireRoot(ctx, root, "gc")
	if err != nil {
		return nil, err
	}
	defer lease.Release(context.WithoutCancel(ctx))
	ns, err := dataset.List(ctx, root)
	if err != nil {
		return nil, err
	}
	if len(ns) == 0 {
		return nil, errs.BadInputf("%s is not a dataset root (no %s)", root.URL(""), dataset.GenerationsPrefix)
	}
	res := &GCResult{KeptGenerations: []int{}, RemovedGenerations: []int{}, RemovedParts: []string{}}
	cut := max(len(ns)-keep, 0)
	var kept []*dataset.Generation
	for _, n := range ns[cut:] {
		g, err := dataset.Load(ctx, root, n)
		if err != nil {
			return nil, err
		}
		kept = append(kept, g)
		res.KeptGenerations = append(res.KeptGenerations, n)
	}
	refs := dataset.Referenced(kept)
	// Old generations first: a generation never lists a removed part.
	for _, n := range ns[:cut] {
		if err := root.Bucket.Delete(ctx, root.Key(dataset.GenerationName(n))); err != nil && !storage.IsNotFound(err) {
			return nil, storage.Classify(fmt.Errorf("remove %s: %w", root.URL(dataset.GenerationName(n)), err))
		}
		res.RemovedGenerations = append(res.RemovedGenerations, n)
	}
	keys, err := storage.ListKeys(ctx, root, dataset.PartsPrefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, k := range keys {
		// parts/<folder>/<id>/...: the part is the first three elements.
		el := strings.SplitN(k, "/", 4)
		if len(el) < 4 {
			continue
		}
		p := strings.Join(el[:3], "/")
		if seen[p] {
			continue
		}
		seen[p] = true
		if refs[p] {
			res.KeptParts++
			continue
		}
		ploc, err := storage.OpenDir(ctx, joinURL(rootURL, p), false)
		if err != nil {
			return nil, err
		}
		if li, err := storage.ReadLease(ctx, ploc); err == nil && !li.Stale(time.Now()) {
			continue // being written by a run (it holds the part's lease)
		}
		if err := storage.RemovePrefix(ctx, root, p+"/"); err != nil {
			return nil, err
		}
		res.RemovedParts = append(res.RemovedParts, p)
	}
	return res, nil
}
