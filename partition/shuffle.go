package partition

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
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
	// XXHash64 is the hash of the range's bytes (hex), which a reduce
	// checks before it decodes them: a lean segment crosses the network
	// and sits in the store, and a damaged length in it would make the
	// Arrow IPC reader allocate by it. Run's local spill has none.
	XXHash64 string `json:"xxhash64,omitempty"`
}

// ShuffleWriter collects a map task's rows per unit, each unit Arrow IPC in
// a local file, and publishes them. A lean shuffle (the distributed map
// tasks', whose bytes cross the network and sit in the store) goes through
// the shuffle codec and zstd frames: about half the bytes of a plain one
// (LZ4 IPC; run's local spill), for about 15% more CPU. In a local work
// folder the files are the segments. In an object store they are
// concatenated into one object per map attempt, each unit a byte range of
// it: a map task writes one object whatever the number of units, and a
// reduce task reads only its units' ranges. A lean writer may hold the
// units' frames in memory (Hold); when all of them fit, a local work
// folder gets one file per map attempt too.
type ShuffleWriter struct {
	work   storage.Location
	prefix string // the attempt's prefix under the work location
	dir    string // local folder of the unit files
	tmp    bool   // dir is a temporary folder, removed when published
	lean   bool   // the shuffle codec and zstd frames, or plain LZ4 IPC
	mu     sync.Mutex
	units  map[int]*unitStream
	free   par.FreeList[*bytes.Buffer] // scratch buffers (getBuf)
	// hold is how many compressed bytes the units may keep in memory
	// instead of in files of their own (Hold; lean only), held how many
	// they keep.
	hold int64
	held atomic.Int64
	// join is how many bytes of small batches the units may hold to write
	// joined (Join: pieces under coalesceRows), pend how many they hold;
	// shedMu lets one Write at a time write the largest out when they pass
	// join.
	join     int64
	pend     atomic.Int64
	shedMu   sync.Mutex
	parallel int // units Publish ends at once (Hold)
}

// unitStream is one unit's file and its current IPC stream. Write calls
// for different units run concurrently; each unit's own are serialized.
type unitStream struct {
	mu     sync.Mutex
	file   *storage.DropBehind
	w      *ipc.Writer
	schema *arrow.Schema // the current stream's schema
	sink   sink          // where w writes: a pooled buffer during a Write
	rows   int64
	hash   *xxhash.Digest // of the file's bytes (lean)
	mem    []byte         // frames held in memory, not yet in file (Hold)
	// pending are small batches held to be written as one (Hold), of
	// pendingRows rows and pendingBytes bytes.
	pending      []arrow.RecordBatch
	pendingRows  int64
	pendingBytes int64
}

// sink is the io.Writer a unit's IPC writer is bound to. It points at a
// scratch buffer only while the unit is being written, so a map task holds
// as many scratch buffers as it writes units at once, not one per unit (a
// plan at a small --memory-limit has hundreds).
type sink struct{ buf *bytes.Buffer }

func (k *sink) Write(p []byte) (int, error) { return k.buf.Write(p) }

// zstdDecoders reuses the shuffle's zstd decoders (a reduce reads a
// segment per map task and unit).
var zstdDecoders sync.Pool

// segmentInMemory bounds what a segment small enough to be decoded at once
// (under 128 KiB stored) may decode to; a larger one is streamed a frame at
// a time. 34 KB of compressible 1 MB binaries decoded to 126 MB at once,
// which the pooled decoder then kept, and a reduce task at --memory-limit
// 717MiB peaked at 757 MiB.
const segmentInMemory = 8 << 20

// zstdMagic starts every zstd frame; a plain segment starts with an IPC
// message's continuation marker (0xFFFFFFFF) instead.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// getBuf and putBuf keep the writer's scratch buffers on a free list of
// its own: a sync.Pool drops them at every GC, and regrowing a batch-sized
// buffer by doubling cost a map task a fifth of its CPU (profiled). The
// list holds two per unit written at once.
func (s *ShuffleWriter) getBuf() *bytes.Buffer {
	if b, ok := s.free.Get(); ok {
		return b
	}
	return new(bytes.Buffer)
}

func (s *ShuffleWriter) putBuf(b *bytes.Buffer) {
	b.Reset()
	s.free.Put(b)
}

