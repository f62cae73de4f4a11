package writer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// A minimal Thrift compact-protocol reader and copier, for the page CRC
// rewrite (pagecrc.go): it walks structures whose schema it only partly
// knows, copies every byte it is not told to change, and re-encodes the
// integers it is told to change. Parsing Parquet metadata stays arrow-go's
// and parquet-go's job; this only moves offsets.

// Compact-protocol type ids.
const (
	tBoolTrue  = 1
	tBoolFalse = 2
	tByte      = 3
	tI16       = 4
	tI32       = 5
	tI64       = 6
	tDouble    = 7
	tBinary    = 8
	tList      = 9
	tSet       = 10
	tMap       = 11
	tStruct    = 12
	tUUID      = 13
)

// maxDepth bounds nesting, so hostile bytes cannot recurse without end.
const maxDepth = 64

type compactReader struct {
	src   []byte
	pos   int
	depth int
}

func (r *compactReader) byte() (byte, bool) {
	if r.pos >= len(r.src) {
		return 0, false
	}
	b := r.src[r.pos]
	r.pos++
	return b, true
}

func (r *compactReader) peek() (byte, bool) {
	if r.pos >= len(r.src) {
		return 0, false
	}
	return r.src[r.pos], true
}

func (r *compactReader) varint() (uint64, bool) {
	v, n := binary.Uvarint(r.src[r.pos:])
	if n <= 0 {
		return 0, false
	}
	r.pos += n
	return v, true
}

func zigzag(v uint64) int64 { return int64(v>>1) ^ -int64(v&1) }

func unzigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// fieldHeader reads a field header: the field's id and type, or stop.
func (r *compactReader) fieldHeader(last int16) (id int16, t byte, stop bool, err error) {
	b, ok := r.byte()
	if !ok {
		return 0, 0, false, io.ErrUnexpectedEOF
	}
	if b == 0 {
		return 0, 0, true, nil
	}
	t = b & 0x0f
	if d := b >> 4; d != 0 {
		return last + int16(d), t, false, nil
	}
	v, ok := r.varint()
	if !ok {
		return 0, 0, false, io.ErrUnexpectedEOF
	}
	return int16(zigzag(v)), t, false, nil
}

// eachField calls fn for each field of the struct at r.pos; fn reads the
// value and returns true, or returns false to have it skipped.
func (r *compactReader) eachField(fn func(id int16, t byte) (bool, error)) error {
	return r.fieldsFrom(0, fn)
}

// fieldsFrom is eachField for a struct whose fields up to id last were
// read already.
func (r *compactReader) fieldsFrom(last int16, fn func(id int16, t byte) (bool, error)) error {
	if r.depth++; r.depth > maxDepth {
		return fmt.Errorf("nested too deep")
	}
	defer func() { r.depth-- }()
	for {
		id, t, stop, err := r.fieldHeader(last)
		if err != nil || stop {
			return err
		}
		last = id
		done, err := fn(id, t)
		if err != nil {
			return err
		}
		if !done {
			if err := r.skip(t); err != nil {
				return err
			}
		}
	}
}

// listHeader reads a list or set header.
func (r *compactReader) listHeader() (n int, elem byte, err error) {
	b, ok := r.byte()
	if !ok {
		return 0, 0, io.ErrUnexpectedEOF
	}
	n, elem = int(b>>4), b&0x0f
	if n == 15 {
		v, ok := r.varint()
		if !ok || v > uint64(len(r.src)) {
			return 0, 0, io.ErrUnexpectedEOF
		}
		n = int(v)
	}
	return n, elem, nil
}

