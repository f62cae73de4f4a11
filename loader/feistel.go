package loader

import "math/bits"

// WindowPerm is a window's permutation under relayout-order-v2: a keyed
// Feistel bijection on the smallest even-bit domain holding the window,
// walked back into [0, N) (docs/loader.md, step 4). Unlike Fisher-Yates,
// any position's image is computed alone, in a few multiplies, so a
// window's permutation is never stored, is computed front to back while
// the window is scattered, and vectorizes in NumPy.
type WindowPerm struct {
	// N is the window's samples.
	N    int64
	half uint      // bits per Feistel half
	mask uint64    // 2^half - 1
	keys [4]uint64 // round keys: the window generator's first four outputs
}

// NewWindowPerm returns the permutation of n samples keyed by g.
func NewWindowPerm(n int64, g *SplitMix64) WindowPerm {
	p := WindowPerm{N: n, half: 1}
	if n > 1 {
		p.half = uint(bits.Len64(uint64(n-1))+1) / 2
	}
	p.mask = 1<<p.half - 1
	for i := range p.keys {
		p.keys[i] = g.Next()
	}
	return p
}

// round runs the four Feistel rounds forward on x.
func (p *WindowPerm) round(x uint64) uint64 {
	h, m := p.half, p.mask
	l, r := x>>h, x&m
	l ^= mix(r^p.keys[0]) & m
	r ^= mix(l^p.keys[1]) & m
	l ^= mix(r^p.keys[2]) & m
	r ^= mix(l^p.keys[3]) & m
	return l<<h | r
}

// unround inverts round: the same rounds, last first.
func (p *WindowPerm) unround(y uint64) uint64 {
	h, m := p.half, p.mask
	l, r := y>>h, y&m
	r ^= mix(l^p.keys[3]) & m
	l ^= mix(r^p.keys[2]) & m
	r ^= mix(l^p.keys[1]) & m
	l ^= mix(r^p.keys[0]) & m
	return l<<h | r
}

// walk applies f until the result lies in [0, N) (cycle walking).
func (p *WindowPerm) walk(x uint64, f func(*WindowPerm, uint64) uint64) int64 {
	if p.N <= 1 {
		return int64(x)
	}
	y := f(p, x)
	for y >= uint64(p.N) {
		y = f(p, y)
	}
	return int64(y)
}

// Pos returns where window position q goes: its place in the window's
// permuted sequence (batch Pos(q) div b).
func (p *WindowPerm) Pos(q int64) int64 { return p.walk(uint64(q), (*WindowPerm).round) }

// At returns the window position of the permuted sequence's i-th sample:
// the inverse of Pos.
func (p *WindowPerm) At(i int64) int64 { return p.walk(uint64(i), (*WindowPerm).unround) }

// PosRange sets out[i] = Pos(q+i), four positions at a time: their round
// chains are independent, so the CPU overlaps their multiplies. The rounds
// are written out interleaved, not as four calls of round: that measured
// 9.7 ms against 7.1 ms for a million positions (BenchmarkWindowPermPosRange).
func (p *WindowPerm) PosRange(q int64, out []int64) {
	if p.N <= 1 {
		for i := range out {
			out[i] = q + int64(i)
		}
		return
	}
	h, m, k0, k1, k2, k3 := p.half, p.mask, p.keys[0], p.keys[1], p.keys[2], p.keys[3]
	n := uint64(p.N)
	i := 0
	for ; i+4 <= len(out); i += 4 {
		x0, x1, x2, x3 := uint64(q)+uint64(i), uint64(q)+uint64(i)+1, uint64(q)+uint64(i)+2, uint64(q)+uint64(i)+3
		l0, r0, l1, r1, l2, r2, l3, r3 := x0>>h, x0&m, x1>>h, x1&m, x2>>h, x2&m, x3>>h, x3&m
		l0, l1, l2, l3 = l0^mix(r0^k0)&m, l1^mix(r1^k0)&m, l2^mix(r2^k0)&m, l3^mix(r3^k0)&m
		r0, r1, r2, r3 = r0^mix(l0^k1)&m, r1^mix(l1^k1)&m, r2^mix(l2^k1)&m, r3^mix(l3^k1)&m
		l0, l1, l2, l3 = l0^mix(r0^k2)&m, l1^mix(r1^k2)&m, l2^mix(r2^k2)&m, l3^mix(r3^k2)&m
		r0, r1, r2, r3 = r0^mix(l0^k3)&m, r1^mix(l1^k3)&m, r2^mix(l2^k3)&m, r3^mix(l3^k3)&m
		ys := [4]uint64{l0<<h | r0, l1<<h | r1, l2<<h | r2, l3<<h | r3}
		for j, y := range ys {
			for y >= n {
				y = p.round(y)
			}
			out[i+j] = int64(y)
		}
	}
	for ; i < len(out); i++ {
		out[i] = p.Pos(q + int64(i))
	}
}

