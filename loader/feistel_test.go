package loader

import (
	"fmt"
	"testing"
)

// TestWindowPermIsABijection: for window sizes around the domain's
// edges, Pos sends [0, n) onto [0, n) once each, At inverts it, and
// PosRange agrees with Pos.
func TestWindowPermIsABijection(t *testing.T) {
	sizes := []int64{1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 4095, 4096, 4097, 65537, 300_001}
	for n := int64(1); n <= 600; n++ {
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		p := NewWindowPerm(n, NewEpochRNG(uint64(n)*7+1, 2))
		seen := make([]bool, n)
		ranged := make([]int64, n)
		p.PosRange(0, ranged)
		var tab RoundTables
		tabled := make([]int64, n)
		if n > 1 && !p.Tables(&tab) {
			t.Fatalf("n %d: no round tables", n)
		}
		if n > 1 {
			p.PosRangeTables(0, tabled, &tab)
		} else {
			copy(tabled, ranged)
		}
		for q := int64(0); q < n; q++ {
			y := p.Pos(q)
			if y < 0 || y >= n || seen[y] {
				t.Fatalf("n %d: Pos(%d) = %d: out of range or repeated", n, q, y)
			}
			seen[y] = true
			if back := p.At(y); back != q {
				t.Fatalf("n %d: At(Pos(%d)) = %d", n, q, back)
			}
			if ranged[q] != y {
				t.Fatalf("n %d: PosRange gives %d at %d, Pos %d", n, ranged[q], q, y)
			}
			if tabled[q] != y {
				t.Fatalf("n %d: PosRangeTables gives %d at %d, Pos %d", n, tabled[q], q, y)
			}
		}
	}
}

// TestWindowPermMovesEverySample: a window's permutation is far from the
// identity and from a shift: few positions stay or keep their neighbour.
func TestWindowPermMovesEverySample(t *testing.T) {
	n := int64(100_000)
	p := NewWindowPerm(n, NewEpochRNG(1, 0))
	fixed, neighbours := 0, 0
	for q := int64(0); q < n; q++ {
		if p.Pos(q) == q {
			fixed++
		}
		if q > 0 && (p.Pos(q)-p.Pos(q-1) == 1 || p.Pos(q-1)-p.Pos(q) == 1) {
			neighbours++
		}
	}
	// A uniform permutation has about 1 fixed point and 2 adjacent pairs.
	if fixed > 10 || neighbours > 20 {
		t.Fatalf("%d fixed points and %d neighbours kept in %d", fixed, neighbours, n)
	}
}

func BenchmarkWindowPermPos(b *testing.B) {
	p := NewWindowPerm(1_000_000, NewEpochRNG(1, 0))
	var s int64
	for i := 0; i < b.N; i++ {
		for q := int64(0); q < p.N; q++ {
			s += p.Pos(q)
		}
	}
	sink = s
}

func BenchmarkWindowPermPosRange(b *testing.B) {
	p := NewWindowPerm(1_000_000, NewEpochRNG(1, 0))
	out := make([]int64, 4096)
	for i := 0; i < b.N; i++ {
		for q := int64(0); q < p.N; q += 4096 {
			p.PosRange(q, out[:min(4096, p.N-q)])
		}
	}
}

func BenchmarkWindowPermPosRangeTables(b *testing.B) {
	p := NewWindowPerm(1_000_000, NewEpochRNG(1, 0))
	out := make([]int64, 4096)
	var tab RoundTables
	for i := 0; i < b.N; i++ {
		p.Tables(&tab)
		for q := int64(0); q < p.N; q += 4096 {
			p.PosRangeTables(q, out[:min(4096, p.N-q)], &tab)
		}
	}
}

var sink int64

// BenchmarkWindowPermPosRangeTablesSmall places a million positions in
// windows of 22,500 samples (the bench's 2 MiB windows of 93-byte
// samples): a 2^16 domain, so most positions take more than one walk.
func BenchmarkWindowPermPosRangeTablesSmall(b *testing.B) {
	for _, n := range []int64{22_500, 180_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			out := make([]int64, 4096)
			var tab RoundTables
			for i := 0; i < b.N; i++ {
				for w := int64(0); w*n < 1_000_000; w++ {
					p := NewWindowPerm(n, NewEpochRNG(uint64(w), 0))
					p.Tables(&tab)
					for q := int64(0); q < p.N; q += 4096 {
						p.PosRangeTables(q, out[:min(4096, p.N-q)], &tab)
					}
				}
			}
		})
	}
}
