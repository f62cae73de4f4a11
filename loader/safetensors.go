package loader

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"slices"
)

// maxHeader is the largest header accepted, as in the safetensors reference
// implementation.
const maxHeader = 100 << 20

// Header is a parsed safetensors header.
type Header struct {
	Metadata map[string]string
	// Tensors in data order.
	Tensors []TensorInfo
	// DataStart is the file offset of the data buffer.
	DataStart int64
}

// TensorInfo is one tensor's entry in a header.
type TensorInfo struct {
	Name  string
	DType string
	Shape []int
	// Begin and End are byte offsets within the data buffer.
	Begin, End int64
}

// Find returns the named tensor.
func (h *Header) Find(name string) (TensorInfo, bool) {
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

var dtypeSize = map[string]int64{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"U16": 2, "I16": 2, "F16": 2, "BF16": 2,
	"U32": 4, "I32": 4, "F32": 4,
	"U64": 8, "I64": 8, "F64": 8,
}

// ReadHeader reads and validates the header of a safetensors file of the
// given size, following the format's rules: an 8-byte little-endian header
// length, a JSON object of tensors (dtype, shape, data_offsets) and an
// optional __metadata__ map of strings; data offsets must tile the data
// buffer exactly, with no gap and no overlap, and each tensor's byte length
// must equal its element count times its dtype size.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	var lb [8]byte
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes is too short for a header", size)
	}
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > maxHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("safetensors: header length %d does not fit a %d-byte file", n, size)
	}
	hb := make([]byte, n)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return parseHeader(hb, size-8-int64(n))
}

func parseHeader(hb []byte, dataLen int64) (*Header, error) {
	if len(hb) == 0 || hb[0] != '{' {
		return nil, fmt.Errorf("safetensors: the header is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(hb))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	if rest := bytes.TrimRight(hb[dec.InputOffset():], " "); len(rest) > 0 {
		return nil, fmt.Errorf("safetensors: header: trailing bytes after the JSON object")
	}
	h := &Header{DataStart: 8 + int64(len(hb))}
	for name, v := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(v, &h.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__ must map strings to strings: %w", err)
			}
			continue
		}
		var t struct {
			DType       string  `json:"dtype"`
			Shape       []int   `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		d := json.NewDecoder(bytes.NewReader(v))
		d.DisallowUnknownFields()
		if err := d.Decode(&t); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		es, ok := dtypeSize[t.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", name, t.DType)
		}
		if len(t.DataOffsets) != 2 || t.DataOffsets[0] < 0 || t.DataOffsets[0] > t.DataOffsets[1] {
			return nil, fmt.Errorf("safetensors: tensor %q: bad data_offsets %v", name, t.DataOffsets)
		}
		elems := int64(1)
		for _, s := range t.Shape {
			if s < 0 {
				return nil, fmt.Errorf("safetensors: tensor %q: negative dimension in %v", name, t.Shape)
			}
			// Bounded by the data buffer as it grows, so a huge shape
			// cannot wrap around to a small (or zero) byte size.
			hi, lo := bits.Mul64(uint64(elems), uint64(s))
			if hi != 0 || lo > uint64(dataLen) {
				return nil, fmt.Errorf("safetensors: tensor %q: shape %v has more elements than the %d-byte data buffer holds", name, t.Shape, dataLen)
			}
			elems = int64(lo)
		}
		if t.Shape == nil {
			t.Shape = []int{}
		}
		if elems*es != t.DataOffsets[1]-t.DataOffsets[0] {
			return nil, fmt.Errorf("safetensors: tensor %q: shape %v of %s needs %d bytes, data_offsets span %d", name, t.Shape, t.DType, elems*es, t.DataOffsets[1]-t.DataOffsets[0])
		}
		h.Tensors = append(h.Tensors, TensorInfo{Name: name, DType: t.DType, Shape: t.Shape, Begin: t.DataOffsets[0], End: t.DataOffsets[1]})
	}
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return int(a.Begin - b.Begin)
		}
		return int(a.End - b.End)
	})
	var pos int64
	for _, t := range h.Tensors {
		if t.Begin != pos {
			return nil, fmt.Errorf("safetensors: tensor %q starts at %d, want %d (offsets must tile the buffer)", t.Name, t.Begin, pos)
		}
		pos = t.End
	}
	if pos != dataLen {
		return nil, fmt.Errorf("safetensors: tensors cover %d bytes, the data buffer holds %d", pos, dataLen)
	}
	return h, nil
}
