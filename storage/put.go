package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
)

// ErrExists is returned (wrapped, with class Precondition) by Put with
// IfNotExist when the object is already there.
var ErrExists = errors.New("object already exists")

// PutOptions tune Put.
type PutOptions struct {
	// IfNotExist makes the write a conditional create: it fails with
	// ErrExists when the object exists (an S3 If-None-Match: * PUT, a GCS
	// generation-0 precondition, a hard link on a local disk).
	IfNotExist bool
	// ContentType defaults to application/json.
	ContentType string
}

// Put writes data as the object rel under loc so that a reader sees either
// the whole object or none of it, whatever fails on the way.
//
// On a local folder the bytes go to a temporary file beside the target,
// which is synced, then renamed (or, for IfNotExist, hard-linked) into
// place, and the folder is synced: a full disk, a crash or a kill never
// leaves a truncated object under its final name (gocloud's fileblob
// renames its temporary file even after a failed write). On an object
// store the upload is aborted (its context cancelled) when a write fails,
// so a partial body is never published.
func Put(ctx context.Context, loc Location, rel string, data []byte, o PutOptions) error {
	if o.ContentType == "" {
		o.ContentType = "application/json"
	}
	if loc.Local != "" {
		return putLocal(loc, rel, data, o)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := loc.Bucket.NewWriter(cctx, loc.Key(rel), &blob.WriterOptions{ContentType: o.ContentType, IfNotExist: o.IfNotExist})
	if err != nil {
		return Classify(fmt.Errorf("create %s: %w", loc.URL(rel), err))
	}
	if _, err := w.Write(data); err != nil {
		cancel() // abort: nothing becomes visible
		_ = w.Close()
		return Classify(fmt.Errorf("write %s: %w", loc.URL(rel), err))
	}
	if err := w.Close(); err != nil {
		if c := gcerrors.Code(err); o.IfNotExist && (c == gcerrors.FailedPrecondition || c == gcerrors.AlreadyExists) {
			return errs.Preconditionf("", "%s: %w", loc.URL(rel), ErrExists)
		}
		return Classify(fmt.Errorf("write %s: %w", loc.URL(rel), err))
	}
	return nil
}

func putLocal(loc Location, rel string, data []byte, o PutOptions) (err error) {
	path := filepath.Join(loc.Local, filepath.FromSlash(loc.Key(rel)))
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return classifyOS(fmt.Errorf("create %s: %w", dir, err))
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return classifyOS(fmt.Errorf("create %s: %w", loc.URL(rel), err))
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return classifyOS(fmt.Errorf("write %s: %w", loc.URL(rel), err))
	}
	if err = f.Sync(); err != nil {
		return classifyOS(fmt.Errorf("write %s: %w", loc.URL(rel), err))
	}
	if err = f.Close(); err != nil {
		return classifyOS(fmt.Errorf("write %s: %w", loc.URL(rel), err))
	}
	if o.IfNotExist {
		if err = os.Link(tmp, path); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return errs.Preconditionf("", "%s: %w", loc.URL(rel), ErrExists)
			}
			return classifyOS(fmt.Errorf("write %s: %w", loc.URL(rel), err))
		}
		os.Remove(tmp)
	} else if err = os.Rename(tmp, path); err != nil {
		return classifyOS(fmt.Errorf("write %s: %w", loc.URL(rel), err))
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a local folder, so that the names created in it (a
// renamed file) survive a crash.
func SyncDir(dir string) error { return syncPath(dir) }

// SyncTree fsyncs every file and folder under the local folder root (a
// no-op for remote locations): data files are made durable before the
// manifest that names them is written. An fsync first writes what the
// file still has dirty: one after another, the seven files reduce tasks
// left took 75 ms on this project's VM. NewWriter starts that writeback
// when a file is closed, and the files are synced syncParallel at a time,
// so that what is left overlaps. The folders follow, once their files
// are synced.
func SyncTree(loc Location, rels ...string) error {
	if loc.Local == "" {
		return nil
	}
	var files, dirs []string
	for _, rel := range rels {
		root := filepath.Join(loc.Local, filepath.FromSlash(loc.Key(rel)))
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, p)
			} else {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return classifyOS(fmt.Errorf("sync %s: %w", root, err))
		}
	}
	if err := syncAll(files); err != nil {
		return err
	}
	return syncAll(dirs)
}

// syncParallel bounds the fsyncs SyncTree has in flight.
const syncParallel = 16

// syncAll fsyncs the paths, syncParallel at a time; the error of the
// first path that failed (in the paths' order) is returned.
func syncAll(paths []string) error {
	return par.ForEach(context.Background(), len(paths), syncParallel, func(i int) error { return syncPath(paths[i]) })
}

// syncPath fsyncs one file or folder.
func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return classifyOS(fmt.Errorf("sync %s: %w", p, err))
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return classifyOS(fmt.Errorf("sync %s: %w", p, err))
	}
	return nil
}

// Get reads the whole object rel under loc. Transient failures, including
// a body shorter than the object's size (a cut connection), are retried
// with backoff; a missing object is returned as an error for which
// gcerrors.Code is NotFound, unclassified, so callers can tell "not there"
// from "could not read".
func Get(ctx context.Context, loc Location, rel string) (data []byte, err error) {
	if rel == "" {
		return nil, errEmptyName(loc)
	}
	err = Retry(ctx, func() error {
		var err error
		if data, err = get1(ctx, loc, rel); err != nil && !IsNotFound(err) {
			return Classify(fmt.Errorf("read %s: %w", loc.URL(rel), err))
		}
		return err // NotFound: unclassified, so not retried
	})
	return data, err
}

