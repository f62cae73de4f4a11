package loader

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// TestScatterRows checks every row size's path (typed stores and the
// generic copy) against a byte-by-byte reference.
func TestScatterRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, per := range []int64{1, 2, 4, 8, 12, 64, 100} {
		const n = 257
		src := make([]byte, n*per)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		slot := make([]int64, n)
		for i, p := range rng.Perm(n) {
			slot[i] = int64(p)
		}
		got := make([]byte, n*per)
		scatterRows(got, src, slot, per)
		want := make([]byte, n*per)
		for i, sl := range slot {
			for b := int64(0); b < per; b++ {
				want[sl*per+b] = src[int64(i)*per+b]
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("rows of %d bytes: scattered bytes differ from the reference", per)
		}
	}
}

// TestScatterLines checks rows of whole 64-byte lines (non-temporal stores
// where the CPU has them and the destination is large and 32-byte aligned,
// else typed stores or copies) on aligned and unaligned, large and small
// destinations against a row-by-row copy, and that the non-temporal path
// is taken exactly where it applies.
func TestScatterLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, per := range []int64{64, 128, 192} {
		for _, n := range []int{int(3 * ntMinBytes / 2 / per), 1000} { // 1.5x the smallest stored around the caches, and small
			src := make([]byte, int64(n)*per)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			slot := make([]int64, n)
			for i, p := range rng.Perm(n) {
				slot[i] = int64(p)
			}
			want := make([]byte, len(src))
			for i, sl := range slot {
				copy(want[sl*per:(sl+1)*per], src[int64(i)*per:])
			}
			buf := make([]byte, len(src)+64)
			base := int((32 - uintptr(unsafe.Pointer(&buf[0]))%32) % 32)
			for _, off := range []int{base, base + 8} {
				dst := buf[off : off+len(src)]
				clear(dst)
				aligned := uintptr(unsafe.Pointer(&dst[0]))%32 == 0
				if nt := scatterLines(dst, src, slot, per); nt != (ntLines && aligned && len(dst) >= ntMinBytes) {
					t.Fatalf("rows of %d bytes, %d rows, aligned %v: non-temporal path taken: %v", per, n, aligned, nt)
				}
				clear(dst)
				scatterRows(dst, src, slot, per)
				if !bytes.Equal(dst, want) {
					t.Fatalf("rows of %d bytes, %d rows, aligned %v: scattered rows differ from the copies", per, n, aligned)
				}
			}
		}
	}
	t.Logf("non-temporal stores: %v", ntLines)
}

// TestScatterRowsAhead stores a window's rows as Dataset.scatter does
// (slots a line per batch, each batch's ascending), a tensor's rows a
// chunk at a time (chunks of 1, 64, 65 and 4,096 rows: the stores asking
// ahead and those that do not), and checks them against a reference, and
// that lines are asked for exactly where it applies: on amd64, a window of
// at least aheadMinBytes, rows of 1, 2, 4 or 8 bytes or of 8-byte words
// below 64 bytes.
func TestScatterRowsAhead(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const batch = 512
	for _, per := range []int64{1, 2, 4, 8, 12, 16, 24, 56, 64} {
		for _, window := range []int64{aheadMinBytes, aheadMinBytes / 2} {
			n := window / per
			src := make([]byte, n*per)
			for i := range src {
				src[i] = byte(rng.Uint32())
			}
			// Window position q goes to batch pos[q]/batch, after the
			// positions below q of that batch.
			pos := rng.Perm(int(n))
			fill := make([]int64, (n+batch-1)/batch)
			slot := make([]int64, n)
			for q, p := range pos {
				b := int64(p) / batch
				slot[q] = b*batch + fill[b]
				fill[b]++
			}
			want := make([]byte, n*per)
			for q, sl := range slot {
				copy(want[sl*per:(sl+1)*per], src[int64(q)*per:])
			}
			dst := make([]byte, n*per)
			applies := runtime.GOARCH == "amd64" && window >= aheadMinBytes && (per == 1 || per == 2 || per == 4 || per%8 == 0 && per < 64)
			sizes := []int64{1, 64, 65, scatterChunk}
			for q, k := int64(0), 0; q < n; k++ {
				hi := min(q+sizes[k%len(sizes)], n)
				if asked := scatterRowsAhead(dst, src[q*per:hi*per], slot[q:hi], per, window); asked != applies {
					t.Fatalf("rows of %d bytes, a window of %d bytes: asked ahead %v, want %v", per, window, asked, applies)
				}
				q = hi
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("rows of %d bytes, a window of %d bytes: stored rows differ from the copies", per, window)
			}
		}
	}
}

// BenchmarkScatterLines scatters 64 MB of 64-byte rows into a destination
// of the same size in a random order, with typed stores and with
// scatterRows (non-temporal stores where they apply).
func BenchmarkScatterLines(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(5, 6))
	src, dst := make([]byte, n*64), make([]byte, n*64)
	slot := make([]int64, n)
	for i, p := range rng.Perm(n) {
		slot[i] = int64(p)
	}
	for _, c := range []struct {
		name string
		fn   func(dst, src []byte, slot []int64)
	}{{"typed", func(d, s []byte, sl []int64) { scatterTyped(lines(d), lines(s), sl) }}, {"rows", func(d, s []byte, sl []int64) { scatterRows(d, s, sl, 64) }}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(n * 64)
			for b.Loop() {
				for k := 0; k < n; k += scatterChunk {
					c.fn(dst, src[k*64:], slot[k:min(k+scatterChunk, n)])
				}
			}
		})
	}
}