// skip passes over one value of type t.
func (r *compactReader) skip(t byte) error {
	switch t {
	case tBoolTrue, tBoolFalse:
		return nil // in the field header (a list's bools are bytes: see below)
	case tByte:
		if _, ok := r.byte(); !ok {
			return io.ErrUnexpectedEOF
		}
	case tI16, tI32, tI64:
		if _, ok := r.varint(); !ok {
			return io.ErrUnexpectedEOF
		}
	case tDouble:
		r.pos += 8
	case tUUID:
		r.pos += 16
	case tBinary:
		n, ok := r.varint()
		if !ok || n > uint64(len(r.src)) {
			return io.ErrUnexpectedEOF
		}
		r.pos += int(n)
	case tList, tSet:
		n, elem, err := r.listHeader()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if elem == tBoolTrue || elem == tBoolFalse {
				r.pos++
			} else if err := r.skip(elem); err != nil {
				return err
			}
			if r.pos > len(r.src) {
				return io.ErrUnexpectedEOF
			}
		}
	case tMap:
		v, ok := r.varint()
		if !ok || v > uint64(len(r.src)) {
			return io.ErrUnexpectedEOF
		}
		if v == 0 {
			return nil
		}
		kv, ok := r.byte()
		if !ok {
			return io.ErrUnexpectedEOF
		}
		for i := uint64(0); i < v; i++ {
			for _, t := range [2]byte{kv >> 4, kv & 0x0f} {
				if t == tBoolTrue || t == tBoolFalse {
					r.pos++ // a map's bools are bytes
				} else if err := r.skip(t); err != nil {
					return err
				}
			}
			if r.pos > len(r.src) {
				return io.ErrUnexpectedEOF
			}
		}
	case tStruct:
		return r.eachField(func(int16, byte) (bool, error) { return false, nil })
	default:
		return fmt.Errorf("unknown compact type %d", t)
	}
	if r.pos > len(r.src) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// compactCopier copies a structure from src to dst, value by value.
type compactCopier struct {
	compactReader
	dst []byte
}

// copyStruct copies the struct at pos. fn is called with each field, after
// its header is copied; it copies the value itself and returns true, or
// returns false to have it copied unchanged.
func (c *compactCopier) copyStruct(fn func(id int16, t byte) (bool, error)) error {
	if c.depth++; c.depth > maxDepth {
		return fmt.Errorf("nested too deep")
	}
	defer func() { c.depth-- }()
	var last int16
	for {
		at := c.pos
		id, t, stop, err := c.fieldHeader(last)
		if err != nil {
			return err
		}
		c.dst = append(c.dst, c.src[at:c.pos]...)
		if stop {
			return nil
		}
		last = id
		done, err := fn(id, t)
		if err != nil {
			return err
		}
		if !done {
			if err := c.copyValue(t); err != nil {
				return err
			}
		}
	}
}

// copyValue copies one value of type t unchanged.
func (c *compactCopier) copyValue(t byte) error {
	at := c.pos
	if err := c.skip(t); err != nil {
		return err
	}
	c.dst = append(c.dst, c.src[at:c.pos]...)
	return nil
}

// copyList copies the list at pos, calling each for every element (which
// must copy it, with copyStruct or copyValue).
func (c *compactCopier) copyList(each func(i int) error) error {
	at := c.pos
	n, _, err := c.listHeader()
	if err != nil {
		return err
	}
	c.dst = append(c.dst, c.src[at:c.pos]...)
	for i := 0; i < n; i++ {
		if err := each(i); err != nil {
			return err
		}
	}
	return nil
}

// copySortedList copies the list at pos (a ColumnMetaData's
// encoding_stats) with the entries of each page type in the order of their
// encoded bytes. arrow-go fills ColumnMetaData.encoding_stats from
// Go maps, so a column chunk with two data page encodings (a dictionary
// abandoned for PLAIN midway) lists them in a random order and the same
// rows made different files. The list's order carries no meaning; this
// one is canonical.
func (c *compactCopier) copySortedList() error {
	at := c.pos
	n, elem, err := c.listHeader()
	if err != nil {
		return err
	}
	if elem != tStruct {
		return fmt.Errorf("encoding_stats holds type %d, not structs", elem)
	}
	c.dst = append(c.dst, c.src[at:c.pos]...)
	elems := make([][]byte, 0, min(n, 64))
	for i := 0; i < n; i++ {
		start := c.pos
		if err := c.skip(tStruct); err != nil {
			return err
		}
		elems = append(elems, c.src[start:c.pos])
	}
	// arrow-go lists the dictionary page's stats, then the data pages':
	// keep that, and order each page type's run of entries.
	for lo := 0; lo < len(elems); {
		hi := lo + 1
		for hi < len(elems) && bytes.Equal(firstField(elems[hi]), firstField(elems[lo])) {
			hi++
		}
		slices.SortFunc(elems[lo:hi], bytes.Compare)
		lo = hi
	}
	for _, e := range elems {
		c.dst = append(c.dst, e...)
	}
	return nil
}

