package tensors

// Buffers holds one shard's tensors while it is filled. Each Append
// converts into Data; Seal then moves Data into sealed blocks, so a shard
// grows by whole blocks and never by copying (memory stays the shard's
// bytes plus one record's, not twice the shard while a slice grows).
type Buffers struct {
	// Data holds each output tensor's bytes since the last Seal, in
	// Tensors() order.
	Data   [][]byte
	Rows   int64 // samples
	Items  int64
	ends   []int64 // running end of each offsets tensor
	blocks [][][]byte
	sealed []int64 // bytes in blocks, per tensor
}

// Seal moves the bytes converted so far into the shard's blocks.
func (b *Buffers) Seal() {
	for i, d := range b.Data {
		if len(d) > 0 {
			if cap(d) > len(d)+len(d)/4 { // do not keep a grown slice's spare capacity
				d = append(make([]byte, 0, len(d)), d...)
			}
			b.blocks[i] = append(b.blocks[i], d)
			b.sealed[i] += int64(len(d))
		}
		b.Data[i] = nil
	}
}

// Blocks returns tensor i's bytes, in order, as sealed blocks (call Seal
// first).
func (b *Buffers) Blocks(i int) [][]byte { return b.blocks[i] }

// Len is the number of bytes of tensor i, sealed or not.
func (b *Buffers) Len(i int) int64 { return b.sealed[i] + int64(len(b.Data[i])) }

// NewBuffers returns empty buffers for a shard.
func (p *Plan) NewBuffers() *Buffers {
	b := &Buffers{Data: make([][]byte, len(p.tensors)), ends: make([]int64, len(p.tensors)),
		blocks: make([][][]byte, len(p.tensors)), sealed: make([]int64, len(p.tensors))}
	for i, t := range p.tensors {
		if t.Kind == KindOffsets {
			b.Data[i] = appendCast(b.Data[i], []int64{0}, I64)
		}
	}
	return b
}

// Bytes is the size of the buffered tensors.
func (b *Buffers) Bytes() int64 {
	var n int64
	for i := range b.Data {
		n += b.Len(i)
	}
	return n
}

// Shape returns the full shape of output tensor i in b.
func (p *Plan) Shape(b *Buffers, i int) []int {
	t := p.tensors[i]
	n := int(b.Len(i)) / DType(t.DType).Size()
	per := 1
	for _, d := range t.Shape {
		per *= d
	}
	if per == 0 {
		// Zero-width rows: the first dimension is the level's count.
		n = int(b.Rows)
		if t.Level == LevelItem {
			n = int(b.Items)
		}
		return append([]int{n}, t.Shape...)
	}
	return append([]int{n / per}, t.Shape...)
}
