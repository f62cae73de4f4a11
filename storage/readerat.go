package storage

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/relayout/relayout/internal/errs"
)

// Counters count the bytes and requests of reads. The zero value is ready to
// use and safe for concurrent use.
type Counters struct {
	Bytes    atomic.Int64
	Requests atomic.Int64
}

// ReaderAt is a random-access reader over one object. It satisfies io.ReaderAt,
// io.Seeker (so arrow-go can find the size) and has Size (for parquet-go).
// Safe for concurrent ReadAt calls; Seek and Read keep a private position.
type ReaderAt struct {
	ctx    context.Context
	obj    Object
	file   *os.File
	counts *Counters

	// The object's last TailBytes bytes, fetched on first use: one request
	// serves the footer length, footer and usually the page index.
	tailOnce sync.Once
	tail     []byte
	tailOff  int64
	tailErr  error

	pos int64
}

// TailBytes is how much of an object's end a ReaderAt fetches at once for
// the footer: a smaller object is fetched whole by its first footer read.
const TailBytes = 256 << 10

// NewReaderAt opens obj for random access. counts may be nil.
func NewReaderAt(ctx context.Context, obj Object, counts *Counters) (*ReaderAt, error) {
	if counts == nil {
		counts = new(Counters)
	}
	r := &ReaderAt{ctx: ctx, obj: obj, counts: counts}
	if obj.LocalPath != "" {
		f, err := os.Open(obj.LocalPath)
		if err != nil {
			return nil, classifyOS(fmt.Errorf("open %s: %w", obj.URL, err))
		}
		r.file = f
	}
	return r, nil
}

// Size returns the object's size.
func (r *ReaderAt) Size() int64 { return r.obj.Size }

// Close releases the reader.
func (r *ReaderAt) Close() error {
	if r.file != nil {
		return r.file.Close()
	}
	return nil
}

// Seek implements io.Seeker over the private position.
func (r *ReaderAt) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		r.pos = offset
	case io.SeekCurrent:
		r.pos += offset
	case io.SeekEnd:
		r.pos = r.obj.Size + offset
	}
	if r.pos < 0 {
		return 0, fmt.Errorf("seek %s: negative position", r.obj.URL)
	}
	return r.pos, nil
}

// Read implements io.Reader from the private position.
func (r *ReaderAt) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

// ReadAt reads len(p) bytes at off. Reads past the end return io.EOF with the
// bytes that exist.
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > r.obj.Size {
		// A footer whose offsets point outside the file: damaged, never
		// worth a retry.
		return 0, errs.WithHint(errs.BadInputf("read %s at offset %d: outside the file (%d bytes): the footer points outside the file, which is damaged or truncated", r.obj.URL, off, r.obj.Size),
			"re-export the file or leave it out of --input")
	}
	if off == r.obj.Size {
		return 0, io.EOF
	}
	want := len(p)
	if off+int64(want) > r.obj.Size {
		want = int(r.obj.Size - off)
	}
	var err error
	var n int
	if r.obj.Data != nil {
		if off < int64(len(r.obj.Data)) {
			n = copy(p[:want], r.obj.Data[off:])
		}
	} else if r.file != nil {
		n, err = r.file.ReadAt(p[:want], off)
		r.counts.Bytes.Add(int64(n))
		r.counts.Requests.Add(1)
		if err != nil && err != io.EOF {
			return n, classifyOS(fmt.Errorf("read %s: %w", r.obj.URL, err))
		}
	} else {
		n, err = r.readBlob(p[:want], off)
		if err != nil {
			return n, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *ReaderAt) readBlob(p []byte, off int64) (int, error) {
	// Serve the footer region from the cached tail.
	if off >= r.obj.Size-TailBytes {
		r.tailOnce.Do(r.fetchTail)
		if r.tailErr != nil {
			return 0, r.tailErr
		}
		if off >= r.tailOff {
			return copy(p, r.tail[off-r.tailOff:]), nil
		}
	}
	return r.rangeRead(p, off)
}

func (r *ReaderAt) fetchTail() {
	off := r.obj.Size - TailBytes
	if off < 0 {
		off = 0
	}
	buf := make([]byte, r.obj.Size-off)
	_, err := r.rangeRead(buf, off)
	r.tail, r.tailOff, r.tailErr = buf, off, err
}

// rangeRead fetches p from off with one range request, retrying failures of
// the body read (the SDKs retry requests, not broken streams).
func (r *ReaderAt) rangeRead(p []byte, off int64) (n int, err error) {
	err = Retry(r.ctx, func() error {
		var err error
		n, err = r.rangeRead1(p, off)
		return err
	})
	if err != nil {
		return n, Classify(err)
	}
	return n, nil
}

func (r *ReaderAt) rangeRead1(p []byte, off int64) (int, error) {
	rd, err := r.obj.Loc.Bucket.NewRangeReader(r.ctx, r.obj.Key, off, int64(len(p)), nil)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", r.obj.URL, err)
	}
	defer rd.Close()
	r.counts.Requests.Add(1)
	n, err := io.ReadFull(rd, p)
	r.counts.Bytes.Add(int64(n))
	if err != nil {
		return n, fmt.Errorf("read %s at %d: %w", r.obj.URL, off, err)
	}
	return n, nil
}