// NewShuffleWriter writes the map task's segments under prefix in work
// (through a folder in tmpDir when work is an object store); lean picks
// the format.
func NewShuffleWriter(work storage.Location, prefix, tmpDir string, lean bool) (*ShuffleWriter, error) {
	s := &ShuffleWriter{work: work, prefix: prefix, units: map[int]*unitStream{}, lean: lean}
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

// Hold lets a lean writer keep up to n bytes of the units' compressed
// frames in memory, a unit's frames going to a file of its own only once
// they no longer fit. A map task whose units all stay in memory writes one
// object (a file, in a local work folder) with every unit a byte range of
// it: a map task of a Hive output of 1,200 folders created 1,200 files,
// half a millisecond each (openat), and its reduce tasks opened them again.
// Publish ends the units' streams parallel at once.
func (s *ShuffleWriter) Hold(n int64, parallel int) {
	if s.lean {
		s.hold, s.parallel = max(n, 0), max(parallel, 1)
	}
}

// Join lets a lean writer hold a unit's small batches (under coalesceRows
// rows: routing an input batch to 1,200 units hands each about 20 rows),
// up to n bytes of them over all units, and encode them joined: each batch
// written is an IPC message, often a new stream (its schema and
// dictionaries, as the codec's choices change with its values) and a zstd
// frame, which cost a map task of that output more than its rows'
// encoding. Past n, the units holding most are written out. A budget of a
// few rows per unit only adds that work, so the caller gives one only
// where each unit can hold a useful share.
func (s *ShuffleWriter) Join(n int64) {
	if s.lean {
		s.join = max(n, 0)
	}
}

// coalesceRows is the size a holding writer joins a unit's small batches
// up to.
const coalesceRows = 4096

func unitFileName(u int) string { return fmt.Sprintf("u-%05d.arrows", u) }

// shuffleObject is the one object a map attempt writes to an object store
// (every unit a byte range of it).
const shuffleObject = "shuffle.arrows"

// SegmentPath is where a shuffle writer under prefix put unit u's
// segment: in the attempt's one object, or in a file of the unit's own.
func SegmentPath(prefix string, oneObject bool, u int) string {
	if oneObject {
		return prefix + shuffleObject
	}
	return prefix + unitFileName(u)
}

// Write appends rows to unit u's stream: as they are (plain), or encoded
// by the shuffle codec (lean; shufflecodec.go), where a batch that encodes
// to another schema than the stream's ends the stream and starts a new one
// in the same file. Writes to different units may run concurrently.
func (s *ShuffleWriter) Write(u int, rec arrow.RecordBatch) error {
	s.mu.Lock()
	us := s.units[u]
	if us == nil {
		us = &unitStream{}
		s.units[u] = us
	}
	s.mu.Unlock()
	if s.join > 0 && rec.NumRows() < coalesceRows {
		err := s.hold1(u, us, rec)
		if err == nil && s.pend.Load() > s.join {
			err = s.shed()
		}
		if err != nil {
			return errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
		}
		return nil
	}
	us.mu.Lock()
	defer us.mu.Unlock()
	err := s.writePending(u, us) // first: the rows stay in order
	if err == nil {
		err = s.write(u, us, rec)
	}
	if err != nil {
		return errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
	}
	return nil
}

// hold1 holds a small batch of unit u's, writing the unit's held batches
// joined once they reach coalesceRows.
func (s *ShuffleWriter) hold1(u int, us *unitStream, rec arrow.RecordBatch) error {
	us.mu.Lock()
	defer us.mu.Unlock()
	n := RecordBytes(rec)
	rec.Retain()
	us.pending = append(us.pending, rec)
	us.pendingRows += rec.NumRows()
	us.pendingBytes += n
	s.pend.Add(n)
	if us.pendingRows >= coalesceRows {
		return s.writePending(u, us)
	}
	return nil
}

// writePending writes unit u's held batches as one (us.mu held).
func (s *ShuffleWriter) writePending(u int, us *unitStream) error {
	if len(us.pending) == 0 {
		return nil
	}
	recs := us.pending
	s.pend.Add(-us.pendingBytes)
	us.pending, us.pendingRows, us.pendingBytes = nil, 0, 0
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	rec := recs[0]
	if len(recs) > 1 {
		var err error
		if rec, err = JoinBatches(recs, memory.DefaultAllocator); err != nil {
			return err
		}
		defer rec.Release()
	}
	return s.write(u, us, rec)
}

// shed writes the units' held batches, largest first, until they hold
// half the budget; one Write at a time sheds (the others go on: while it
// sheds, the budget is passed by at most their batches), locking one unit
// at a time.
func (s *ShuffleWriter) shed() error {
	if !s.shedMu.TryLock() {
		return nil
	}
	defer s.shedMu.Unlock()
	if s.pend.Load() <= s.join {
		return nil // another Write shed them
	}
	type held struct {
		u     int
		us    *unitStream
		bytes int64
	}
	s.mu.Lock()
	all := make([]held, 0, len(s.units))
	for u, us := range s.units {
		all = append(all, held{u: u, us: us})
	}
	s.mu.Unlock()
	for i := range all {
		all[i].us.mu.Lock()
		all[i].bytes = all[i].us.pendingBytes
		all[i].us.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b held) int { return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.u, b.u)) })
	for _, h := range all {
		if s.pend.Load() <= s.join/2 || h.bytes == 0 {
			break
		}
		h.us.mu.Lock()
		err := s.writePending(h.u, h.us)
		h.us.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *ShuffleWriter) write(u int, us *unitStream, rec arrow.RecordBatch) error {
	if s.lean {
		rec = encodeBatch(rec)
		defer rec.Release()
	}
	// The IPC writer writes each buffer, its padding and the message
	// apart; it writes to a scratch buffer, and flush moves the batch to
	// the file in one call (straight to the file, the plain spill of 16x
	// the 1M-row log at --memory-limit 128MiB, 200,000 batches of about 80
	// rows, was a hundred write calls a batch, 22 of 230 s).
	us.sink.buf = s.getBuf()
	defer func() {
		s.putBuf(us.sink.buf)
		us.sink.buf = nil
	}()
	if us.w != nil && !us.schema.Equal(rec.Schema()) {
		err := us.w.Close()
		if err == nil {
			err = s.flush(u, us)
		}
		if err != nil {
			return err
		}
		us.w = nil
	}
	if us.w == nil {
		opts := []ipc.Option{ipc.WithSchema(rec.Schema())}
		if !s.lean {
			opts = append(opts, ipc.WithLZ4())
		}
		us.w = ipc.NewWriter(&us.sink, opts...)
		us.schema = rec.Schema()
	}
	if err := us.w.Write(rec); err != nil {
		return err
	}
	us.rows += rec.NumRows()
	return s.flush(u, us)
}

