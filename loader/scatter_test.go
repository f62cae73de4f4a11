package loader

import (
	"bytes"
	"math/rand/v2"
	"testing"
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