func get1(ctx context.Context, loc Location, rel string) ([]byte, error) {
	r, err := loc.Bucket.NewReader(ctx, loc.Key(rel), nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// Sized up front: io.ReadAll grows its buffer from 512 bytes, which
	// for a plan's 3.4 MB sample cleared and copied 2-3 times its size.
	buf := bytes.NewBuffer(make([]byte, 0, max(r.Size(), 0)+bytes.MinRead))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, classifyOS(err) // a cut connection is transient, a folder is not
	}
	data := buf.Bytes()
	if size := r.Size(); size >= 0 && int64(len(data)) != size {
		return nil, errs.TransientErr(fmt.Errorf("read %d of %d bytes (the connection was cut)", len(data), size))
	}
	return data, nil
}

// GetRange reads n bytes at off of the object rel under loc, whole before
// it returns: a read cut short (a reset, a timeout) is retried from the
// range's start, as Get retries. An object shorter than the range is bad
// input (exit 3), not retried: a retry would read the same, and an
// orchestrator retries exit 4 forever. From a local folder the range's
// pages are dropped from the page cache after (it is read once).
func GetRange(ctx context.Context, loc Location, rel string, off, n int64) (data []byte, err error) {
	if rel == "" {
		return nil, errEmptyName(loc)
	}
	err = Retry(ctx, func() error {
		data, err = readRange(ctx, loc, rel, off, n)
		return err
	})
	return data, err
}

// errEmptyName refuses reading the location itself as an object: a name
// left empty (a damaged or hand-edited manifest) is bad input, not a
// failure a retry could fix (fileblob says "escapes bucket root", code
// Unknown, which reads as transient).
func errEmptyName(loc Location) error {
	return errs.BadInputf("read %s: no object name (the folder itself): a manifest or plan naming it is damaged", loc.URL(""))
}

func readRange(ctx context.Context, loc Location, rel string, off, n int64) ([]byte, error) {
	url := loc.URL(rel)
	short := func(size int64) error {
		return errs.BadInputf("read %s: the object is %d bytes, shorter than the %d bytes at %d asked for (damaged, or not the object recorded)", url, size, n, off)
	}
	var r io.Reader
	if loc.Local != "" {
		f, err := os.Open(filepath.Join(loc.Local, filepath.FromSlash(rel)))
		if err != nil {
			return nil, Classify(fmt.Errorf("read %s: %w", url, err)) // not found: bad input
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && off+n > st.Size() {
			return nil, short(st.Size())
		}
		defer DropCached(f, off, n)
		r = io.NewSectionReader(f, off, n)
	} else {
		rr, err := loc.Bucket.NewRangeReader(ctx, loc.Key(rel), off, n, nil)
		if err != nil {
			return nil, Classify(fmt.Errorf("read %s: %w", url, err))
		}
		defer rr.Close()
		if size := rr.Size(); size >= 0 && off+n > size {
			return nil, short(size)
		}
		r = rr
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		// A cut connection is transient; a folder (an empty or damaged
		// name) is not, and is refused at once instead of retried.
		return nil, classifyOS(fmt.Errorf("read %s: %d bytes at %d: %w", url, n, off, err))
	}
	return data, nil
}

// IsNotFound reports whether err says an object does not exist.
func IsNotFound(err error) bool {
	return gcerrors.Code(err) == gcerrors.NotFound || errors.Is(err, fs.ErrNotExist)
}

// IsExists reports whether err is Put's conditional-create failure.
func IsExists(err error) bool { return errors.Is(err, ErrExists) }

const readAttempts = 5

func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << (attempt - 1)
	return min(d, 2*time.Second)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Retry calls fn until it succeeds, fails with an error that is not
// transient, or has failed readAttempts times, waiting with backoff between
// attempts. fn must start over each time (a whole-object read, say): the
// SDKs retry requests, not a body that breaks midway.
func Retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < readAttempts; attempt++ {
		if attempt > 0 {
			if serr := sleepCtx(ctx, backoff(attempt)); serr != nil {
				return err
			}
		}
		if err = fn(); err == nil || !errs.Is(Classify(err), errs.Transient) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// copyBufs are Copy's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// Copy copies src to dst through a pooled 256 KiB buffer, not src's
// WriteTo: a blob.Reader's allocates and clears a new 1 MiB buffer per
// call, which many small objects or ranges pay over and over (hashing the
// 1,200 files of a Hive output: 0.17 CPU-s).
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(dst, struct{ io.Reader }{src}, *buf)
}

// HashObject streams the object rel under loc through a new hash (from
// newHash) and returns its length; a body cut short is retried from the
// start.
func HashObject[H interface {
	io.Writer
	Reset()
}](ctx context.Context, loc Location, rel string, h H) (n int64, err error) {
	err = Retry(ctx, func() error {
		h.Reset()
		rd, err := loc.Bucket.NewReader(ctx, loc.Key(rel), nil)
		if err != nil {
			if IsNotFound(err) {
				return errs.BadInputErr(err) // not retried; callers test IsNotFound
			}
			return Classify(fmt.Errorf("read %s: %w", loc.URL(rel), err))
		}
		defer rd.Close()
		if n, err = Copy(h, rd); err != nil {
			return errs.TransientErr(fmt.Errorf("read %s: %w", loc.URL(rel), err))
		}
		if size := rd.Size(); size >= 0 && n != size {
			return errs.TransientErr(fmt.Errorf("read %s: %d of %d bytes (the connection was cut)", loc.URL(rel), n, size))
		}
		return nil
	})
	return n, err
}