// shuffleWindow is the shuffle encoders' zstd window: a frame is one
// batch of a unit, rarely more than a MiB. The level's default window
// held 8 MiB of history for the two encoders of a map task, which at
// --memory-limit 128MiB is what a map task of a 1,200-folder output went
// over the limit by (121-134 MB, 3.5-4.1 s for two tasks; 107-111 MB and
// 3.2-3.3 s with this window). The 1M-row log's shuffle is 0.04% larger.
const shuffleWindow = 1 << 20

// shuffleZstd compresses the shuffle: each batch's IPC bytes become one
// zstd frame, and a unit's file is the frames one after another, which a
// zstd reader decodes as one stream. The fastest level measured best
// (docs/benchmarks.md). A pool, not one Encoder: an Encoder's EncodeAll is
// safe for concurrent use but runs one call at a time per encoder it was
// given (WithEncoderConcurrency), and a map process compresses units of
// several tasks at once.
var shuffleZstd = sync.Pool{New: func() any {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true), zstd.WithEncoderCRC(false), zstd.WithWindowSize(shuffleWindow))
	return enc
}}

// flush moves what the unit's writer wrote to its sink into its file:
// as it is (plain), or as one zstd frame (lean).
func (s *ShuffleWriter) flush(u int, us *unitStream) error {
	if us.sink.buf.Len() == 0 {
		return nil
	}
	if !s.lean {
		if err := s.spill(u, us); err != nil {
			return err
		}
		_, err := us.file.Write(us.sink.buf.Bytes())
		us.sink.buf.Reset()
		return err
	}
	frame := s.getBuf()
	enc := shuffleZstd.Get().(*zstd.Encoder)
	out := enc.EncodeAll(us.sink.buf.Bytes(), frame.AvailableBuffer())
	shuffleZstd.Put(enc)
	us.sink.buf.Reset()
	if us.hash == nil {
		us.hash = xxhash.New()
	}
	us.hash.Write(out)
	defer func() {
		*frame = *bytes.NewBuffer(out[:0]) // keeps what EncodeAll grew
		s.putBuf(frame)
	}()
	if us.file == nil && s.hold > 0 {
		if s.held.Add(int64(len(out))) <= s.hold {
			us.mem = append(us.mem, out...)
			return nil
		}
		s.held.Add(-int64(len(out)))
	}
	if err := s.spill(u, us); err != nil {
		return err
	}
	_, err := us.file.Write(out)
	return err
}