// firstField returns the bytes of a struct's first field, header
// included (PageEncodingStats: page_type), or nil if it has none.
func firstField(st []byte) []byte {
	r := compactReader{src: st}
	if _, t, stop, err := r.fieldHeader(0); err != nil || stop || r.skip(t) != nil {
		return nil
	}
	return st[:r.pos]
}

// editInt reads an integer (i16, i32 or i64) and writes edit's result.
func (c *compactCopier) editInt(edit func(int64) (int64, error)) error {
	v, ok := c.varint()
	if !ok {
		return io.ErrUnexpectedEOF
	}
	nv, err := edit(zigzag(v))
	if err != nil {
		return err
	}
	c.dst = binary.AppendUvarint(c.dst, unzigzag(nv))
	return nil
}

// The footer fields the page CRC rewrite reads or moves.
type footerField int

const (
	ccFileOffset footerField = iota + 1
	ccOffsetIndexOffset
	ccOffsetIndexLength
	ccColumnIndexOffset
	ccColumnIndexLength
	ccEnd // after a column chunk (no value)
	cmTotalUncompressed
	cmTotalCompressed
	cmDataPageOffset
	cmIndexPageOffset
	cmDictionaryPageOffset
	cmBloomFilterOffset
	rgTotalByteSize
	rgFileOffset
	rgTotalCompressed
)

type footerEvent int

const (
	evRowGroupStart footerEvent = iota + 1
	evChunkMeta                 // a column chunk's ColumnMetaData, before it is copied
)

// Field ids, from parquet.thrift.
var (
	columnChunkFields = map[int16]footerField{2: ccFileOffset, 4: ccOffsetIndexOffset, 5: ccOffsetIndexLength, 6: ccColumnIndexOffset, 7: ccColumnIndexLength}
	columnMetaFields  = map[int16]footerField{6: cmTotalUncompressed, 7: cmTotalCompressed, 9: cmDataPageOffset, 10: cmIndexPageOffset, 11: cmDictionaryPageOffset, 14: cmBloomFilterOffset}
	rowGroupFields    = map[int16]footerField{2: rgTotalByteSize, 5: rgFileOffset, 6: rgTotalCompressed}
)

// cmEncodingStats is ColumnMetaData's encoding_stats, a list of
// PageEncodingStats (see copySortedList).
const cmEncodingStats = 13

// Parquet's legacy converted types for a TIME declared isAdjustedToUTC.
const (
	convertedTimeMillis = 7
	convertedTimeMicros = 8
)

