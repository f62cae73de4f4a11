// Package arrowipc checks Arrow IPC bytes from outside the process before
// arrow-go decodes them.
//
// arrow-go trusts the counts in an IPC message's flatbuffer: a schema
// whose field claims 2^32 children makes it allocate that many fields
// before it reads one (a fatal out-of-memory error, which no recover
// catches), a field that is its own child (offsets wrap around) recurses
// until the stack overflows, and a message length or body length is
// allocated before it is read. Parquet files carry such a schema in their
// footer (the ARROW:schema key that pqarrow decodes when a file is
// opened), so a damaged footer could crash a run instead of failing with
// exit 3. CheckStream walks what arrow-go will walk and refuses counts the
// bytes cannot hold.
package arrowipc

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"

	flatbuffers "github.com/google/flatbuffers/go"
)

// Flatbuffer vtable slots (arrow/format/Message.fbs, Schema.fbs).
const (
	messageHeaderType = 6
	messageHeader     = 8
	messageBodyLength = 10
	messageMetadata   = 12

	schemaFields   = 6
	schemaMetadata = 8

	fieldChildren = 14
	fieldMetadata = 16

	headerSchema = 1 // MessageHeader.Schema

	maxDepth  = 64      // nesting of fields
	maxFields = 1 << 16 // fields and children visited in all
)

// DecodeSchemaMetadata decodes the value of a Parquet footer's
// ARROW:schema key as pqarrow does (base64, padded or not).
func DecodeSchemaMetadata(v string) ([]byte, error) {
	var b []byte
	var err error
	if len(v)%4 == 0 {
		b, err = base64.StdEncoding.DecodeString(v)
	}
	if len(b) == 0 || err != nil {
		b, err = base64.RawStdEncoding.DecodeString(v)
	}
	return b, err
}

// CheckStream checks the first message of an IPC stream, as arrow-go's
// stream reader reads it when it opens the stream: its framing, its
// lengths against the bytes there are, and, for a schema, every count
// that arrow-go allocates by (fields, children, key-value metadata), the
// nesting and the number of fields. It returns nil when arrow-go can
// decode the message without allocating more than the bytes justify; the
// caller still handles arrow-go's own errors.
func CheckStream(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil { // an offset out of range
			err = fmt.Errorf("damaged IPC message: %v", r)
		}
	}()
	if len(data) < 4 {
		return fmt.Errorf("IPC stream of %d bytes", len(data))
	}
	rest := data
	n := binary.LittleEndian.Uint32(rest)
	rest = rest[4:]
	if n == 0xFFFFFFFF { // continuation marker, then the length
		if len(rest) < 4 {
			return fmt.Errorf("IPC stream cut short after its continuation marker")
		}
		n = binary.LittleEndian.Uint32(rest)
		rest = rest[4:]
	}
	if n == 0 {
		return nil // end of stream: arrow-go reports no schema itself
	}
	if int64(n) > int64(len(rest)) || int32(n) < 4 {
		return fmt.Errorf("IPC message of %d bytes where %d remain", int32(n), len(rest))
	}
	meta := rest[:n]
	rest = rest[n:]
	msg := root(meta)
	if body := msg.GetInt64Slot(messageBodyLength, 0); body < 0 || body > int64(len(rest)) {
		return fmt.Errorf("IPC message body of %d bytes where %d remain", body, len(rest))
	}
	c := checker{buf: meta}
	if err := c.vector(&msg, messageMetadata); err != nil {
		return err
	}
	if msg.GetByteSlot(messageHeaderType, 0) != headerSchema {
		return nil
	}
	var schema flatbuffers.Table
	o := flatbuffers.UOffsetT(msg.Offset(messageHeader))
	if o == 0 {
		return nil
	}
	msg.Union(&schema, o)
	if err := c.vector(&schema, schemaMetadata); err != nil {
		return err
	}
	return c.fields(&schema, schemaFields, 0)
}

// root is the buffer's root table.
func root(buf []byte) flatbuffers.Table {
	return flatbuffers.Table{Bytes: buf, Pos: flatbuffers.GetUOffsetT(buf)}
}

type checker struct {
	buf  []byte
	seen int // fields visited
}

// vector checks that the vector in slot of t (absent is fine) has no
// more elements than its bytes can hold: 4 bytes each (offsets), from
// its start to the buffer's end. It returns its length.
func (c *checker) vector(t *flatbuffers.Table, slot flatbuffers.VOffsetT) error {
	_, err := c.vectorLen(t, slot)
	return err
}

func (c *checker) vectorLen(t *flatbuffers.Table, slot flatbuffers.VOffsetT) (int, error) {
	o := flatbuffers.UOffsetT(t.Offset(slot))
	if o == 0 {
		return 0, nil
	}
	start := int64(t.Vector(o))
	n := int64(t.VectorLen(o))
	if start > int64(len(c.buf)) || n*4 > int64(len(c.buf))-start {
		return 0, fmt.Errorf("IPC schema: a list of %d entries where %d bytes remain", n, int64(len(c.buf))-start)
	}
	return int(n), nil
}

// fields checks the fields of the vector in slot of t, and theirs.
func (c *checker) fields(t *flatbuffers.Table, slot flatbuffers.VOffsetT, depth int) error {
	n, err := c.vectorLen(t, slot)
	if err != nil || n == 0 {
		return err
	}
	if depth >= maxDepth {
		return fmt.Errorf("IPC schema: fields nested more than %d deep", maxDepth)
	}
	start := t.Vector(flatbuffers.UOffsetT(t.Offset(slot)))
	for i := 0; i < n; i++ {
		if c.seen++; c.seen > maxFields {
			return fmt.Errorf("IPC schema: more than %d fields", maxFields)
		}
		at := start + flatbuffers.UOffsetT(i*4)
		f := flatbuffers.Table{Bytes: c.buf, Pos: t.Indirect(at)}
		if err := c.vector(&f, fieldMetadata); err != nil {
			return err
		}
		if err := c.fields(&f, fieldChildren, depth+1); err != nil {
			return err
		}
	}
	return nil
}