// spill gives unit u a file of its own (once) and moves its held frames
// there.
func (s *ShuffleWriter) spill(u int, us *unitStream) error {
	if us.file == nil {
		f, err := os.Create(filepath.Join(s.dir, unitFileName(u)))
		if err != nil {
			return err
		}
		us.file = storage.NewDropBehind(f)
	}
	if len(us.mem) == 0 {
		return nil
	}
	_, err := us.file.Write(us.mem)
	s.held.Add(-int64(len(us.mem)))
	us.mem = nil
	return err
}

// sum is the hash of what the unit's file holds, or "" (plain).
func (us *unitStream) sum() string {
	if us.hash == nil {
		return ""
	}
	return fmt.Sprintf("%016x", us.hash.Sum64())
}

// publish ends every stream and makes the segments visible; part maps a
// unit to its
func (s *ShuffleWriter) Publish(ctx context.Context, part []int) ([]Segment, error) {
	units := make([]int, 0, len(s.units))
	for u := range s.units {
		units = append(units, u)
	}
	slices.Sort(units)
	// Each unit's held batches written and its stream ended, several
	// units at once (a holding writer's units write most of their rows
	// here).
	err := par.ForEach(ctx, len(units), max(s.parallel, 1), func(i int) error {
		u := units[i]
		us := s.units[u]
		if err := s.writePending(u, us); err != nil {
			return err
		}
		us.sink.buf = s.getBuf()
		err := us.w.Close()
		if err == nil {
			err = s.flush(u, us)
		}
		s.putBuf(us.sink.buf)
		us.sink.buf = nil
		us.w = nil
		return err
	})
	if err != nil {
		return nil, errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
	}
	held := true // every unit's frames in memory
	for _, u := range units {
		held = held && s.units[u].file == nil
	}
	out := []Segment{}
	if !s.tmp && !held {
		for _, u := range units {
			us := s.units[u]
			if err := s.spill(u, us); err != nil {
				return nil, errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
			}
			st, err := us.file.Stat()
			if err != nil {
				return nil, errs.TransientErr(err)
			}
			err = us.file.Close()
			us.file = nil
			if err != nil {
				return nil, errs.TransientErr(err)
			}
			out = append(out, Segment{Partition: part[u], Unit: u, Rows: us.rows, Bytes: st.Size(), Length: st.Size(), Path: SegmentPath(s.prefix, false, u), XXHash64: us.sum()})
		}
		return out, nil
	}
	if !s.tmp && len(units) == 0 {
		return out, nil
	}
	// One object: every unit a byte range of it, from its file and then
	// its frames held in memory.
	name := SegmentPath(s.prefix, true, 0)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var w io.WriteCloser
	if s.tmp {
		bw, err := s.work.Bucket.NewWriter(cctx, s.work.Key(name), nil)
		if err != nil {
			return nil, storage.Classify(fmt.Errorf("create %s: %w", s.work.URL(name), err))
		}
		w = bw
	} else {
		f, err := os.Create(filepath.Join(s.dir, shuffleObject))
		if err != nil {
			return nil, errs.TransientErr(fmt.Errorf("shuffle to %s: %w", s.dir, err))
		}
		w = storage.NewDropBehind(f)
	}
	var off int64
	for _, u := range units {
		us := s.units[u]
		var n int64
		if f := us.file; f != nil {
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				cancel()
				w.Close()
				return nil, errs.TransientErr(err)
			}
			var err error
			if n, err = io.Copy(w, f); err != nil {
				cancel()
				w.Close()
				return nil, storage.Classify(fmt.Errorf("write %s: %w", s.work.URL(name), err))
			}
		}
		if len(us.mem) > 0 {
			if _, err := w.Write(us.mem); err != nil {
				cancel()
				w.Close()
				return nil, storage.Classify(fmt.Errorf("write %s: %w", s.work.URL(name), err))
			}
			n += int64(len(us.mem))
		}
		out = append(out, Segment{Partition: part[u], Unit: u, Rows: us.rows, Bytes: n, Offset: off, Length: n, Path: name, XXHash64: us.sum()})
		off += n
	}
	if err := w.Close(); err != nil {
		return nil, storage.Classify(fmt.Errorf("write %s: %w", s.work.URL(name), err))
	}
	for _, u := range units { // published: let go of what was held
		s.held.Add(-int64(len(s.units[u].mem)))
		s.units[u].mem = nil
	}
	if s.tmp {
		s.Abort() // the local files are published: remove them
	}
	return out, nil
}

