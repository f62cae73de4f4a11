package writer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
)

// Page CRCs. The Parquet format lets every page header carry a CRC32 of
// the page's bytes as stored (compressed), so that a reader can tell which
// page of which column chunk is damaged. arrow-go writes none, and its page
// writer is not replaceable from outside the library, so relayout adds them
// to the byte stream arrow-go produces:
//
//   - pageCRC sits between arrow-go's file writer and the object being
//     written. Every page header that passes through gets a CRC32 field
//     (field 4 of PageHeader), spliced into the header's own bytes: the rest
//     of the header is copied unchanged.
//   - Each header grows by a few bytes, so every offset after it moves. The
//     page index (ColumnIndex, OffsetIndex) and the footer, which arrow-go
//     writes after the last page, are held back and rewritten at Close: page
//     offsets and sizes in the OffsetIndexes, and chunk offsets, sizes and
//     index positions in the footer, by a Thrift compact-protocol copier
//     that changes only those integers and copies every other byte as it
//     was, so no field arrow-go writes (known to relayout or not) is lost.
//
// The result is a pure function of arrow-go's bytes, so outputs stay
// deterministic; the footer is parsed back by the caller as a check.

// pageHeaderFirstByte is the compact-protocol field header a PageHeader
// starts with: field 1 (type), an i32, with a field-id delta of 1. A page
// index structure (ColumnIndex, OffsetIndex) starts with field 1 as a list
// (0x19), which is how the stream tells the last page from the page index.
const pageHeaderFirstByte = 0x15

// After each column chunk's pages, arrow-go serializes the chunk's
// ColumnChunk struct through a Thrift stream transport whose bufio buffer
// it never flushes: a ColumnChunk under 4 KiB never reaches the file, and
// of a larger one (long min/max statistics: WKB geometries, JSON) the
// flushed 4 KiB blocks do, between the chunk's last page and the next
// chunk's first. Nothing points at them (the footer has its own copy), so
// pageCRC drops them. arrow-go's buffered row group writer hands each
// column chunk to the sink in one Write, so such a fragment ends where its
// Write ends. A ColumnChunk starts with field 2, file_offset (an i64: 0x26)
// or field 1, file_path (a string: 0x18); never with 0x15. Should arrow-go
// change either behaviour, Close finds a chunk that does not start at a
// page and refuses the file.
const (
	chunkMetaFirstByte     = 0x26
	chunkMetaPathFirstByte = 0x18
)

// maxPageHeader bounds how long a page header may be before it is called
// malformed rather than incomplete (arrow-go puts statistics in data page
// headers; relayout truncates none, so allow generously).
const maxPageHeader = 64 << 20

type pageShift struct {
	old, new int64 // where the page starts, before and after
	grow     int64 // bytes its header grew
}

// pageCRC is the io.Writer arrow-go writes a file into (see above). Write
// passes pages on as soon as each is complete; Close writes the rewritten
// page index and footer and returns the footer's Thrift bytes.
type pageCRC struct {
	w       io.Writer
	in, out int64 // bytes received (arrow-go's offsets) and sent on
	state   int   // 0: magic, 1: pages, 2: tail
	pending []byte
	pages   []pageShift
	grown   int64 // sum of pages' grow
	dropped int64 // bytes of ColumnChunk fragments not passed on
	dataEnd int64 // arrow-go offset where the pages end (tail starts)
	tail    []byte
	hdr     []byte // scratch for a page header with its CRC
	err     error
	off     bool // pass bytes through unchanged (see crcSequential)
	// utc: schema elements to declare TIME isAdjustedToUTC in the footer
	// (see utcElements), with their converted types.
	utc map[int]int32
}

// errNoRewrite: the file went through unchanged; take arrow-go's footer.
var errNoRewrite = errors.New("page CRCs off")

func newPageCRC(w io.Writer) *pageCRC { return &pageCRC{w: w} }

func (c *pageCRC) emit(p []byte) error {
	n, err := c.w.Write(p)
	c.out += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return err
}

// Write implements io.Writer.
func (c *pageCRC) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.off {
		if err := c.emit(p); err != nil {
			c.err = err
			return 0, err
		}
		return len(p), nil
	}
	n := len(p)
	if err := c.write(p); err != nil {
		c.err = err
		return 0, err
	}
	return n, nil
}

