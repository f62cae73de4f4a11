package source

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/relayout/relayout/fingerprint"
	"github.com/relayout/relayout/internal/arrowmem"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/gen"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/internal/testutil"
	"github.com/relayout/relayout/storage"
)

// TestMain poisons arrow buffers when freed (arrowmem.TestMain).
func TestMain(m *testing.M) { arrowmem.TestMain(m) }

type crcRow struct {
	ID      int64   `parquet:"id"`
	Country string  `parquet:"country,dict"`
	Score   float64 `parquet:"score"`
	Tags    []int32 `parquet:"tags"`
}

// writeCRCFile writes rows with parquet-go, which puts a CRC32 in every
// page header (as parquet-mr and Spark do; arrow-go writes none), in small
// pages and several row groups.
func writeCRCFile(t testing.TB, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[crcRow](f, parquet.PageBufferSize(2048), parquet.Compression(&zstd.Codec{}))
	r := rand.New(rand.NewPCG(1, 2))
	countries := []string{"US", "DE", "FR", "JP", "BR"}
	for i := 0; i < n; i++ {
		row := crcRow{ID: int64(i), Country: countries[r.IntN(len(countries))], Score: r.Float64(), Tags: []int32{int32(r.IntN(9)), int32(i % 7)}}
		if _, err := w.Write([]crcRow{row}); err != nil {
			t.Fatal(err)
		}
		if i%4000 == 3999 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// readSum opens path and decodes every row group, returning the content
// fingerprint, or the first error. It must never panic.
func readSum(t *testing.T, path string) (sum fingerprint.Sum, err error) {
	t.Helper()
	ctx := context.Background()
	objs, err := storage.List(ctx, []string{path})
	if err != nil {
		return sum, err
	}
	tbl, err := Open(ctx, objs, nil)
	if err != nil {
		return sum, err
	}
	defer tbl.Close()
	for _, ref := range tbl.RowGroups() {
		rec, err := tbl.Read(ctx, ref, nil, 2)
		if err != nil {
			return sum, err
		}
		s, err := func() (s fingerprint.Sum, err error) {
			defer errs.Recover(&err, "fingerprint")
			return fingerprint.Record(rec)
		}()
		rec.Release()
		if err != nil {
			return sum, err
		}
		sum.Add(s)
	}
	return sum, nil
}

// TestPageCRCsAreChecked: one flipped byte in a data page of a file that
// carries page CRCs is bad input (exit 3) naming file, row group, column
// and page. Before the check, 51 of 60 such flips decoded "fine" into other
// values.
func TestPageCRCsAreChecked(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeCRCFile(t, good, 12_000)
	want, err := readSum(t, good)
	if err != nil {
		t.Fatalf("intact file: %v", err)
	}
	data, _ := os.ReadFile(good)
	// The byte ranges of the pages' data, from the footer and page headers.
	objs, _ := storage.List(context.Background(), []string{good})
	tbl, err := Open(context.Background(), objs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pages [][2]int
	md, err := tbl.Files[0].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	for rg := 0; rg < md.NumRowGroups(); rg++ {
		for c := 0; c < md.RowGroup(rg).NumColumns(); c++ {
			cc, err := md.RowGroup(rg).ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
				start = cc.DictionaryPageOffset()
			}
			pages = append(pages, pageRanges(t, data[start:start+cc.TotalCompressedSize()], int(start))...)
		}
	}
	tbl.Close()
	if len(pages) < 20 {
		t.Fatalf("only %d pages: the fixture should have many", len(pages))
	}
	r := rand.New(rand.NewPCG(3, 4))
	bad := filepath.Join(dir, "bad.parquet")
	for trial := 0; trial < testutil.Trials(60); trial++ {
		pg := pages[r.IntN(len(pages))]
		at := pg[0] + r.IntN(pg[1]-pg[0])
		cp := append([]byte(nil), data...)
		cp[at] ^= byte(1 + r.IntN(255))
		os.WriteFile(bad, cp, 0o644)
		_, err := readSum(t, bad)
		if !errs.Is(err, errs.BadInput) || !strings.Contains(err.Error(), "page CRC32 mismatch") || !strings.Contains(err.Error(), "bad.parquet: row group") {
			t.Fatalf("trial %d, byte %d flipped: %v (class %v), want exit 3 naming the page CRC, file and row group", trial, at, err, errs.ClassOf(err))
		}
	}
	_ = want
	t.Logf("%d bytes flipped in data pages: all exit 3, naming the file, row group, column and page", testutil.Trials(60))
}

// TestAnyFlippedByteIsCaughtOrHarmless: a byte flipped anywhere in the file
// (headers, footer, page index included) either fails as bad input (exit
// 3), or decodes to exactly the original rows; never a panic, never exit 4,
// never other values.
func TestAnyFlippedByteIsCaughtOrHarmless(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.parquet")
	writeCRCFile(t, good, 6_000)
	want, err := readSum(t, good)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	r := rand.New(rand.NewPCG(5, 6))
	bad := filepath.Join(dir, "bad.parquet")
	caught, harmless := 0, 0
	for trial := 0; trial < testutil.Trials(200); trial++ {
		at := r.IntN(len(data))
		cp := append([]byte(nil), data...)
		cp[at] ^= byte(1 + r.IntN(255))
		os.WriteFile(bad, cp, 0o644)
		got, err := readSum(t, bad)
		switch {
		case err == nil && got == want:
			harmless++
		case err == nil:
			t.Fatalf("trial %d, byte %d of %d flipped: decoded without error into other rows (%v, want %v)", trial, at, len(data), got, want)
		case errs.Is(err, errs.BadInput):
			caught++
		default:
			t.Fatalf("trial %d, byte %d of %d flipped: %v (class %v), want exit 3", trial, at, len(data), err, errs.ClassOf(err))
		}
	}
	t.Logf("%d flipped bytes: %d caught (exit 3), %d harmless (same rows)", caught+harmless, caught, harmless)
}

// pageRanges returns the [start, end) file offsets of each page's data in
// one column chunk (chunk starts at file offset base).
func pageRanges(t *testing.T, chunk []byte, base int) [][2]int {
	t.Helper()
	var out [][2]int
	for pos := 0; pos < len(chunk); {
		h, hdr, err := parsePageHeader(chunk[pos:])
		if err != nil {
			t.Fatalf("page header at %d: %v", base+pos, err)
		}
		start := pos + hdr
		end := start + int(h.CompressedPageSize)
		if h.CompressedPageSize > 0 {
			out = append(out, [2]int{base + start, base + end})
		}
		pos = end
	}
	return out
}

// TestManyFilesKeepFewOpen: a table of many files keeps at most MaxOpen of
// them open (each open file holds its footer, tens of KB), reopens the
// others when they are read again, and reads the same values either way.
func TestManyFilesKeepFewOpen(t *testing.T) {
	dir := t.TempDir()
	if _, err := gen.Write(dir, gen.Options{Rows: 6_000, Files: 60, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	objs, err := storage.List(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	sum := func(maxOpen int) (fingerprint.Sum, int) {
		tbl, err := Open(context.Background(), objs, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tbl.Close()
		tbl.MaxOpen = maxOpen
		var total fingerprint.Sum
		most := 0
		var mu sync.Mutex
		err = par.ForEach(context.Background(), len(tbl.RowGroups()), 4, func(i int) error {
			rec, err := tbl.Read(context.Background(), tbl.RowGroups()[i], nil, 2)
			if err != nil {
				return err
			}
			defer rec.Release()
			s, err := fingerprint.Record(rec)
			mu.Lock()
			total.Add(s)
			tbl.mu.Lock()
			most = max(most, tbl.lru.Len())
			tbl.mu.Unlock()
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return total, most
	}
	all, _ := sum(1000)
	few, most := sum(3)
	if few != all || few.Rows != 6_000 {
		t.Fatalf("with 3 files open: %v, with all open: %v", few, all)
	}
	if most > 3+4 { // MaxOpen plus the files pinned by the 4 readers
		t.Fatalf("%d files open at once with MaxOpen 3", most)
	}
}
