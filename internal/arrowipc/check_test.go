package arrowipc

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	flatbuffers "github.com/google/flatbuffers/go"
)

// nested is a schema with metadata at every level, a struct of two
// children, a list, a dictionary and a union.
func nested() *arrow.Schema {
	md := arrow.NewMetadata([]string{"k"}, []string{"v"})
	st := arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32, Metadata: md},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String},
	)
	return arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Metadata: md},
		{Name: "s", Type: st, Nullable: true},
		{Name: "l", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
		{Name: "d", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int16, ValueType: arrow.BinaryTypes.String}},
		{Name: "u", Type: arrow.SparseUnionOf([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int8}}, []arrow.UnionTypeCode{3})},
	}, &md)
}

// decode is arrow-go's own reading of a serialized schema.
func decode(b []byte) (*arrow.Schema, error) {
	return flight.DeserializeSchema(b, memory.DefaultAllocator)
}

func TestCheckStreamAcceptsWhatArrowWrites(t *testing.T) {
	for _, sc := range []*arrow.Schema{nested(), arrow.NewSchema(nil, nil)} {
		b := flight.SerializeSchema(sc, memory.DefaultAllocator)
		if err := CheckStream(b); err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
	}
	// A stream with a record batch after the schema.
	sc := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	bld.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	rec := bld.NewRecordBatch()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := CheckStream(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	// The footer value as pqarrow stores it.
	v, err := DecodeSchemaMetadata("/////w==")
	if err != nil || len(v) != 4 {
		t.Fatalf("%x, %v", v, err)
	}
}

// schemaTable returns the serialized schema's flatbuffer (from the
// message's start) and its Schema table.
func schemaTable(t *testing.T, b []byte) ([]byte, flatbuffers.Table) {
	t.Helper()
	if binary.LittleEndian.Uint32(b) != 0xFFFFFFFF {
		t.Fatalf("no continuation marker: %x", b[:8])
	}
	meta := b[8:]
	msg := root(meta)
	var sc flatbuffers.Table
	msg.Union(&sc, flatbuffers.UOffsetT(msg.Offset(messageHeader)))
	return meta, sc
}

// lengthAt returns where the length of the vector in slot of tb is
// stored, in meta.
func lengthAt(tb *flatbuffers.Table, slot flatbuffers.VOffsetT) int {
	return int(tb.Vector(flatbuffers.UOffsetT(tb.Offset(slot)))) - 4
}

// field returns field i of the vector in slot of tb.
func field(tb *flatbuffers.Table, slot flatbuffers.VOffsetT, i int) flatbuffers.Table {
	at := tb.Vector(flatbuffers.UOffsetT(tb.Offset(slot))) + flatbuffers.UOffsetT(4*i)
	return flatbuffers.Table{Bytes: tb.Bytes, Pos: tb.Indirect(at)}
}

// TestCheckStreamRefusesCounts changes one count at a time. Each place is
// first shown to be the count arrow-go reads (one less, and arrow-go
// decodes one field, child or key fewer), then set to 2^28, which arrow-go
// would allocate before reading: CheckStream must refuse it.
func TestCheckStreamRefusesCounts(t *testing.T) {
	orig := flight.SerializeSchema(nested(), memory.DefaultAllocator)
	cases := []struct {
		name  string
		at    func(sc *flatbuffers.Table) int
		fewer func(s *arrow.Schema) bool // the schema with the count one less
	}{
		{"schema fields", func(sc *flatbuffers.Table) int { return lengthAt(sc, schemaFields) },
			func(s *arrow.Schema) bool { return s.NumFields() == 4 }},
		{"schema metadata", func(sc *flatbuffers.Table) int { return lengthAt(sc, schemaMetadata) },
			func(s *arrow.Schema) bool { return s.Metadata().Len() == 0 }},
		{"field metadata", func(sc *flatbuffers.Table) int { f := field(sc, schemaFields, 0); return lengthAt(&f, fieldMetadata) },
			func(s *arrow.Schema) bool { return s.Field(0).Metadata.Len() == 0 }},
		{"struct children", func(sc *flatbuffers.Table) int { f := field(sc, schemaFields, 1); return lengthAt(&f, fieldChildren) },
			func(s *arrow.Schema) bool { return s.Field(1).Type.(*arrow.StructType).NumFields() == 1 }},
		{"child metadata", func(sc *flatbuffers.Table) int {
			f := field(sc, schemaFields, 1)
			c := field(&f, fieldChildren, 0)
			return lengthAt(&c, fieldMetadata)
		}, func(s *arrow.Schema) bool { return s.Field(1).Type.(*arrow.StructType).Field(0).Metadata.Len() == 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bytes.Clone(orig)
			meta, sc := schemaTable(t, b)
			at := c.at(&sc)
			n := binary.LittleEndian.Uint32(meta[at:])
			binary.LittleEndian.PutUint32(meta[at:], n-1)
			s, err := decode(b)
			if err != nil || !c.fewer(s) {
				t.Fatalf("one less at %d: arrow-go read %v, %v: not the count it reads", at, s, err)
			}
			if err := CheckStream(b); err != nil {
				t.Fatalf("one less: %v", err)
			}
			binary.LittleEndian.PutUint32(meta[at:], 1<<28)
			if err := CheckStream(b); err == nil || !strings.Contains(err.Error(), "entries") {
				t.Fatalf("2^28 entries: %v", err)
			}
		})
	}
}

// A child that points back at its parent (flatbuffer offsets wrap
// around) would have arrow-go recurse until the stack overflows.
func TestCheckStreamRefusesCycles(t *testing.T) {
	b := flight.SerializeSchema(nested(), memory.DefaultAllocator)
	meta, sc := schemaTable(t, b)
	parent := field(&sc, schemaFields, 1)
	at := parent.Vector(flatbuffers.UOffsetT(parent.Offset(fieldChildren)))
	binary.LittleEndian.PutUint32(meta[at:], uint32(parent.Pos-at)) // wraps to parent.Pos
	if got := parent.Indirect(at); got != parent.Pos {
		t.Fatalf("child at %d, want the parent's %d", got, parent.Pos)
	}
	if err := CheckStream(b); err == nil || !strings.Contains(err.Error(), "deep") {
		t.Fatalf("cycle: %v", err)
	}
}

func TestCheckStreamRefusesLengths(t *testing.T) {
	orig := flight.SerializeSchema(nested(), memory.DefaultAllocator)
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"message longer than the bytes", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[4:], uint32(len(b)))
			return b
		}, "IPC message of"},
		{"cut short", func(b []byte) []byte { return b[:len(b)/2] }, "IPC message of"},
		{"three bytes", func(b []byte) []byte { return b[:3] }, "3 bytes"},
		{"garbage offsets", func(b []byte) []byte {
			for i := 8; i < len(b); i++ {
				b[i] = 0xEE
			}
			return b
		}, ""},
	} {
		b := c.edit(bytes.Clone(orig))
		err := CheckStream(b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	// A record batch message first: arrow-go allocates its body before it
	// sees that it is not a schema.
	sc := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	bld := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	bld.Field(0).(*array.Int64Builder).AppendValues([]int64{1, 2, 3}, nil)
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc))
	if err := w.Write(bld.NewRecordBatch()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b := buf.Bytes()
	b = b[8+binary.LittleEndian.Uint32(b[4:]):] // without the schema message
	if err := CheckStream(b); err != nil {
		t.Fatalf("a record batch first: %v", err)
	}
	msg := root(b[8:])
	o := flatbuffers.UOffsetT(msg.Offset(messageBodyLength))
	if o == 0 || msg.GetInt64(msg.Pos+o) == 0 {
		t.Fatal("no body length to edit")
	}
	binary.LittleEndian.PutUint64(b[8+int(msg.Pos+o):], 1<<40)
	if err := CheckStream(b); err == nil || !strings.Contains(err.Error(), "body of") {
		t.Fatalf("body of 2^40 bytes: %v", err)
	}
}
