package storage

import (
	"context"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"gocloud.dev/blob"
	"golang.org/x/sys/unix"
)

// Page cache that a run writes is charged to its memory cgroup, as a
// Kubernetes pod's limit counts it, and a cgroup v1 memory controller has
// no dirty-page limit of its own: the machine-wide thresholds (a tenth of
// all memory) are far above a pod's limit. Left alone, a run's spill files
// filled a 128 MiB cgroup with up to 102 MiB of dirty pages, and the
// kernel made room by evicting the binary's own code, which the run then
// faulted back in from disk (thousands of major faults on a busy disk).
// DropBehind writes a file's bytes back as they are written and drops
// them from the page cache, so that a process's dirty pages stay under a
// sixteenth of the limit (and a window for each file being written). It
// costs the page cache's speed (a write may wait for the disk, a read of
// the file reads it), so it is on only where the cache is charged to a
// limit: see DropBehindOn.
const (
	// dropFileWindow is how much one file may have dirty before it is
	// written back: at 256 KiB a run in a 128 MiB cgroup took 25% longer
	// than with the cache left alone (many small writes to 100 files at
	// once), at 1 MiB 6%.
	dropFileWindow = 1 << 20
	// dropMinBudget and dropMaxBudget bound dropBudget.
	dropMinBudget, dropMaxBudget = 4 << 20, 64 << 20
)

// dropBudget is how much all DropBehind files together may have dirty, a
// sixteenth of the cgroup's limit (8 MiB at 128 MiB): past it, the file
// being written is written back however little of it is dirty.
var dropBudget = sync.OnceValue(func() int64 {
	return min(max(CgroupMemoryLimit()/16, dropMinBudget), dropMaxBudget)
})

// dropDirty counts the bytes all DropBehind files have not yet dropped.
var dropDirty atomic.Int64

// DropBehind is a local file written once, front to back, whose written
// bytes are synced and dropped from the page cache a window at a time
// (sync_file_range, then posix_fadvise DONTNEED). Reading it back reads
// the disk. Its methods are not safe for concurrent use.
type DropBehind struct {
	*os.File
	drop dropper
}

// NewDropBehind wraps f, a file opened for writing at offset 0. When
// DropBehindOn is false, it writes f as it is.
func NewDropBehind(f *os.File) *DropBehind {
	d := &DropBehind{File: f}
	if DropBehindOn() {
		d.drop.f = f
	}
	return d
}

// Write writes p and, when this file's or all files' dirty bytes pass
// their window, writes this file's back and drops them.
func (d *DropBehind) Write(p []byte) (int, error) {
	n, err := d.File.Write(p)
	d.drop.wrote(n, err)
	return n, err
}

// Close drops what is still cached and closes the file.
func (d *DropBehind) Close() error {
	d.drop.drop()
	return d.File.Close()
}

// dropper tracks the bytes written to f front to back and drops them from
// the page cache a window at a time: a window's writeback is started when
// it fills, and waited for, and the window dropped, when the next one
// fills, so that writing rarely waits for the disk.
type dropper struct {
	f       *os.File // nil: drop-behind is off, or the file is not open yet
	written int64    // bytes written
	started int64    // writeback started for the bytes before this offset
	clean   int64    // bytes before this offset are written back and dropped
}

func (d *dropper) wrote(n int, err error) {
	if d.f == nil {
		return
	}
	d.written += int64(n)
	over := dropDirty.Add(int64(n)) > dropBudget()
	if err == nil && (over || d.written-d.started >= dropFileWindow) {
		d.flush(over)
	}
}

// flush drops the window whose writeback was started before, and starts
// the writeback of what was written since (all waits and drops it).
// Errors are not returned: a failed writeback surfaces at the next write,
// sync or close of the file, and a file whose system ignores the advice
// is only cached.
func (d *dropper) flush(all bool) {
	if d.f == nil {
		return
	}
	fd := int(d.f.Fd())
	if all {
		d.started = d.written
	} else if n := d.written - d.started; n > 0 {
		_ = unix.SyncFileRange(fd, d.started, n, unix.SYNC_FILE_RANGE_WRITE)
	}
	end := d.started // the window started before (all: everything)
	off, n := d.clean, end-d.clean
	if n > 0 {
		if unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER) == nil {
			_ = unix.Fadvise(fd, off, n, unix.FADV_DONTNEED)
		}
		d.clean = end
		dropDirty.Add(-n)
	}
	d.started = d.written
}

// drop writes back and drops everything written.
func (d *dropper) drop() { d.flush(true) }

// NewWriter creates the object key in loc's bucket, as
// loc.Bucket.NewWriter does; in a local folder the file's bytes are also
// written back and dropped from the page cache as they are written, as
// DropBehind's are: a run's output would otherwise sit in its memory
// cgroup as dirty pages.
func NewWriter(ctx context.Context, loc Location, key string, opts *blob.WriterOptions) (io.WriteCloser, error) {
	if loc.Local == "" {
		return loc.Bucket.NewWriter(ctx, key, opts)
	}
	var o blob.WriterOptions
	if opts != nil {
		o = *opts
	}
	dw := &dropWriter{keep: !DropBehindOn()}
	before := o.BeforeWrite
	o.BeforeWrite = func(as func(any) bool) error {
		as(&dw.drop.f)
		if before != nil {
			return before(as)
		}
		return nil
	}
	bw, err := loc.Bucket.NewWriter(ctx, key, &o)
	if err != nil {
		return nil, err
	}
	dw.Writer = bw
	return dw, nil
}

// dropWriter is a blob writer over a local file that drops what it wrote,
// or, with keep, leaves it cached and only starts its writeback at Close.
type dropWriter struct {
	*blob.Writer
	drop dropper // its file is nil until the driver's writer is opened
	keep bool
}

func (w *dropWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	if !w.keep {
		w.drop.wrote(n, err)
	}
	return n, err
}

// Close starts the file's writeback without waiting for it (keep) or
// writes it back and drops it, then closes the writer. The fsync that
// makes the output durable before its manifest comes later (SyncTree);
// started now, the disk writes overlap the rest of the run or task.
func (w *dropWriter) Close() error {
	if w.keep {
		if f := w.drop.f; f != nil {
			_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		}
	} else {
		w.drop.drop()
	}
	return w.Writer.Close()
}

// DropCached drops n bytes of f from off from the page cache: bytes read
// once, which would otherwise be kept at the expense of pages in use.
func DropCached(f *os.File, off, n int64) {
	if !DropBehindOn() {
		return
	}
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED)
}
