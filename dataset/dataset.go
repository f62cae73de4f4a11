// Package dataset is a dataset root: a table that grows (one partition a
// day, say) kept as immutable parts, each a complete relayout output of one
// value of the partition key, and generations that list them.
//
//	ROOT/generations/00000007.json   generation 7: its parts and inputs
//	ROOT/CURRENT.json                {"generation": 7} (a hint; see Current)
//	ROOT/parts/date=2026-11-30/<id>/ a part: manifest.json, parquet/, tensors/
//
// A part's id hashes the config that lays it out and its inputs' content
// (path, size, xxhash64), so the same inputs and config always give the
// same part, written once and never changed; a new day or a changed input
// gives a new id. A run writes the parts it lacks, then commits generation
// N+1 with a conditional create of generations/N+1.json: the only commit
// point. Two runs racing for N+1 cannot both commit; a reader that lists
// generations/ never sees a half-made one (the parts a generation lists are
// committed before it is). Earlier generations stay readable until gc
// removes them.
package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
)

// Names under a dataset root.
const (
	GenerationsPrefix = "generations/"
	PartsPrefix       = "parts/"
	CurrentName       = "CURRENT.json"
	Format            = "relayout-dataset-generation"
	FormatVersion     = 1
)

// Generation is one committed state of a dataset: generations/N.json.
type Generation struct {
	Format          string `json:"format"`
	FormatVersion   int    `json:"format_version"`
	RelayoutVersion string `json:"relayout_version"`
	Generation      int    `json:"generation"`
	// Parent is the generation this one was built from (0: none).
	Parent int `json:"parent"`
	// PartitionBy is the partition key (the leading slice key); ConfigHash
	// the config every part is laid out with (its manifest's config_hash).
	PartitionBy string          `json:"partition_by"`
	Config      json.RawMessage `json:"config"`
	ConfigHash  string          `json:"config_hash"`
	// Parts in partition-key order; Inputs every input file read, with
	// its content hash, for the next run's change detection.
	Parts  []Part  `json:"parts"`
	Inputs []Input `json:"inputs"`
	Totals Totals  `json:"totals"`
	// Changes says what the run that committed it did.
	Changes Changes `json:"changes"`
}

// Part is one value of the partition key, laid out as one relayout output.
type Part struct {
	// Value is the partition key's value (manifest key encoding); Folder
	// its Hive folder name (date=2026-11-30).
	Value  any    `json:"value"`
	Folder string `json:"folder"`
	ID     string `json:"id"`
	// Path is the part's output folder, relative to the root.
	Path        string                `json:"path"`
	Rows        int64                 `json:"rows"`
	Bytes       int64                 `json:"bytes"`
	Files       int                   `json:"files"`
	Fingerprint manifests.Fingerprint `json:"fingerprint"`
	// ManifestXXHash64 pins the part's manifest.json.
	ManifestXXHash64 string `json:"manifest_xxhash64"`
	// Inputs are the input paths the part was laid out from.
	Inputs []string `json:"inputs"`
	// WrittenIn is the generation whose run wrote the part.
	WrittenIn int `json:"written_in"`
}

// Input is one input file as a run saw it.
type Input struct {
	Path     string `json:"path"`
	Bytes    int64  `json:"bytes"`
	ETag     string `json:"etag,omitempty"`
	MTime    string `json:"mtime,omitempty"`
	XXHash64 string `json:"xxhash64"`
	// Folder is the partition the file's rows belong to (date=2026-11-30).
	Folder string `json:"folder"`
}

// Totals sums the parts.
type Totals struct {
	Parts int   `json:"parts"`
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	Files int   `json:"files"`
}

// Changes is what a run did against the generation before it.
type Changes struct {
	New     []string `json:"new"`     // folders of parts with no earlier part
	Changed []string `json:"changed"` // folders whose inputs or config changed
	Reused  []string `json:"reused"`  // folders whose part was kept
	Dropped []string `json:"dropped"` // folders that left the window
	// BytesRead and BytesWritten are the inputs read and the part bytes
	// written; FullBytes the inputs a full rewrite would read.
	InputBytesRead int64 `json:"input_bytes_read"`
	BytesWritten   int64 `json:"bytes_written"`
	FullInputBytes int64 `json:"full_input_bytes"`
}

// GenerationName is generation n's object name under the root.
func GenerationName(n int) string { return fmt.Sprintf("%s%08d.json", GenerationsPrefix, n) }

