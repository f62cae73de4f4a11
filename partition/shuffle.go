package partition

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

// Segment is one unit's rows written by one map task: a byte range of
// an Arrow IPC stream object under the work prefix.
type Segment struct {
	Partition int    `json:"partition"`
	Unit      int    `json:"unit"`
	Offset    int64  `json:"offset"` // the unit's byte range in Path
	Length    int64  `json:"length"`
	Rows      int64  `json:"rows"`
	Bytes     int64  `json:"bytes"`
	Path      string `json:"path"`
}

// ShuffleWriter collects a map task's rows per unit, each unit an Arrow IPC
// stream (LZ4) in a local file, and publishes them. In a local work folder
// (run) the files are the segments. In an object store they are
// concatenated into one object per map attempt, each unit a byte range of
// it: a map task writes one object whatever the number of units, and a
// reduce task reads only its units' ranges.
type ShuffleWriter struct {
	work    storage.Location
	prefix  string // the attempt's prefix under the work location
	dir     string // local folder of the unit files
	tmp     bool   // dir is a temporary folder, removed when published
	files   map[int]*os.File
	writers map[int]*ipc.Writer
	rows    map[int]int64
}

func NewShuffleWriter(work storage.Location, prefix, tmpDir string) (*ShuffleWriter, error) {
	s := &ShuffleWriter{work: work, prefix: prefix, files: map[int]*os.File{}, writers: map[int]*ipc.Writer{}, rows: map[int]int64{}}
	if work.Local != "" {
		s.dir = filepath.Join(work.Local, filepath.FromSlash(prefix))
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, errs.TransientErr(fmt.Errorf("create %s: %w", s.dir, err))
		}
		return s, nil
	}
	dir, err := NewSpillDir(tmpDir)
	if err != nil {
		return nil, err
	}
	s.dir, s.tmp = dir, true
	return s, nil
}

func unitFileName(u int) string { return fmt.Sprintf("u-%05d.arrows", u) }

// write appends rows to unit u's stream.
func (s *ShuffleWriter) Write(u int, rec arrow.RecordBatch) error {
	w := s.writers[u]
	if w == nil {
		f, err := os.Create(filepath.Join(s.dir, unitFileName(u)))
		if err != nil {
			return errs.TransientErr(fmt.Errorf("shuffle: %w", err))
		}
		s.files[u] = f
		w = ipc.NewWriter(f, ipc.WithSchema(rec.Schema()), ipc.WithLZ4())
		s.writers[u] = w
	}
	if err := w.Write(rec); err != nil {
		return errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
	}
	s.rows[u] += rec.NumRows()
	return nil
}

// publish ends every stream and makes the segments visible; part maps a
// unit to its
func (s *ShuffleWriter) Publish(ctx context.Context, part []int) ([]Segment, error) {
	units := make([]int, 0, len(s.writers))
	for u := range s.writers {
		units = append(units, u)
	}
	slices.Sort(units)
	for _, u := range units {
		if err := s.writers[u].Close(); err != nil {
			return nil, errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
		}
	}
	out := []Segment{}
	if !s.tmp {
		for _, u := range units {
			st, err := s.files[u].Stat()
			if err != nil {
				return nil, errs.TransientErr(err)
			}
			if err := s.files[u].Close(); err != nil {
				return nil, errs.TransientErr(err)
			}
			out = append(out, Segment{Partition: part[u], Unit: u, Rows: s.rows[u], Bytes: st.Size(), Length: st.Size(), Path: s.prefix + unitFileName(u)})
		}
		s.files = nil
		return out, nil
	}
	name := s.prefix + "shuffle.arrows"
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bw, err := s.work.Bucket.NewWriter(cctx, s.work.Key(name), nil)
	if err != nil {
		return nil, storage.Classify(fmt.Errorf("create %s: %w", s.work.URL(name), err))
	}
	var off int64
	for _, u := range units {
		f := s.files[u]
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			cancel()
			bw.Close()
			return nil, errs.TransientErr(err)
		}
		n, err := io.Copy(bw, f)
		if err != nil {
			cancel()
			bw.Close()
			return nil, storage.Classify(fmt.Errorf("write %s: %w", s.work.URL(name), err))
		}
		out = append(out, Segment{Partition: part[u], Unit: u, Rows: s.rows[u], Bytes: n, Offset: off, Length: n, Path: name})
		off += n
	}
	if err := bw.Close(); err != nil {
		return nil, storage.Classify(fmt.Errorf("write %s: %w", s.work.URL(name), err))
	}
	s.Abort() // the local files are published: remove them
	return out, nil
}

