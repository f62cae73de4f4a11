package partition

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/cespare/xxhash/v2"
	flatbuffers "github.com/google/flatbuffers/go"
	"github.com/klauspost/compress/zstd"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
)

// TestShuffleSegmentHashIsChecked: a lean segment carries the xxhash64 of
// its bytes, and a reduce checks it before it decodes anything. The
// frames' own checksums are checked only after their bytes reach the IPC
// reader, which allocates a message body by the length the message
// claims (with no limit for segments: TestShuffleBatchOver256MiB): a
// segment whose record batch claims a 2^40-byte body (in a well-formed
// zstd frame) would be a fatal out-of-memory error. Run's local spill
// (plain) has no hash.
func TestShuffleSegmentHashIsChecked(t *testing.T) {
	ctx := context.Background()
	rec := codecBatch(t, 100, 7, false)
	defer rec.Release()
	dir := t.TempDir()
	work, err := storage.OpenDir(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, lean := range []bool{false, true} {
		sw, err := NewShuffleWriter(work, fmt.Sprintf("m-%v/", lean), "", lean)
		if err != nil {
			t.Fatal(err)
		}
		if err := sw.Write(0, rec); err != nil {
			t.Fatal(err)
		}
		segs, err := sw.Publish(ctx, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(segs[0].Path)))
		if err != nil {
			t.Fatal(err)
		}
		if !lean {
			if segs[0].XXHash64 != "" {
				t.Fatalf("plain segment hashed: %+v", segs[0])
			}
			continue
		}
		if want := fmt.Sprintf("%016x", xxhash.Sum64(data)); segs[0].XXHash64 != want {
			t.Fatalf("segment hash %q, its bytes hash to %s", segs[0].XXHash64, want)
		}
		// The same rows as a plain IPC stream whose record batch claims
		// a body of 2^40 bytes, compressed as the shuffle compresses.
		var buf bytes.Buffer
		w := ipc.NewWriter(&buf, ipc.WithSchema(rec.Schema()))
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		w.Close()
		b := buf.Bytes()
		first := 8 + int(binary.LittleEndian.Uint32(b[4:])) // the record batch's message
		meta := b[first+8:]
		msg := flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}
		o := flatbuffers.UOffsetT(msg.Offset(10)) // Message.bodyLength
		if o == 0 || msg.GetInt64(msg.Pos+o) == 0 {
			t.Fatal("no body length to edit")
		}
		binary.LittleEndian.PutUint64(meta[msg.Pos+o:], 1<<40)
		enc, _ := zstd.NewWriter(nil)
		bad := enc.EncodeAll(b, nil)
		seg := segs[0]
		seg.Length = int64(len(bad))
		if err := storage.Put(ctx, work, seg.Path, bad, storage.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = ReadSegment(ctx, work, seg, rec.Schema())
		if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "xxhash64") || !strings.Contains(err.Error(), seg.Path) {
			t.Fatalf("a segment claiming a 2^40-byte body: %v, want bad input naming it and its hash", err)
		}
	}
}

// TestShuffleBatchOver256MiB: one unit's piece of an input row group can
// hold more than 256 MiB (a large row group of a table already in slice
// order goes to one unit), which arrow-go's IPC reader refuses by default
// as a message body over its limit: the reduce then called the shuffle
// damaged. Both formats now read it back.
func TestShuffleBatchOver256MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writes and reads 272 MiB twice (a few seconds); make test runs it")
	}
	n := 34 << 20 // int64s: 272 MiB
	rec := testutil.Int64Batch(make([]byte, n*8))
	defer rec.Release()
	for _, lean := range []bool{false, true} {
		got := shuffleRoundTrip(t, []arrow.RecordBatch{rec}, lean)
		var rows int64
		for _, g := range got {
			rows += g.NumRows()
			g.Release()
		}
		if rows != int64(n) {
			t.Fatalf("lean %v: %d rows back, wrote %d", lean, rows, n)
		}
	}
}