// RoundTables are a permutation's four round functions tabulated over
// every half value, t[i][v] = mix(v ^ keys[i]) & mask: a half is at most
// TableHalfBits bits, so each round is one load from a table that stays
// in cache instead of two multiplies. A million-sample window (10-bit
// halves, 4 KiB per table) is placed in half the time
// (BenchmarkWindowPermPosRangeTables against BenchmarkWindowPermPosRange).
type RoundTables [4][]uint32

// TableHalfBits is the widest half RoundTables tabulates (256 KiB a
// table): windows up to 4^16 samples.
const TableHalfBits = 16

// Tables fills t with p's round functions, reusing its memory, and
// reports whether it did (not when p's halves are wider than
// TableHalfBits, or p has at most one sample).
func (p *WindowPerm) Tables(t *RoundTables) bool {
	if p.N <= 1 || p.half > TableHalfBits {
		return false
	}
	size := int64(1) << p.half
	for i := range t {
		t[i] = grow(t[i], size)
		k := p.keys[i]
		for v := range t[i] {
			t[i][v] = uint32(mix(uint64(v)^k) & p.mask)
		}
	}
	return true
}

// walkChunk is how many positions PosRangeTables walks together.
const walkChunk = 1024

// PosRangeTables is PosRange with the rounds looked up in t, p's Tables.
//
// Positions are walked a chunk at a time, a round per pass: every
// position's first round, then again for those still outside [0, N),
// listed without a branch, until none is. A window far smaller than its
// domain walks each position about domain/N times (2.9 for the bench's
// 22,500-sample windows in a 2^16 domain); one position at a time, each
// round waited for the last (four dependent loads) and each walk's end
// was a mispredicted branch: 30 ms a million positions against 3 for a
// window that fills its domain. Passes over independent positions keep
// the loads overlapped (BenchmarkWindowPermPosRangeTablesSmall).
func (p *WindowPerm) PosRangeTables(q int64, out []int64, t *RoundTables) {
	h, m := p.half, uint32(p.mask)
	t0, t1, t2, t3 := t[0][:m+1], t[1][:m+1], t[2][:m+1], t[3][:m+1]
	n := uint64(p.N)
	round := func(x uint64) uint64 {
		l, r := uint32(x>>h)&m, uint32(x)&m
		l ^= t0[r&m]
		r ^= t1[l&m]
		l ^= t2[r&m]
		r ^= t3[l&m]
		return uint64(l)<<h | uint64(r)
	}
	var walking [walkChunk]uint16
	for base := 0; base < len(out); base += walkChunk {
		o := out[base:min(base+walkChunk, len(out))]
		k := 0
		for i := range o {
			x := round(uint64(q) + uint64(base+i))
			o[i] = int64(x)
			walking[k] = uint16(i)
			k += outside(x, n)
		}
		for k > 0 {
			next := 0
			for _, i := range walking[:k] { // writes at or behind the read
				x := round(uint64(o[i]))
				o[i] = int64(x)
				walking[next] = i
				next += outside(x, n)
			}
			k = next
		}
	}
}

// outside is 1 when x >= n, else 0, without a branch.
func outside(x, n uint64) int {
	_, borrow := bits.Sub64(x, n, 0)
	return int(borrow ^ 1)
}