// PartID names a part by its config and inputs' content.
func PartID(configHash string, inputs []Input) string {
	h := xxhash.New()
	fmt.Fprintf(h, "relayout-part-v1\x00%s\x00", configHash)
	for _, in := range inputs {
		fmt.Fprintf(h, "%s\x00%d\x00%s\x00", in.Path, in.Bytes, in.XXHash64)
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// PartPath is the folder of a part.
func PartPath(folder, id string) string { return PartsPrefix + folder + "/" + id }

// List returns the committed generation numbers, ascending.
func List(ctx context.Context, root storage.Location) ([]int, error) {
	keys, err := storage.ListKeys(ctx, root, GenerationsPrefix)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, k := range keys {
		if n, ok := GenerationNumber(k); ok {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

// GenerationNumber returns the generation an object name under the root
// is (GenerationName's inverse); false for any other name.
func GenerationNumber(key string) (int, bool) {
	name := strings.TrimSuffix(strings.TrimPrefix(key, GenerationsPrefix), ".json")
	n, err := strconv.Atoi(name)
	return n, err == nil && n > 0 && GenerationName(n) == key
}

// Load reads generation n.
func Load(ctx context.Context, root storage.Location, n int) (*Generation, error) {
	data, err := storage.Get(ctx, root, GenerationName(n))
	if err != nil {
		if storage.IsNotFound(err) {
			return nil, errs.BadInputf("%s: no generation %d", root.URL(""), n)
		}
		return nil, err
	}
	var g Generation
	if err := json.Unmarshal(data, &g); err != nil || g.Format != Format {
		return nil, errs.BadInputf("%s is not a relayout dataset generation: %v", root.URL(GenerationName(n)), err)
	}
	if g.FormatVersion != FormatVersion {
		return nil, errs.BadInputf("%s: format_version %d, this relayout reads %d", root.URL(GenerationName(n)), g.FormatVersion, FormatVersion)
	}
	if g.Generation != n {
		return nil, errs.BadInputf("%s says it is generation %d", root.URL(GenerationName(n)), g.Generation)
	}
	return &g, nil
}

// Current returns the newest committed generation, or nil for a root
// without any. The newest generations/N.json is current, whatever
// CURRENT.json says: the pointer is written after the commit and may lag
// when a run dies between the two.
func Current(ctx context.Context, root storage.Location) (*Generation, error) {
	ns, err := List(ctx, root)
	if err != nil || len(ns) == 0 {
		return nil, err
	}
	return Load(ctx, root, ns[len(ns)-1])
}

// Open returns generation n (0: the current one); a root without
// generations is an error naming it.
func Open(ctx context.Context, root storage.Location, n int) (*Generation, error) {
	if n > 0 {
		return Load(ctx, root, n)
	}
	g, err := Current(ctx, root)
	if err == nil && g == nil {
		err = errs.BadInputf("%s is not a dataset root (no %s)", root.URL(""), GenerationsPrefix)
	}
	return g, err
}

// IsRoot reports whether loc holds a dataset (any generation).
func IsRoot(ctx context.Context, root storage.Location) (bool, error) {
	ns, err := List(ctx, root)
	return len(ns) > 0, err
}

// Commit writes generation g.Generation with a conditional create (the
// commit point; exit 5 if another run committed that generation first),
// then points CURRENT.json at it.
func Commit(ctx context.Context, root storage.Location, g *Generation) error {
	data, err := json.MarshalIndent(g, "", " ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	err = storage.Put(ctx, root, GenerationName(g.Generation), data, storage.PutOptions{IfNotExist: true})
	if errors.Is(err, storage.ErrExists) {
		return errs.Preconditionf("rerun: it will build on the generation that won", "%s: another run committed generation %d first; nothing of this run is visible", root.URL(""), g.Generation)
	}
	if err != nil {
		return err
	}
	ptr, _ := json.Marshal(map[string]int{"generation": g.Generation})
	if err := storage.Put(ctx, root, CurrentName, append(ptr, '\n'), storage.PutOptions{}); err != nil {
		return fmt.Errorf("generation %d is committed, but %s was not updated: %w", g.Generation, CurrentName, err)
	}
	return nil
}

// Referenced returns the part paths the generations reference.
func Referenced(gens []*Generation) map[string]bool {
	out := map[string]bool{}
	for _, g := range gens {
		for _, p := range g.Parts {
			out[p.Path] = true
		}
	}
	return out
}