func (c *pageCRC) write(p []byte) error {
	if c.state == 0 { // the magic, "PAR1"
		need := 4 - int(c.in)
		take := min(need, len(p))
		if err := c.emit(p[:take]); err != nil {
			return err
		}
		c.in += int64(take)
		p = p[take:]
		if c.in < 4 {
			return nil
		}
		c.state = 1
	}

	if c.state == 2 {
		c.tail = append(c.tail, p...)
		c.in += int64(len(p))
		return nil
	}
	buf := p
	if len(c.pending) > 0 {
		c.pending = append(c.pending, p...)
		buf = c.pending
	}
	used, err := c.pagesIn(buf)
	if err != nil {
		return err
	}
	rest := buf[used:]

	if c.state == 2 {
		c.tail = append(c.tail, rest...)
		c.in += int64(len(rest))
		rest = nil
	}
	if len(c.pending) > 0 {
		c.pending = append(c.pending[:0], rest...)
	} else {
		c.pending = append(c.pending, rest...)
	}
	return nil
}

// pagesIn passes on every complete page at the start of b and returns the
// bytes used. It stops at an incomplete page, or at the page index (the
// state becomes 2).
func (c *pageCRC) pagesIn(b []byte) (int, error) {
	pos := 0
	for pos < len(b) {
		if b[pos] == chunkMetaFirstByte || b[pos] == chunkMetaPathFirstByte {
			// What arrow-go's unflushed Thrift buffer let through of the
			// chunk's ColumnChunk (see chunkMetaFirstByte): it ends with
			// this Write. Nothing points into it, so it is not passed on.
			c.in += int64(len(b) - pos)
			c.dropped += int64(len(b) - pos)
			return len(b), nil
		}
		if b[pos] != pageHeaderFirstByte {
			c.state = 2
			c.dataEnd = c.in
			return pos, nil
		}
		hdrLen, bodyLen, split, err := scanPageHeader(b[pos:])
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) && len(b)-pos < maxPageHeader {
				return pos, nil // wait for the rest of the header
			}
			return pos, fmt.Errorf("page CRCs: page header at byte %d: %w", c.in, err)
		}
		end := pos + hdrLen + bodyLen
		if end > len(b) {
			return pos, nil // wait for the rest of the page
		}
		body := b[pos+hdrLen : end]
		c.hdr = spliceCRC(c.hdr[:0], b[pos:pos+hdrLen], split, crc32.ChecksumIEEE(body))
		grow := int64(len(c.hdr) - hdrLen)
		c.pages = append(c.pages, pageShift{old: c.in, new: c.out, grow: grow})
		c.grown += grow
		if err := c.emit(c.hdr); err != nil {
			return pos, err
		}
		if err := c.emit(body); err != nil {
			return pos, err
		}
		c.in += int64(end - pos)
		pos = end
	}
	return pos, nil
}

// scanPageHeader reads the fixed start of a compact-protocol PageHeader as
// arrow-go writes it: fields 1-3 (type, uncompressed size, compressed size)
// as i32s in short form, then the page's own header struct (field 5, 6, 7
// or 8). It returns the header's length, the page body's length and the
// offset of the field header after field 3, where the CRC goes.
func scanPageHeader(b []byte) (hdrLen, bodyLen, split int, err error) {
	r := compactReader{src: b}
	var compressed int64
	for id := 1; id <= 3; id++ {
		fh, ok := r.byte()
		if !ok {
			return 0, 0, 0, io.ErrUnexpectedEOF
		}
		if fh != 0x15 { // delta 1, i32
			return 0, 0, 0, fmt.Errorf("field %d has header byte %#x, not an i32 in short form (a page header with a CRC already, or not written by arrow-go)", id, fh)
		}
		v, ok := r.varint()
		if !ok {
			return 0, 0, 0, io.ErrUnexpectedEOF
		}
		if id == 3 {
			compressed = zigzag(v)
		}
	}
	split = r.pos
	fh, ok := r.peek()
	if !ok {
		return 0, 0, 0, io.ErrUnexpectedEOF
	}
	if fh&0x0f != tStruct || fh>>4 < 2 || fh>>4 > 5 {
		return 0, 0, 0, fmt.Errorf("field header %#x after the sizes is not a page type's header struct", fh)
	}
	// The page type's header struct and any fields after it, to the
	// PageHeader's stop byte.
	if err := r.fieldsFrom(3, func(int16, byte) (bool, error) { return false, nil }); err != nil {
		return 0, 0, 0, err
	}
	if compressed < 0 || compressed > 1<<31 {
		return 0, 0, 0, fmt.Errorf("compressed page size %d", compressed)
	}
	return r.pos, int(compressed), split, nil
}

// spliceCRC appends header h to dst with field 4 (crc, i32) inserted at
// split, and the following field header's delta lowered by one.
func spliceCRC(dst, h []byte, split int, crc uint32) []byte {
	dst = append(dst, h[:split]...)
	dst = append(dst, 0x15)
	dst = binary.AppendUvarint(dst, uint64(uint32(int32(crc)<<1)^uint32(int32(crc)>>31)))
	dst = append(dst, h[split]-0x10)
	return append(dst, h[split+1:]...)
}

