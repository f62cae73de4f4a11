package loader

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func safetensorsFile(header string, data int) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(make([]byte, data))
	return b.Bytes()
}

// TestHeaderShapeOverflow: a shape whose byte size overflows int64 (2^62 x 4
// float32s wrap to 0) with empty offsets was accepted.
func TestHeaderShapeOverflow(t *testing.T) {
	for _, h := range []string{
		`{"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`,
		`{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`,
		`{"x":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`,
	} {
		f := safetensorsFile(h, 0)
		if _, err := ReadHeader(bytes.NewReader(f), int64(len(f))); err == nil {
			t.Errorf("accepted %s", h)
		}
	}
}

// FuzzReadHeader: any bytes give a header or an error, never a panic; an
// accepted header's tensors tile the data buffer and each one's byte size
// is its element count times its dtype size.
func FuzzReadHeader(f *testing.F) {
	f.Add(safetensorsFile(`{"__metadata__":{"rows":"2"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[3],"data_offsets":[16,40]}}`, 40))
	f.Add(safetensorsFile(`{"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 0))
	f.Add(safetensorsFile(`{}`, 0))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		var pos int64
		for _, ti := range h.Tensors {
			if ti.Begin != pos || ti.End < ti.Begin {
				t.Fatalf("accepted tensors that do not tile: %+v", h.Tensors)
			}
			n := dtypeSize[ti.DType]
			for _, s := range ti.Shape {
				n *= int64(s)
			}
			if n != ti.End-ti.Begin {
				t.Fatalf("tensor %s: shape %v of %s is %d bytes, offsets span %d", ti.Name, ti.Shape, ti.DType, n, ti.End-ti.Begin)
			}
			pos = ti.End
		}
		if h.DataStart+pos != int64(len(b)) {
			t.Fatalf("tensors end at %d, the file at %d", h.DataStart+pos, len(b))
		}
	})
}
