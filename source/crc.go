package source

import (
	"hash/crc32"
	"io"

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
	if c, ok := r.chunks[off]; ok && int64(n) >= c.length {
		if cerr := checkPages(p[:c.length], r.url, c); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

// checkPages walks the pages of one column chunk and compares each page's
// CRC32, where its header has one, with the page's bytes. A header that
// does not parse is left to the decoder, which reports it.
func checkPages(chunk []byte, url string, c chunkRef) error {
	for pos, page := 0, 0; pos < len(chunk); page++ {
		h, n, err := parsePageHeader(chunk[pos:])
		if err != nil {
			return nil
		}
		start := pos + n
		end := start + int(h.CompressedPageSize)
		if h.CompressedPageSize < 0 || end > len(chunk) || end <= pos {
			return nil
		}
		if h.CRC != 0 {
			if got := crc32.ChecksumIEEE(chunk[start:end]); got != uint32(h.CRC) {
				return errs.WithHint(errs.BadInputf("read %s: row group %d, column %s, page %d: page CRC32 mismatch (header %08x, data %08x): the file is damaged",
					url, c.rowGroup, c.column, page, uint32(h.CRC), got), "restore the file from its source or leave it out of --input")
			}
		}
		pos = end
	}
	return nil
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
