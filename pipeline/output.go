package pipeline

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/plan"
	"github.com/relayout/relayout/report"
	"github.com/relayout/relayout/storage"
)

// leaseTTL is the lease's time to live; tests shorten it.
var leaseTTL = storage.DefaultLeaseTTL

// ownedName matches the names relayout writes under an output's data
// prefixes: Parquet parts (flat, or in Hive folders "k1=v1/k2=v2/", whose
// segments hive.Path escapes so that they hold no "/" and one "="), tensor
// shards, and the temporary files of storage.Put and of gocloud's fileblob
// beside them.
var ownedName = regexp.MustCompile(`^(parquet/` + hiveFolders + `part-\d{5,}\.parquet|tensors/shard-\d{5,}(-\d{4,})?\.safetensors)(\.[0-9a-f]+\.tmp)?$|^(parquet/` + hiveFolders + `|tensors/)\.[^/]*\.tmp$`)

// hiveFolders matches any number of Hive folder segments, each ending in
// "/".
const hiveFolders = `([^/=]+=[^/=]*/)*`

// claimOutput makes out this run's: it refuses an output that overlaps an
// input (exit 2), takes the output's lease (exit 4 while another live run
// holds it), refuses a committed output unless overwrite is set (exit 5),
// and removes what a previous run left, but only what relayout provably
// wrote: files under parquet/, tensors/ and the work prefix named as
// relayout names them, when a committed manifest (with overwrite), a stale
// lease or a distributed plan (plan.json or keys.json) marks them as
// relayout's. Anything else
// there is refused (exit 5), never deleted.
//
// The old manifest is removed first, so no reader trusts it while files
// change. prefixes are what this run writes and removes again if it fails;
// the caller defers the claim's release.
//
// With stage set, overwriting a committed output leaves it whole until
// the commit: the claim's Target is then a staging prefix under the work
// prefix, and commit swaps the staged files in (docs/reliability.md). A
// run that fails before it leaves the old output committed and intact.
func claimOutput(ctx context.Context, out storage.Location, inputs []string, overwrite, stage bool, command string, prefixes ...string) (*outputClaim, error) {
	for _, in := range inputs {
		if err := checkOverlap(out, in); err != nil {
			return nil, err
		}
	}
	lease, prev, err := storage.AcquireLease(ctx, out, command, leaseTTL)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = lease.Release(context.WithoutCancel(ctx))
		}
	}()
	committed, err := checkOutput(ctx, out, overwrite)
	if err != nil {
		return nil, err
	}
	marked := committed || prev != nil
	for _, name := range []string{plan.FileName, KeysFileName} { // a distributed plan's marks
		if marked {
			break
		}
		if marked, err = out.Bucket.Exists(ctx, out.Key(name)); err != nil {
			return nil, storage.Classify(fmt.Errorf("check %s: %w", out.URL(name), err))
		}
	}
	staged := stage && committed
	var debris []string
	for _, prefix := range []string{"parquet/", "tensors/", plan.WorkPrefix} {
		keys, err := storage.ListKeys(ctx, out, prefix)
		if err != nil {
			return nil, err
		}
		for _, rel := range keys {
			if prefix != plan.WorkPrefix && !ownedName.MatchString(rel) {
				return nil, errs.Preconditionf("remove it or choose another output: relayout never deletes files it did not write",
					"output %s holds %s, which relayout did not write", out.Name, out.URL(rel))
			}
			if staged && prefix != plan.WorkPrefix {
				continue // the committed output: kept until the swap
			}
			debris = append(debris, rel)
		}
	}
	if len(debris) > 0 && !marked {
		return nil, errs.Preconditionf("remove them or choose another output: relayout deletes only what a manifest, a run lease or a plan marks as its own",
			"output %s holds %d files (%s, …) but no manifest, run lease or plan says relayout wrote them", out.Name, len(debris), out.URL(debris[0]))
	}
	if committed && !staged {
		if err := out.Bucket.Delete(ctx, out.Key(manifests.FileName)); err != nil && !storage.IsNotFound(err) {
			return nil, storage.Classify(fmt.Errorf("remove old %s: %w", out.URL(manifests.FileName), err))
		}
	}
	for _, rel := range debris {
		if err := out.Bucket.Delete(ctx, out.Key(rel)); err != nil && !storage.IsNotFound(err) {
			return nil, storage.Classify(fmt.Errorf("remove old %s: %w", out.URL(rel), err))
		}
	}
	if len(debris) > 0 {
		storage.RemoveEmptyDirs(out, "parquet/") // an old Hive layout's emptied folders
	}
	if out.Local != "" { // storage.Put's temporary files of a killed write at the root
		for _, name := range []string{manifests.FileName, report.FileName} { // not the lease's: a racing run may be writing it
			tmps, _ := filepath.Glob(filepath.Join(out.Local, "."+name+".*.tmp"))
			for _, p := range tmps {
				os.Remove(p)
			}
		}
	}
	if !staged {
		if err := out.Bucket.Delete(ctx, out.Key(report.FileName)); err != nil && !storage.IsNotFound(err) {
			return nil, storage.Classify(fmt.Errorf("remove old %s: %w", out.URL(report.FileName), err))
		}
	}
	ok = true
	c := &outputClaim{out: out, target: out, lease: lease, prefixes: prefixes}
	if staged {
		c.target, c.prefixes = stageOf(out), []string{StagePrefix}
	}
	return c, nil
}

