package storage

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/relayout/relayout/internal/errs"
)

func TestListLocal(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"b.parquet", "a.PARQUET", "x.csv", "_SUCCESS", "_tmp/c.parquet", ".hidden/d.parquet", "sub/e.parquet"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644)
	}
	objs, err := List(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		rel, _ := filepath.Rel(dir, o.URL)
		got = append(got, rel)
	}
	want := []string{"a.PARQUET", "b.parquet", "sub/e.parquet"}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("listed %v, want %v", got, want)
		}
	}
	if objs, err := List(context.Background(), []string{filepath.Join(dir, "*.parquet")}); err != nil || len(objs) != 1 {
		t.Fatalf("glob: %v %v", objs, err)
	}
	if _, err := List(context.Background(), []string{filepath.Join(dir, "nothing")}); err == nil {
		t.Fatal("a missing input was accepted")
	}
}

func TestReaderAtOverBlobRangeReads(t *testing.T) {
	ctx := context.Background()
	b := MemBucket("readerat-test")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := b.WriteAll(ctx, "pre/obj.parquet", data, nil); err != nil {
		t.Fatal(err)
	}
	objs, err := List(ctx, []string{"mem://readerat-test/pre/"})
	if err != nil || len(objs) != 1 {
		t.Fatalf("list: %v %v", objs, err)
	}
	var counts Counters
	r, err := NewReaderAt(ctx, objs[0], &counts)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != int64(len(data)) {
		t.Fatalf("size %d", r.Size())
	}
	// Footer-region reads are served by one tail request.
	for _, off := range []int64{int64(len(data)) - 8, int64(len(data)) - 1000, int64(len(data)) - 200_000} {
		buf := make([]byte, 8)
		if _, err := r.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf, data[off:off+8]) {
			t.Fatalf("tail read at %d wrong", off)
		}
	}
	if counts.Requests.Load() != 1 {
		t.Fatalf("footer reads took %d requests, want 1", counts.Requests.Load())
	}
	buf := make([]byte, 1000)
	if _, err := r.ReadAt(buf, 5000); err != nil || !bytes.Equal(buf, data[5000:6000]) {
		t.Fatalf("range read: %v", err)
	}
	if counts.Requests.Load() != 2 || counts.Bytes.Load() != TailBytes+1000 {
		t.Fatalf("counted %d requests, %d bytes", counts.Requests.Load(), counts.Bytes.Load())
	}
	// Past the end: partial read and EOF.
	n, err := r.ReadAt(make([]byte, 100), int64(len(data))-10)
	if n != 10 || err != io.EOF {
		t.Fatalf("read past end: %d %v", n, err)
	}
	if pos, _ := r.Seek(0, io.SeekEnd); pos != int64(len(data)) {
		t.Fatalf("seek end: %d", pos)
	}
}

// TestReadingAFolderIsBadInput: a folder read as an object (an empty name,
// or a damaged one that names a folder) is bad input (or, for Get, not
// found) at once, by Get and GetRange: no retry makes it an object (FuzzPackedDetect found a task
// that retried one until its deadline, exit 1).
func TestReadingAFolderIsBadInput(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "work", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work", "obj"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	loc, err := OpenDir(ctx, filepath.Join(dir, "work"), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "sub", "sub/"} {
		// Get leaves not found unclassified (its callers ask IsNotFound).
		if _, err := Get(ctx, loc, name); !errs.Is(err, errs.BadInput) && (name == "" || !IsNotFound(err)) {
			t.Errorf("Get(%q), a folder: %v (class %v), want bad input or not found", name, err, errs.ClassOf(err))
		}
		if _, err := GetRange(ctx, loc, name, 0, 4); !errs.Is(err, errs.BadInput) {
			t.Errorf("GetRange(%q), a folder: %v (class %v), want bad input", name, err, errs.ClassOf(err))
		}
	}
	if _, err := GetRange(ctx, loc, "obj/x", 0, 4); !errs.Is(err, errs.BadInput) {
		t.Errorf("GetRange through a file: %v (class %v), want bad input", err, errs.ClassOf(err))
	}
	if data, err := GetRange(ctx, loc, "obj", 2, 4); err != nil || string(data) != "2345" {
		t.Errorf("GetRange of an object: %q, %v", data, err)
	}
}
