package arrowmem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestClassOf(t *testing.T) {
	prev := 0
	for n := 64; n <= 8<<20; n += 1 + n/64 {
		k, size := classOf(n)
		if size < n || size > n+n/8+1 {
			t.Fatalf("classOf(%d) = size %d: not in [n, n*9/8]", n, size)
		}
		if k2, s2 := classOf(size); k2 != k || s2 != size {
			t.Fatalf("classOf(%d) = (%d, %d) but classOf(%d) = (%d, %d)", n, k, size, size, k2, s2)
		}
		if classSize(k) != size {
			t.Fatalf("classSize(%d) = %d, want %d", k, classSize(k), size)
		}
		if k < prev {
			t.Fatalf("classes not increasing at %d", n)
		}
		prev = k
	}
}

// TestCapacityIsLength: arrow's compute kernels size appends by cap() and
// slice by len(); a buffer with spare capacity made a Take of strings
// panic (slice bounds out of range), so every buffer's cap is its len,
// also after Reallocate grows one in place.
func TestCapacityIsLength(t *testing.T) {
	a := &Allocator{}
	b := a.Allocate(MinPooled + 1)
	if cap(b) != len(b) {
		t.Fatalf("Allocate(%d): cap %d", len(b), cap(b))
	}
	c := a.Reallocate(MinPooled+100, b)
	if cap(c) != len(c) || len(c) != MinPooled+100 {
		t.Fatalf("Reallocate: len %d cap %d", len(c), cap(c))
	}
	if unsafe.SliceData(c) != unsafe.SliceData(b) {
		t.Fatal("Reallocate within the class moved the buffer")
	}
	a.Free(c)
}

func TestRecyclesZeroedAndAligned(t *testing.T) {
	for _, a := range []*Allocator{{}, {Min: 64}} {
		recyclesZeroedAndAligned(t, a)
	}
}

func recyclesZeroedAndAligned(t *testing.T, a *Allocator) {
	for _, n := range []int{100, 1000, MinPooled, 300_001, 5 << 20} {
		b := a.Allocate(n)
		if len(b) != n || addr(b)%alignment != 0 {
			t.Fatalf("Allocate(%d): len %d, address %p", n, len(b), unsafe.SliceData(b))
		}
		for i := range b {
			b[i] = 0xFF
		}
		a.Free(b)
		// Whatever comes back, from the pool or fresh, is zeroed.
		c := a.Allocate(n)
		for i, v := range c {
			if v != 0 {
				t.Fatalf("Allocate(%d) after Free: byte %d is %#x", n, i, v)
			}
		}
		for i := range c {
			c[i] = 0x11
		}
		// A dirty buffer of the larger class in its pool: a Reallocate
		// that moves takes it, keeps c's bytes and zeroes the rest.
		e := a.Allocate(n + n/2)
		for i := range e {
			e[i] = 0xEE
		}
		a.Free(e)
		d := a.Reallocate(n+n/2, c)
		for i, v := range d {
			if want := byte(0x11); i >= n {
				want = 0
				if v != want {
					t.Fatalf("Reallocate(%d): byte %d is %#x, want %#x", n+n/2, i, v, want)
				}
			} else if v != want {
				t.Fatalf("Reallocate(%d): byte %d is %#x, want %#x", n+n/2, i, v, want)
			}
		}
		a.Free(d)
	}
	// Freeing a buffer the allocator did not hand out, or one twice,
	// leaves the pools alone.
	foreign := make([]byte, 1<<20)
	a.Free(foreign)
	b := a.Allocate(1 << 20)
	a.Free(b)
	a.Free(b)
	x, y := a.Allocate(1<<20), a.Allocate(1<<20)
	if unsafe.SliceData(x) == unsafe.SliceData(y) {
		t.Fatal("a buffer freed twice was handed out twice")
	}
}

// TestPoisonShowsUseAfterRelease: with Poison, an array's values read
// after its last Release are overwritten, which is how the package tests
// find such uses.
func TestPoisonShowsUseAfterRelease(t *testing.T) {
	a := &Allocator{Poison: true}
	b := array.NewInt64Builder(a)
	for i := range 100_000 {
		b.Append(int64(i))
	}
	arr := b.NewInt64Array()
	b.Release()
	vals := arr.Int64Values()
	if vals[99_999] != 99_999 {
		t.Fatal("wrong value before release")
	}
	arr.Release()
	if vals[99_999] == 99_999 {
		t.Fatal("a freed buffer was not poisoned")
	}
}

// TestComputeTakeAgrees runs arrow's Take on strings, lists and integers
// large enough to be pooled, with the allocator and with Go's, and
// compares the results (the compute kernels are where arrow relies most
// on what an allocator hands out). Half the strings are long and the take
// draws them most, so the kernel's estimate of the output (mean length
// times rows) is short and it must grow the buffer: with spare capacity
// past a buffer's length it wrote there and panicked.
func TestComputeTakeAgrees(t *testing.T) {
	a := &Allocator{Poison: true}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 300_000
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	lb := array.NewListBuilder(memory.DefaultAllocator, arrow.PrimitiveTypes.Int32)
	vb := lb.ValueBuilder().(*array.Int32Builder)
	for i := range n {
		if i%2 == 0 {
			sb.Append(fmt.Sprintf("long-value-%d-%0100d", i, rng.IntN(1000)))
		} else {
			sb.Append("s")
		}
		ib.Append(int64(i))
		lb.Append(true)
		for j := range rng.IntN(4) {
			vb.Append(int32(i + j))
		}
	}
	cols := []arrow.Array{sb.NewArray(), ib.NewArray(), lb.NewArray()}
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = int64(rng.IntN(n/2)) * 2 // the long strings
		if i%8 == 0 {
			idx[i]++
		}
	}
	ixb := array.NewInt64Builder(memory.DefaultAllocator)
	ixb.AppendValues(idx, nil)
	indices := ixb.NewArray()
	defer indices.Release()
	take := func(mem memory.Allocator, col arrow.Array) arrow.Array {
		ctx := compute.WithAllocator(context.Background(), mem)
		out, err := compute.TakeArray(ctx, col, indices)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for round := range 3 { // later rounds draw from the pools
		for _, col := range cols {
			got, want := take(a, col), take(memory.NewGoAllocator(), col)
			if !array.Equal(got, want) {
				t.Fatalf("round %d: Take of %s differs with the pool", round, col.DataType())
			}
			got.Release()
			want.Release()
		}
	}
}

func TestInstall(t *testing.T) {
	defer func(old memory.Allocator) { memory.DefaultAllocator = old }(memory.DefaultAllocator)
	for _, v := range []string{"off", "0"} {
		t.Setenv(Env, v)
		memory.DefaultAllocator = memory.NewGoAllocator()
		Install()
		if _, ok := memory.DefaultAllocator.(*Allocator); ok {
			t.Fatalf("%s=%q installed the pool", Env, v)
		}
	}
	t.Setenv(Env, "poison")
	Install()
	if p, ok := memory.DefaultAllocator.(*Allocator); !ok || !p.Poison || p.min() != 64 {
		t.Fatalf("%s=poison: %T", Env, memory.DefaultAllocator)
	}
	for _, v := range []string{"", "on"} { // the default recycles
		t.Setenv(Env, v)
		memory.DefaultAllocator = memory.NewGoAllocator()
		Install()
		if p, ok := memory.DefaultAllocator.(*Allocator); !ok || p.Poison || p.min() != MinPooled {
			t.Fatalf("%s=%q: %T", Env, v, memory.DefaultAllocator)
		}
	}
}