// abort closes and, when temporary, removes the local files.
func (s *ShuffleWriter) Abort() {
	for _, us := range s.units {
		if us.file != nil {
			us.file.Close()
			us.file = nil
		}
		for _, r := range us.pending {
			r.Release()
		}
		s.pend.Add(-us.pendingBytes)
		us.pending, us.pendingRows, us.pendingBytes = nil, 0, 0
	}
	if s.tmp {
		os.RemoveAll(s.dir)
	}
}

// ReadSegment reads a unit's rows from a map task's segment. The segment
// is read whole first (storage.GetRange: a read cut short by the network
// is retried from the segment's start, an object shorter than the segment
// is bad input); an error after that is damaged bytes.
func ReadSegment(ctx context.Context, work storage.Location, seg Segment, schema *arrow.Schema) ([]arrow.RecordBatch, error) {
	comp, err := getSegment(ctx, work, seg)
	if err != nil {
		return nil, err
	}
	return decodeSegment(work, seg, schema, comp)
}

// getSegment reads a segment's bytes.
func getSegment(ctx context.Context, work storage.Location, seg Segment) ([]byte, error) {
	comp, err := storage.GetRange(ctx, work, seg.Path, seg.Offset, seg.Length)
	if err != nil {
		if errs.Is(err, errs.BadInput) { // missing or cut short
			err = errs.WithHint(err, "run the map task that wrote it again")
		}
		return nil, err
	}
	return comp, nil
}

// decodeSegment checks and decodes a segment's bytes, comp.
func decodeSegment(work storage.Location, seg Segment, schema *arrow.Schema, comp []byte) ([]arrow.RecordBatch, error) {
	url := work.URL(seg.Path)
	if seg.XXHash64 != "" {
		if got := fmt.Sprintf("%016x", xxhash.Sum64(comp)); got != seg.XXHash64 {
			return nil, errs.WithHint(errs.BadInputf("read %s at %d: the shuffle is damaged: its xxhash64 is %s, the map task wrote %s", url, seg.Offset, got, seg.XXHash64),
				"run the map task that wrote it again")
		}
	}
	// A segment is zstd frames of one or more IPC streams
	// (shufflecodec.go), read until its bytes end.
	var src io.Reader = bytes.NewReader(comp)
	if bytes.HasPrefix(comp, zstdMagic) { // a lean segment
		zr, _ := zstdDecoders.Get().(*zstd.Decoder)
		if zr == nil {
			var err error
			if zr, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.IgnoreChecksum(true), zstd.WithDecoderMaxMemory(segmentInMemory)); err != nil {
				return nil, fmt.Errorf("internal: %w", err)
			}
		}
		// A *bytes.Buffer under 128 KiB is decoded at once, not streamed,
		// up to segmentInMemory of output.
		if err := zr.Reset(bytes.NewBuffer(comp)); err != nil {
			return nil, fmt.Errorf("internal: %w", err)
		}
		defer func() {
			zr.Reset(nil)
			zstdDecoders.Put(zr)
		}()
		src = zr
	}
	br := bufio.NewReaderSize(src, 1<<16)
	var recs []arrow.RecordBatch
	err := eachStreamBatch(br, func(rec arrow.RecordBatch) error {
		dec, err := decodeBatch(rec, schema)
		if err != nil {
			return err
		}
		recs = append(recs, dec)
		return nil
	})
	if err != nil {
		for _, x := range recs {
			x.Release()
		}
		return nil, errs.WithHint(errs.BadInputf("read %s at %d: the shuffle is damaged: %v", url, seg.Offset, err), "run the map task that wrote it again")
	}
	return recs, nil
}