// StagePrefix holds a run's files while it overwrites a committed output;
// the commit moves them to their names (parquet/, tensors/).
const StagePrefix = plan.WorkPrefix + "next/"

// stageOf is the location of out's staging prefix: keys there are the
// output's own names (parquet/part-00000.parquet) under StagePrefix.
func stageOf(out storage.Location) storage.Location {
	st := storage.Location{Bucket: out.Bucket, Prefix: out.Key(StagePrefix), Name: out.URL(StagePrefix)}
	if out.Local != "" {
		st.Local = filepath.Join(out.Local, filepath.FromSlash(StagePrefix))
	}
	return st
}

// outputClaim is a run's hold on its output, from claimOutput to release.
type outputClaim struct {
	out storage.Location
	// target is where the run writes its files: out, or out's staging
	// prefix when it overwrites a committed output (commit swaps).
	target   storage.Location
	lease    *storage.Lease
	prefixes []string
	// committed: the run's commit point is written; lost: another run owns
	// the output now, so nothing there is this run's to remove.
	committed, lost bool
}

// commit makes the data durable, checks that the lease is still this
// run's, then creates the manifest only if absent: the commit point.
func (c *outputClaim) commit(ctx context.Context, m *manifests.Manifest) error {
	data, err := manifests.Marshal(m)
	if err != nil {
		return err
	}
	if c.target.Prefix != c.out.Prefix || c.target.Local != c.out.Local {
		if err := c.swap(ctx, m); err != nil {
			return err
		}
	}
	if err := storage.SyncTree(c.out, "parquet", "tensors"); err != nil {
		return err
	}
	err = c.put(ctx, manifests.FileName, data, true)
	if storage.IsExists(err) {
		return errs.WithHint(err, "another run committed this output meanwhile; nothing of this run was committed")
	}
	return err
}

// swap replaces the committed output by the staged one (swapStaged), after
// checking the lease is still this run's; the commit then writes the new
// manifest.
func (c *outputClaim) swap(ctx context.Context, m *manifests.Manifest) error {
	if err := storage.SyncTree(c.target, "parquet", "tensors"); err != nil {
		return err
	}
	if err := c.lease.Check(ctx); err != nil {
		c.lost = true
		return err
	}
	c.prefixes = []string{"parquet/", "tensors/", StagePrefix} // from here a failure clears the output
	if err := swapStaged(ctx, c.out, c.target, m, c.out); err != nil {
		return err
	}
	c.target = c.out
	return nil
}