// abort closes and, when temporary, removes the local files.
func (s *ShuffleWriter) Abort() {
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
	if s.tmp {
		os.RemoveAll(s.dir)
	}
}

// ReadSegment reads a unit's rows from a map task's segment; a read cut
// short by the network is retried from the segment's start.
func ReadSegment(ctx context.Context, work storage.Location, seg Segment, schema *arrow.Schema) (recs []arrow.RecordBatch, err error) {
	err = storage.Retry(ctx, func() error {
		var err error
		recs, err = readSegmentOnce(ctx, work, seg, schema)
		return err
	})
	return recs, err
}

func readSegmentOnce(ctx context.Context, work storage.Location, seg Segment, schema *arrow.Schema) ([]arrow.RecordBatch, error) {
	url := work.URL(seg.Path)
	var r io.Reader
	if work.Local != "" {
		f, err := os.Open(filepath.Join(work.Local, filepath.FromSlash(seg.Path)))
		if err != nil {
			return nil, storage.Classify(fmt.Errorf("read %s: %w", url, err))
		}
		defer f.Close()
		r = io.NewSectionReader(f, seg.Offset, seg.Length)
	} else {
		rr, err := work.Bucket.NewRangeReader(ctx, work.Key(seg.Path), seg.Offset, seg.Length, nil)
		if err != nil {
			return nil, storage.Classify(fmt.Errorf("read %s: %w", url, err))
		}
		defer rr.Close()
		r = rr
	}
	rd, err := ipc.NewReader(r, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		if errs.Is(storage.Classify(err), errs.Transient) {
			return nil, storage.Classify(fmt.Errorf("read %s: %w", url, err))
		}
		return nil, errs.BadInputf("read %s at %d: %v", url, seg.Offset, err)
	}
	defer rd.Release()
	var recs []arrow.RecordBatch
	for rd.Next() {
		rec := rd.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	if err := rd.Err(); err != nil {
		for _, x := range recs {
			x.Release()
		}
		if errs.Is(storage.Classify(err), errs.Transient) {
			return nil, storage.Classify(fmt.Errorf("read %s: %w", url, err))
		}
		return nil, errs.BadInputf("read %s at %d: %v", url, seg.Offset, err)
	}
	return recs, nil
}

// Reader hands a detect or reduce task its partition one unit at a time:
// a unit's rows from every map task's segment, in map order (input order),
// sorted as run sorts a unit. Memory holds one unit.
type Reader struct {
	Work                storage.Location // where the map tasks' segments are
	Hist                *Histogram
	Schema              *arrow.Schema
	SliceCols, SortCols []int
	Units               []Unit            // the partition's units, in order
	IDs                 []int             // their indices in the plan
	Segs                map[int][]Segment // unit index -> map segments, in map order
	// Start and Rows are the partition's output rows. Sorted, when set,
	// replaces reading: run's in-memory path sorts the whole table once,
	// and each partition is a range of it.
	Start, Rows int64
	Sorted      *UnitRows
}

// Each reads the partition's units in order and hands each, sorted, to fn.
func (pr *Reader) Each(ctx context.Context, fn func(src *UnitRows, un Unit) error) error {
	if pr.Sorted != nil {
		if pr.Rows == 0 {
			return nil
		}
		view := &UnitRows{Cols: pr.Sorted.Cols, Ord: pr.Sorted.Ord[pr.Start : pr.Start+pr.Rows]}
		un := Unit{Start: pr.Start, Rows: pr.Rows}
		for _, u := range pr.Units {
			un.Chunks = append(un.Chunks, u.Chunks...)
		}
		return fn(view, un)
	}
	for k, un := range pr.Units {
		var recs []arrow.RecordBatch
		release := func() {
			for _, r := range recs {
				r.Release()
			}
		}
		for _, seg := range pr.Segs[pr.IDs[k]] {
			got, err := ReadSegment(ctx, pr.Work, seg, pr.Schema)
			if err != nil {
				release()
				return err
			}
			recs = append(recs, got...)
		}
		ord, err := Sort(pr.Hist, recs, pr.SliceCols, pr.SortCols)
		if err == nil && int64(len(ord)) != un.Rows {
			err = fmt.Errorf("internal: unit %d holds %d rows from the map tasks, the plan says %d", pr.IDs[k], len(ord), un.Rows)
		}
		if err != nil {
			release()
			return err
		}
		src, err := NewUnitRows(pr.Schema, recs)
		if err != nil {
			return err
		}
		src.Ord = ord
		err = fn(src, un)
		src.Release()
		if err != nil {
			return err
		}
	}
	return nil
}