// endPages says that no page follows: what comes next is the footer (a
// file without row groups, whose footer would otherwise start like a page
// header).
func (c *pageCRC) endPages() {
	if c.state == 1 && len(c.pending) == 0 {
		c.state = 2
		c.dataEnd = c.in
	}
}

// newPos maps an arrow-go offset at a page start, or at the end of the
// pages, to the offset written.
func (c *pageCRC) newPos(old int64) (int64, error) {
	if old == c.dataEnd {
		return old + c.grown - c.dropped, nil
	}
	i := sort.Search(len(c.pages), func(i int) bool { return c.pages[i].old >= old })
	if i < len(c.pages) && c.pages[i].old == old {
		return c.pages[i].new, nil
	}
	return 0, fmt.Errorf("page CRCs: offset %d is not where a page starts", old)
}

// Close rewrites and writes the held-back page index and footer, and
// returns the footer's Thrift bytes as written.
func (c *pageCRC) Close() ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	footer, err := c.close()
	if err != nil {
		c.err = err
	}
	return footer, err
}

func (c *pageCRC) close() ([]byte, error) {
	if c.off {
		return nil, errNoRewrite
	}
	if len(c.pending) > 0 {
		return nil, fmt.Errorf("page CRCs: %d bytes of an incomplete page before the end of the file", len(c.pending))
	}
	if c.state == 1 { // a file with no pages: the footer came as pages would
		return nil, fmt.Errorf("page CRCs: no page index or footer")
	}
	t := c.tail
	if len(t) < 12 || !bytes.Equal(t[len(t)-4:], []byte("PAR1")) {
		return nil, fmt.Errorf("page CRCs: the file does not end in a footer")
	}
	flen := int64(binary.LittleEndian.Uint32(t[len(t)-8:]))
	if flen > int64(len(t))-8 {
		return nil, fmt.Errorf("page CRCs: footer length %d beyond the tail", flen)
	}
	footerAt := int64(len(t)) - 8 - flen // in t
	footer := t[footerAt : len(t)-8]

	// The page index structures, from the footer: where each lies in t.
	idx, err := indexStructs(footer, c.dataEnd, footerAt)
	if err != nil {
		return nil, err
	}
	// They tile the page index area exactly, in order.
	var out []byte
	moved := map[int64][2]int64{} // old offset -> new offset, new length
	at := int64(0)
	newStart := c.dataEnd + c.grown - c.dropped
	for _, s := range idx {
		if s.off != at {
			return nil, fmt.Errorf("page CRCs: page index structure at %d, expected %d", s.off, at)
		}
		b := t[s.off : s.off+s.len]
		if s.offsetIndex {
			if b, err = c.rewriteOffsetIndex(b); err != nil {
				return nil, err
			}
		}
		moved[c.dataEnd+s.off] = [2]int64{newStart + int64(len(out)), int64(len(b))}
		out = append(out, b...)
		at += s.len
	}
	if at != footerAt {
		return nil, fmt.Errorf("page CRCs: %d bytes between the page index and the footer", footerAt-at)
	}
	nf, err := c.rewriteFooter(footer, moved)
	if err != nil {
		return nil, err
	}
	out = append(out, nf...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(nf)))
	out = append(out, "PAR1"...)
	if err := c.emit(out); err != nil {
		return nil, err
	}
	return nf, nil
}

type indexStruct struct {
	off, len    int64 // in the tail
	offsetIndex bool
}

// indexStructs lists the ColumnIndex and OffsetIndex structures the footer
// points to, as offsets into the tail, sorted.
func indexStructs(footer []byte, dataEnd, footerAt int64) ([]indexStruct, error) {
	var out []indexStruct
	var ci, oi [2]int64
	err := walkFooter(footer, nil, func(f footerField, v int64) (int64, error) {
		switch f {
		case ccColumnIndexOffset:
			ci[0] = v
		case ccColumnIndexLength:
			ci[1] = v
		case ccOffsetIndexOffset:
			oi[0] = v
		case ccOffsetIndexLength:
			oi[1] = v
		case ccEnd:
			for k, p := range [][2]int64{ci, oi} {
				if p[1] == 0 {
					continue
				}
				if p[0] < dataEnd || p[0]-dataEnd+p[1] > footerAt {
					return 0, fmt.Errorf("page CRCs: a page index structure at %d+%d lies outside the page index area", p[0], p[1])
				}
				out = append(out, indexStruct{off: p[0] - dataEnd, len: p[1], offsetIndex: k == 1})
			}
			ci, oi = [2]int64{}, [2]int64{}
		}
		return v, nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b indexStruct) int { return int(a.off - b.off) })
	return out, nil
}