// swapMarker, under the work prefix, says a swap has removed the old
// output: a retried swap must not remove what it already moved in.
const swapMarker = plan.WorkPrefix + "swapping"

// swapStaged replaces out's committed output by the files of m staged under
// stage: it removes the old manifest (from here until the new one is
// written the output is uncommitted, and a killed run leaves only what the
// next run clears), marks the swap (under work's work prefix), removes the
// old files, then moves every staged file to its name (a rename on local
// disks, a copy and delete on object stores). Retried after a crash, it
// skips the removal and moves what is left.
func swapStaged(ctx context.Context, out, stage storage.Location, m *manifests.Manifest, work storage.Location) error {
	if err := storage.SyncTree(stage, "parquet", "tensors"); err != nil {
		return err
	}
	marked, err := work.Bucket.Exists(ctx, work.Key(swapMarker))
	if err != nil {
		return storage.Classify(fmt.Errorf("check %s: %w", work.URL(swapMarker), err))
	}
	if !marked {
		if err := out.Bucket.Delete(ctx, out.Key(manifests.FileName)); err != nil && !storage.IsNotFound(err) {
			return storage.Classify(fmt.Errorf("remove old %s: %w", out.URL(manifests.FileName), err))
		}
		if err := storage.Put(ctx, work, swapMarker, []byte("{}\n"), storage.PutOptions{}); err != nil {
			return err
		}
		for _, prefix := range []string{"parquet/", "tensors/"} {
			keys, err := storage.ListKeys(ctx, out, prefix)
			if err != nil {
				return err
			}
			for _, rel := range keys {
				if err := out.Bucket.Delete(ctx, out.Key(rel)); err != nil && !storage.IsNotFound(err) {
					return storage.Classify(fmt.Errorf("remove old %s: %w", out.URL(rel), err))
				}
			}
		}
		// On local disk the old layout's Hive folders, emptied, would
		// stay beside the new one (another layout: other keys, or flat).
		storage.RemoveEmptyDirs(out, "parquet/")
	}
	var names []string
	for _, f := range m.Files {
		names = append(names, f.Path)
	}
	if m.Tensors != nil {
		for _, s := range m.Tensors.Shards {
			names = append(names, s.Path)
		}
	}
	for _, rel := range names {
		if ok, err := stage.Bucket.Exists(ctx, stage.Key(rel)); err == nil && !ok {
			if done, _ := out.Bucket.Exists(ctx, out.Key(rel)); done {
				continue // moved by the attempt that crashed
			}
		}
		if err := moveObject(ctx, stage, out, rel); err != nil {
			return err
		}
	}
	_ = storage.RemovePrefix(ctx, out, StagePrefix)
	_ = work.Bucket.Delete(ctx, work.Key(swapMarker))
	if out.Local != "" { // the emptied work folder (kept when something else is in it)
		os.Remove(filepath.Join(out.Local, filepath.FromSlash(strings.TrimSuffix(plan.WorkPrefix, "/"))))
	}
	return nil
}

// copyObject copies from's object fromRel to to's toRel, locations in the
// same bucket, on the store's side (blob.Bucket.Copy: S3 CopyObject and
// its like, a file copy on a local disk): no byte passes through here.
func copyObject(ctx context.Context, from storage.Location, fromRel string, to storage.Location, toRel string) error {
	if err := to.Bucket.Copy(ctx, to.Key(toRel), from.Key(fromRel), nil); err != nil {
		return storage.Classify(fmt.Errorf("copy %s to %s: %w", from.URL(fromRel), to.URL(toRel), err))
	}
	return nil
}