// eachStreamBatch reads the Arrow IPC streams in br one after another
// until its bytes end, and hands each batch to fn, which takes ownership
// of it.
func eachStreamBatch(br *bufio.Reader, fn func(arrow.RecordBatch) error) error {
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		// No limit on a message's body (arrow-go's default is 256 MiB): a
		// unit's piece of one input row group can be larger, and a segment
		// is what this process spilled or, hashed (ReadSegment), what a map
		// task wrote.
		rd, err := ipc.NewReader(br, ipc.WithAllocator(memory.DefaultAllocator), ipc.WithBodySizeLimit(0))
		if err != nil {
			return err
		}
		for rd.Next() {
			rec := rd.RecordBatch()
			rec.Retain()
			if err := fn(rec); err != nil {
				rd.Release()
				return err
			}
		}
		err = rd.Err()
		rd.Release()
		if err != nil {
			return err
		}
	}
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
	// replaces reading: it holds the output rows from SortedStart on,
	// sorted (run's in-memory path sorts the whole table once; a unit of
	// several partitions is read once for all of them), and the partition
	// is a range of it.
	Start, Rows int64
	Sorted      *UnitRows
	SortedStart int64
	// Parallel is how many map tasks' segments of a unit are read at once
	// (and, in pipeline, how many goroutines write the partition).
	Parallel int
	// Blocks, when set, reads the segments (SegmentBlocks: a task's
	// adjacent segments with one request).
	Blocks *SegmentBlocks
}

// Each reads the partition's units in order and hands each, sorted, to fn.
func (pr *Reader) Each(ctx context.Context, fn func(src *UnitRows, un Unit) error) error {
	if pr.Sorted != nil {
		if pr.Rows == 0 {
			return nil
		}
		from := pr.Start - pr.SortedStart
		view := pr.Sorted.View(pr.Sorted.Ord[from : from+pr.Rows])
		un := Unit{Start: pr.Start, Rows: pr.Rows}
		for _, u := range pr.Units {
			un.Chunks = append(un.Chunks, ChunksIn(u.Chunks, pr.Start, pr.Start+pr.Rows)...)
		}
		return fn(view, un)
	}
	for k, un := range pr.Units {
		if un.Start < pr.Start || un.Start+un.Rows > pr.Start+pr.Rows {
			// A unit of several partitions is read once for all of them
			// and handed over as Sorted (pipeline's run).
			return fmt.Errorf("internal: unit %d holds rows [%d, +%d) beyond its partition's [%d, +%d)", pr.IDs[k], un.Start, un.Rows, pr.Start, pr.Rows)
		}
		src, err := pr.Load(ctx, k)
		if err != nil {
			return err
		}
		err = fn(src, un)
		src.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// smallUnitBytes is the most a unit's segments may hold together for
// them to be read all at once: a request's latency, not the bytes, bounds
// reading a small unit from an object store (a reduce task of 240 Hive
// folders read each folder's segment from every map task one or two at a
// time, 10 ms each), and reading them at once holds at most this much
// more than reading them parallel at a time.
const smallUnitBytes = 4 << 20

// segmentReaders is how many of segs Load reads at once: parallel, or up
// to 16 for a small unit.
func segmentReaders(segs []Segment, parallel int) int {
	var n int64
	for _, s := range segs {
		n += s.Length
	}
	if n <= smallUnitBytes {
		return max(parallel, min(len(segs), 16))
	}
	return parallel
}

// Load reads unit k (of Units) from its map segments and sorts it. The
// caller releases it.
func (pr *Reader) Load(ctx context.Context, k int) (*UnitRows, error) {
	un := pr.Units[k]
	var recs []arrow.RecordBatch
	release := func() {
		for _, r := range recs {
			r.Release()
		}
	}
	segs := pr.Segs[pr.IDs[k]]
	got := make([][]arrow.RecordBatch, len(segs))
	err := par.ForEach(ctx, len(segs), segmentReaders(segs, pr.Parallel), func(i int) error {
		var err error
		if pr.Blocks != nil {
			got[i], err = pr.Blocks.ReadSegment(ctx, segs[i], pr.Schema)
		} else {
			got[i], err = ReadSegment(ctx, pr.Work, segs[i], pr.Schema)
		}
		return err
	})
	for _, g := range got { // in map order, which is input order
		recs = append(recs, g...)
	}
	if err != nil {
		release()
		return nil, err
	}
	ord, err := Sort(pr.Hist, recs, pr.SliceCols, pr.SortCols, pr.Parallel)
	if err == nil && int64(len(ord)) != un.Rows {
		err = fmt.Errorf("internal: unit %d holds %d rows from the map tasks, the plan says %d", pr.IDs[k], len(ord), un.Rows)
	}
	if err != nil {
		release()
		return nil, err
	}
	src, err := NewUnitRows(pr.Schema, recs)
	if err != nil {
		return nil, err
	}
	src.Ord = ord
	return src, nil
}
