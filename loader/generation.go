package loader

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/relayout/relayout/dataset"
	"github.com/relayout/relayout/manifests"
)

// A dataset root (docs/datasets.md) is read as one dataset: its
// generation's parts, in part order, concatenated into one manifest whose
// shards, slices and files carry the part's folder in their paths and
// global positions past the parts before. The order contract then applies
// to it unchanged: the same (generation, seed, epoch, rank, world, worker)
// gives the same batches, in Go and Python.

// isDatasetRoot reports whether dir holds generations/.
func isDatasetRoot(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "generations"))
	return err == nil && st.IsDir()
}

// openGeneration reads generation n (0: the newest) of a local dataset
// root and merges its parts' manifests.
func openGeneration(root string, n int) (*manifests.Manifest, error) {
	ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dataset.GenerationsPrefix)))
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range ents {
		keys = append(keys, dataset.GenerationsPrefix+e.Name())
	}
	read := func(rel string) ([]byte, error) { return os.ReadFile(filepath.Join(root, filepath.FromSlash(rel))) }
	return readGeneration(root, n, keys, read)
}

// readGeneration reads generation n (0: the newest of keys, the object
// names under the root's generations/) through read (an object under the
// root), and merges its parts.
func readGeneration(root string, n int, keys []string, read func(rel string) ([]byte, error)) (*manifests.Manifest, error) {
	if n == 0 {
		for _, k := range keys {
			if v, ok := dataset.GenerationNumber(k); ok && v > n {
				n = v
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: no generation", root)
		}
	}
	data, err := read(dataset.GenerationName(n))
	if err != nil {
		return nil, err
	}
	var g dataset.Generation
	if err := json.Unmarshal(data, &g); err != nil || g.Format != dataset.Format || g.FormatVersion != dataset.FormatVersion || g.Generation != n {
		return nil, fmt.Errorf("%s: generation %d is not a relayout dataset generation of format version %d (%v)", root, n, dataset.FormatVersion, err)
	}
	var parts []*manifests.Manifest
	var paths []string
	for _, p := range g.Parts {
		data, err := read(strings.TrimSuffix(p.Path, "/") + "/" + manifests.FileName)
		if err != nil {
			return nil, fmt.Errorf("generation %d, part %s: %w", n, p.Folder, err)
		}
		m, err := manifests.Decode(data)
		if err != nil {
			return nil, fmt.Errorf("generation %d, part %s: %w", n, p.Folder, err)
		}
		parts = append(parts, m)
		paths = append(paths, p.Path)
	}
	return MergeParts(parts, paths)
}

// MergeParts concatenates the manifests of a dataset's parts (paths[i] is
// part i's folder under the root) into one: the Go half of the dataset
// reading contract (python/relayout_loader.py's merge_parts is the other).
// The parts must share their tensor schema and order settings.
func MergeParts(parts []*manifests.Manifest, paths []string) (*manifests.Manifest, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("a generation of no parts has no tensors to read")
	}
	first := parts[0]
	if first.Tensors == nil {
		return nil, fmt.Errorf("part %s has no tensor shards (run relayout with --tensors)", paths[0])
	}
	out := *first
	t := *first.Tensors
	out.Tensors = &t
	out.Files, out.Slices, t.Shards = []manifests.File{}, []manifests.Slice{}, []manifests.Shard{}
	out.Fingerprint = manifests.Fingerprint{} // each part has its own
	out.Totals = manifests.Totals{}
	t.Totals = manifests.TensorTotals{}
	for i, m := range parts {
		if m.Tensors == nil || m.Tensors.SpecHash != first.Tensors.SpecHash || m.Tensors.Order.Algorithm != first.Tensors.Order.Algorithm ||
			m.Tensors.Order.BlockSamples != first.Tensors.Order.BlockSamples || m.Tensors.Sample != first.Tensors.Sample || !slices.Equal(m.SliceKeys, first.SliceKeys) {
			return nil, fmt.Errorf("part %s: its tensors (spec %s) differ from part %s's (%s): the parts of one generation are laid out alike", paths[i], specOf(m), paths[0], first.Tensors.SpecHash)
		}
		pre := strings.TrimSuffix(paths[i], "/") + "/"
		// The parts before this one: its positions start past theirs.
		rows, items, fileRows := t.Totals.Rows, t.Totals.Items, out.Totals.Rows
		nFiles, nSlices := len(out.Files), len(out.Slices)
		for _, f := range m.Files {
			f.Path = pre + f.Path
			f.FirstRow += fileRows
			out.Files = append(out.Files, f)
		}
		for _, s := range m.Slices {
			s.FirstRow += rows
			segs := make([]manifests.Segment, len(s.Segments))
			for k, sg := range s.Segments {
				sg.File += nFiles
				segs[k] = sg
			}
			s.Segments = segs
			out.Slices = append(out.Slices, s)
		}
		for _, sh := range m.Tensors.Shards {
			sh.Path = pre + sh.Path
			sh.FirstRow += rows
			if sh.Items > 0 || sh.FirstItem > 0 {
				sh.FirstItem += items
			}
			ss := make([]manifests.ShardSlice, len(sh.Slices))
			for k, x := range sh.Slices {
				x.Slice += nSlices
				ss[k] = x
			}
			sh.Slices = ss
			t.Shards = append(t.Shards, sh)
		}
		t.Totals.Shards += m.Tensors.Totals.Shards
		t.Totals.Bytes += m.Tensors.Totals.Bytes
		t.Totals.Rows += m.Tensors.Totals.Rows
		t.Totals.Items += m.Tensors.Totals.Items
		out.Totals.Rows += m.Totals.Rows
		out.Totals.Files += m.Totals.Files
		out.Totals.RowGroups += m.Totals.RowGroups
		out.Totals.Bytes += m.Totals.Bytes
		out.Totals.Slices += m.Totals.Slices
	}
	sort.SliceStable(t.Shards, func(i, j int) bool { return t.Shards[i].FirstRow < t.Shards[j].FirstRow })
	return &out, nil
}

func specOf(m *manifests.Manifest) string {
	if m.Tensors == nil {
		return "none"
	}
	return m.Tensors.SpecHash
}