// moveObject moves rel from one location to another in the same bucket.
func moveObject(ctx context.Context, from, to storage.Location, rel string) error {
	if from.Local != "" && to.Local != "" {
		dst := filepath.Join(to.Local, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return errs.TransientErr(fmt.Errorf("move %s: %w", to.URL(rel), err))
		}
		if err := os.Rename(filepath.Join(from.Local, filepath.FromSlash(rel)), dst); err != nil {
			return errs.TransientErr(fmt.Errorf("move %s to %s: %w", from.URL(rel), to.URL(rel), err))
		}
		return nil
	}
	if err := copyObject(ctx, from, rel, to, rel); err != nil {
		return err
	}
	if err := from.Bucket.Delete(ctx, from.Key(rel)); err != nil && !storage.IsNotFound(err) {
		return storage.Classify(fmt.Errorf("remove %s: %w", from.URL(rel), err))
	}
	return nil
}

// put writes rel as the run's commit point (a manifest, or a distributed
// plan's plan.json), after checking the lease.
func (c *outputClaim) put(ctx context.Context, rel string, data []byte, ifNotExist bool) error {
	if err := c.lease.Check(ctx); err != nil {
		c.lost = true
		return err
	}
	if err := storage.Put(ctx, c.out, rel, data, storage.PutOptions{IfNotExist: ifNotExist}); err != nil {
		c.lost = storage.IsExists(err)
		return err
	}
	c.committed = true
	return nil
}

// release ends the claim. Before a commit it removes what the run wrote
// under its prefixes; the lease is then removed, or, when that cleanup
// failed, left in place so the next run knows the debris is relayout's.
func (c *outputClaim) release(ctx context.Context) {
	var cerr error
	if !c.committed && !c.lost {
		cerr = cleanupOutput(ctx, c.out, c.prefixes...)
	}
	if cerr != nil {
		c.lease.Stop()
		return
	}
	_ = c.lease.Release(context.WithoutCancel(ctx))
}

// listKeys lists the keys under prefix (relative to out), failing on any

// checkOverlap refuses an output that is, contains or lies inside an input:
// a run would read its own output back, or remove its input as leftovers.
func checkOverlap(out storage.Location, input string) error {
	a, b := outputRoot(out), inputRoot(input)
	if a == "" || b == "" {
		return nil
	}
	if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
		return errs.Usagef("--output %s overlaps --input %s: the output must be a folder or prefix of its own, neither inside an input nor holding one", out.Name, input)
	}
	return nil
}

func outputRoot(out storage.Location) string {
	if out.Local != "" {
		return "file://" + filepath.ToSlash(filepath.Clean(out.Local)) + "/"
	}
	u, err := url.Parse(out.Name)
	if err != nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + "/" + strings.TrimSuffix(out.Prefix, "/") + "/"
}

func inputRoot(name string) string {
	if !storage.IsURL(name) || strings.HasPrefix(name, "file://") {
		p := strings.TrimPrefix(name, "file://")
		if i := strings.IndexAny(p, "*?["); i >= 0 {
			p = filepath.Dir(p[:i] + "x")
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return ""
		}
		return "file://" + filepath.ToSlash(filepath.Clean(abs)) + "/"
	}
	u, err := url.Parse(name)
	if err != nil {
		return ""
	}
	p := strings.Trim(u.Path, "/")
	if i := strings.IndexAny(p, "*?["); i >= 0 {
		p = strings.Trim(path.Dir(p[:i]+"x"), "/.")
	}
	if p == "" {
		return u.Scheme + "://" + u.Host + "/"
	}
	return u.Scheme + "://" + u.Host + "/" + p + "/"
}

// cleanupOutput removes what a failed run wrote under its output (its data
// prefixes and the work prefix), reporting the first failure.
func cleanupOutput(ctx context.Context, out storage.Location, prefixes ...string) error {
	ctx = context.WithoutCancel(ctx)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var first error
	for _, p := range prefixes {
		if err := storage.RemovePrefix(ctx, out, p); err != nil && first == nil {
			first = err
		}
	}
	return first
}