// rewriteFooterBytes copies a FileMetaData, passing every field above to
// edit (which returns its new value) and telling event where row groups
// and column metadata start. Integer fields keep their types. The schema
// elements utc names (by index, the root being 0) are TIME columns to
// declare isAdjustedToUTC=true, with the converted type utc gives (0 for
// none, as for nanoseconds); see utcSchemaElement.
func rewriteFooterBytes(footer []byte, edit func(footerField, int64) (int64, error), event func(footerEvent, []byte) error, utc map[int]int32) ([]byte, error) {
	c := compactCopier{compactReader: compactReader{src: footer}, dst: make([]byte, 0, len(footer)+64)}
	ints := func(fields map[int16]footerField) func(id int16, t byte) (bool, error) {
		return func(id int16, t byte) (bool, error) {
			f, ok := fields[id]
			if !ok || (t != tI32 && t != tI64) {
				return false, nil
			}
			return true, c.editInt(func(v int64) (int64, error) { return edit(f, v) })
		}
	}
	chunkInts, metaFieldInts, rgInts := ints(columnChunkFields), ints(columnMetaFields), ints(rowGroupFields)
	metaInts := func(id int16, t byte) (bool, error) {
		if id == cmEncodingStats && t == tList {
			return true, c.copySortedList()
		}
		return metaFieldInts(id, t)
	}
	chunk := func(int) error {
		if err := c.copyStruct(func(id int16, t byte) (bool, error) {
			if id == 3 && t == tStruct {
				if event != nil {
					r := compactReader{src: c.src, pos: c.pos}
					if err := r.skip(tStruct); err != nil {
						return true, err
					}
					if err := event(evChunkMeta, c.src[c.pos:r.pos]); err != nil {
						return true, err
					}
				}
				return true, c.copyStruct(metaInts)
			}
			return chunkInts(id, t)
		}); err != nil {
			return err
		}
		_, err := edit(ccEnd, 0)
		return err
	}
	rowGroup := func(int) error {
		if event != nil {
			if err := event(evRowGroupStart, nil); err != nil {
				return err
			}
		}
		return c.copyStruct(func(id int16, t byte) (bool, error) {
			if id == 1 && t == tList {
				return true, c.copyList(chunk)
			}
			return rgInts(id, t)
		})
	}
	schemaElem := func(i int) error {
		conv, ok := utc[i]
		if !ok {
			return c.copyValue(tStruct)
		}
		return c.utcSchemaElement(conv)
	}
	err := c.copyStruct(func(id int16, t byte) (bool, error) {
		switch {
		case id == 2 && t == tList && len(utc) > 0:
			return true, c.copyList(schemaElem)
		case id == 4 && t == tList:
			return true, c.copyList(rowGroup)
		}
		return false, nil
	})
	if err == nil && c.pos != len(footer) {
		err = fmt.Errorf("%d bytes after the footer's end", len(footer)-c.pos)
	}
	return c.dst, err
}

// walkFooter reads a FileMetaData's fields as rewriteFooterBytes would
// pass them, changing nothing.
func walkFooter(footer []byte, event func(footerEvent, []byte) error, fn func(footerField, int64) (int64, error)) error {
	_, err := rewriteFooterBytes(footer, fn, event, nil)
	return err
}

// utcSchemaElement copies a SchemaElement that is a TIME column declared
// local, declaring it isAdjustedToUTC=true: the flag (field 1 of TimeType,
// field 7 of LogicalType, field 10 of SchemaElement) is a bool, which the
// compact protocol keeps in its field header, so one byte changes; and,
// with conv != 0, converted_type (field 6), which a local TIME lacks, is
// inserted before the next field, as arrow-go writes it for a UTC TIME.
func (c *compactCopier) utcSchemaElement(conv int32) error {
	var last int16
	flipped, hasConv := false, false
	err := c.copyStruct(func(id int16, t byte) (bool, error) {
		prev := last
		last = id
		if id == 6 {
			hasConv = true
		}
		if id > 6 && !hasConv && conv != 0 {
			// The header of field id is the last byte copied (a short
			// form: ids here are at most 10). Put field 6 before it.
			h := c.dst[len(c.dst)-1]
			if h>>4 != byte(id-prev) {
				return false, fmt.Errorf("schema element: field %d has a long-form header", id)
			}
			c.dst = append(c.dst[:len(c.dst)-1], byte(6-prev)<<4|tI32)
			c.dst = binary.AppendUvarint(c.dst, unzigzag(int64(conv)))
			c.dst = append(c.dst, byte(id-6)<<4|h&0x0f)
			hasConv = true
		}
		if id != 10 || t != tStruct {
			return false, nil
		}
		return true, c.copyStruct(func(id int16, t byte) (bool, error) {
			if id != 7 || t != tStruct {
				return false, nil
			}
			return true, c.copyStruct(func(id int16, t byte) (bool, error) {
				if id != 1 {
					return false, nil
				}
				if h := c.src[c.pos-1]; h != 0x10|tBoolFalse && h != 0x10|tBoolTrue {
					return false, fmt.Errorf("schema element: TimeType.isAdjustedToUTC has header %#x", h)
				}
				c.dst[len(c.dst)-1] = 0x10 | tBoolTrue
				flipped = true
				return true, nil
			})
		})
	})
	if err == nil && !flipped {
		err = fmt.Errorf("schema element: not a TIME column")
	}
	return err
}