// rewriteOffsetIndex moves the page locations of one OffsetIndex: each
// page's offset, and its size (header included) by its header's growth.
func (c *pageCRC) rewriteOffsetIndex(b []byte) ([]byte, error) {
	cp := compactCopier{compactReader: compactReader{src: b}}
	var grow int64
	err := cp.copyStruct(func(id int16, t byte) (bool, error) {
		if id != 1 || t != tList {
			return false, nil
		}
		return true, cp.copyList(func(int) error {
			return cp.copyStruct(func(id int16, t byte) (bool, error) {
				switch {
				case id == 1 && t == tI64:
					return true, cp.editInt(func(old int64) (int64, error) {
						i := sort.Search(len(c.pages), func(i int) bool { return c.pages[i].old >= old })
						if i == len(c.pages) || c.pages[i].old != old {
							return 0, fmt.Errorf("page CRCs: an offset index names offset %d, where no page starts", old)
						}
						grow = c.pages[i].grow
						return c.pages[i].new, nil
					})
				case id == 2 && t == tI32:
					return true, cp.editInt(func(old int64) (int64, error) { return old + grow, nil })
				}
				return false, nil
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("page CRCs: offset index: %w", err)
	}
	if cp.pos != len(b) {
		return nil, fmt.Errorf("page CRCs: offset index: %d bytes after its end", len(b)-cp.pos)
	}
	return cp.dst, nil
}

// rewriteFooter moves the footer's offsets: chunk and row group offsets to
// where their pages now start, sizes by their headers' growth, and the
// page index positions to moved.
func (c *pageCRC) rewriteFooter(footer []byte, moved map[int64][2]int64) ([]byte, error) {
	var chunkGrow, rgGrow int64
	var ciOld, oiOld int64
	dst, err := rewriteFooterBytes(footer, func(f footerField, v int64) (int64, error) {
		switch f {
		case cmTotalUncompressed, cmTotalCompressed:
			return v + chunkGrow, nil
		case cmDataPageOffset, cmDictionaryPageOffset, cmIndexPageOffset, ccFileOffset, rgFileOffset:
			if v == 0 && f != cmDataPageOffset {
				return 0, nil // absent in practice (0 is the magic)
			}
			return c.newPos(v)
		case cmBloomFilterOffset:
			return 0, fmt.Errorf("page CRCs: bloom filters are not supported")
		case ccColumnIndexOffset:
			ciOld = v
			return moved[v][0], nil
		case ccColumnIndexLength:
			return moved[ciOld][1], nil
		case ccOffsetIndexOffset:
			oiOld = v
			return moved[v][0], nil
		case ccOffsetIndexLength:
			return moved[oiOld][1], nil
		case rgTotalByteSize, rgTotalCompressed:
			return v + rgGrow, nil
		}
		return v, nil
	}, func(ev footerEvent, meta []byte) error {
		switch ev {
		case evChunkMeta:
			// The chunk's growth is needed before its sizes, which come
			// before its offsets in field order: find its first page from
			// a read-only pass over the meta data.
			start, total, err := chunkSpan(meta)
			if err != nil {
				return err
			}
			chunkGrow = c.growIn(start, start+total)
			rgGrow += chunkGrow
		case evRowGroupStart:
			rgGrow = 0
		}
		return nil
	}, c.utc)
	if err != nil {
		return nil, fmt.Errorf("page CRCs: footer: %w", err)
	}
	return dst, nil
}

// growIn sums the growth of the pages starting in [from, to).
func (c *pageCRC) growIn(from, to int64) int64 {
	i := sort.Search(len(c.pages), func(i int) bool { return c.pages[i].old >= from })
	var g int64
	for ; i < len(c.pages) && c.pages[i].old < to; i++ {
		g += c.pages[i].grow
	}
	return g
}

// chunkSpan returns the first page offset and compressed size of a
// ColumnMetaData struct's bytes.
func chunkSpan(meta []byte) (start, total int64, err error) {
	r := compactReader{src: meta}
	start = -1
	var data, dict int64 = -1, -1
	err = r.eachField(func(id int16, t byte) (bool, error) {
		var p *int64
		switch {
		case id == 7 && t == tI64:
			p = &total
		case id == 9 && t == tI64:
			p = &data
		case id == 11 && t == tI64:
			p = &dict
		default:
			return false, nil
		}
		v, ok := r.varint()
		if !ok {
			return true, io.ErrUnexpectedEOF
		}
		*p = zigzag(v)
		return true, nil
	})
	start = data
	if dict > 0 && dict < start {
		start = dict
	}
	if err == nil && start < 0 {
		err = fmt.Errorf("a column chunk without a data page offset")
	}
	return start, total, err
}
