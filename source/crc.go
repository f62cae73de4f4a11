package source

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/storage"
)

// crcReaderAt checks the page CRC32s of every column chunk read through it.
// arrow-go neither writes nor checks page CRCs; files from parquet-mr,
// parquet-go, Spark and others carry them, and a flipped bit in a page
// would otherwise decode into different values that the content
// fingerprint then accepts as the input. The decoder reads each column
// chunk with one ReadAt of exactly its byte range (buffered streams off),
// so the check costs no extra I/O: the pages are walked in the bytes just
// read, before the decoder sees them.
type crcReaderAt struct {
	*storage.ReaderAt
	url    string
	chunks map[int64]chunkRef // by the chunk's first byte; fixed before any read

	// md, when set, is indexed on the first read past the footer (lazy: a
	// file opened for its footer alone, 10,000 small files' schemas and
	// costs, never reads a chunk).
	md      *metadata.FileMetaData
	indexed sync.Once
}

type chunkRef struct {
	rowGroup int
	column   string
	length   int64
}

// index records where each column chunk lies, from the footer.
func (r *crcReaderAt) index(md *metadata.FileMetaData) {
	r.chunks = map[int64]chunkRef{}
	for rg := 0; rg < md.NumRowGroups(); rg++ {
		rgm := md.RowGroup(rg)
		for c := 0; c < rgm.NumColumns(); c++ {
			cc, err := rgm.ColumnChunk(c)
			if err != nil {
				continue
			}
			start := cc.DataPageOffset()
			if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && start > cc.DictionaryPageOffset() {
				start = cc.DictionaryPageOffset()
			}
			r.chunks[start] = chunkRef{rowGroup: rg, column: cc.PathInSchema().String(), length: cc.TotalCompressedSize()}
		}
	}
}

// ReadAt reads, then checks the pages when p is a whole column chunk.
func (r *crcReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.ReaderAt.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return n, err
	}
	if r.md != nil {
		r.indexed.Do(func() { r.index(r.md) })
	}
	if c, ok := r.chunks[off]; ok && int64(n) >= c.length {
		if _, _, cerr := checkPages(p[:c.length], r.url, c); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

// checkPages walks the pages of one column chunk and compares each page's
// CRC32, where its header has one, with the page's bytes. A header that
// does not parse is left to the decoder, which reports it. It returns how
// many pages it walked and how many of them carry a CRC.
func checkPages(chunk []byte, url string, c chunkRef) (pages, withCRC int, err error) {
	for pos := 0; pos < len(chunk); pages++ {
		h, n, err := parsePageHeader(chunk[pos:])
		if err != nil {
			return pages, withCRC, nil
		}
		start := pos + n
		end := start + int(h.CompressedPageSize)
		if h.CompressedPageSize < 0 || end > len(chunk) || end <= pos {
			return pages, withCRC, nil
		}
		if h.CRC != 0 {
			withCRC++
			if got := crc32.ChecksumIEEE(chunk[start:end]); got != uint32(h.CRC) {
				pe := &PageCRCError{URL: url, RowGroup: c.rowGroup, Column: c.column, Page: pages, Header: uint32(h.CRC), Data: got}
				return pages, withCRC, errs.WithHint(errs.BadInputErr(pe), "restore the file from its source or leave it out of --input")
			}
		}
		pos = end
	}
	return pages, withCRC, nil
}

// PageCRCError is a page whose bytes disagree with its header's CRC32.
type PageCRCError struct {
	URL          string
	RowGroup     int
	Column       string
	Page         int // within its column chunk, from 0, dictionary page included
	Header, Data uint32
}

// Where names the page: "row group R, column C, page P".
func (e *PageCRCError) Where() string {
	return fmt.Sprintf("row group %d, column %s, page %d", e.RowGroup, e.Column, e.Page)
}

func (e *PageCRCError) Error() string {
	return fmt.Sprintf("read %s: %s: page CRC32 mismatch (header %08x, data %08x): the file is damaged", e.URL, e.Where(), e.Header, e.Data)
}

// PageCheck is what CheckPages found.
type PageCheck struct {
	Pages   int // pages walked
	WithCRC int // of which carry a CRC32 (all of them in relayout's output)
}

// CheckPages reads every column chunk of a Parquet object and checks the
// CRC32 of every page that carries one. A mismatch is a bad-input error
// naming the row group, column and page; verify uses it to say where a
// file whose xxhash64 changed is damaged.
func CheckPages(ctx context.Context, obj storage.Object) (pc PageCheck, err error) {
	h, err := openHandle(ctx, obj, nil)
	if err != nil {
		return pc, err
	}
	defer h.ra.Close()
	cra := &crcReaderAt{ReaderAt: h.ra, url: obj.URL}
	cra.index(h.pq.MetaData())
	starts := make([]int64, 0, len(cra.chunks))
	for off := range cra.chunks {
		starts = append(starts, off)
	}
	slices.Sort(starts)
	var buf []byte
	for _, off := range starts {
		c := cra.chunks[off]
		if c.length < 0 || off+c.length > obj.Size {
			return pc, errs.BadInputf("read %s: row group %d, column %s: the column chunk lies outside the file", obj.URL, c.rowGroup, c.column)
		}
		buf = slices.Grow(buf[:0], int(c.length))[:c.length]
		if _, err := cra.ReaderAt.ReadAt(buf, off); err != nil && err != io.EOF {
			return pc, err
		}
		n, k, err := checkPages(buf, obj.URL, c)
		pc.Pages += n
		pc.WithCRC += k
		if err != nil {
			return pc, err
		}
	}
	return pc, nil
}

// parsePageHeader decodes the Thrift page header at the start of b and
// returns it with its length in bytes.
func parsePageHeader(b []byte) (*format.PageHeader, int, error) {
	var proto thrift.CompactProtocol
	var h format.PageHeader
	rd := proto.NewReaderFromBytes(b)
	if err := thrift.NewDecoder(rd).Decode(&h); err != nil {
		return nil, 0, err
	}
	return &h, rd.BytesRead(), nil
}
