package arrowmem

import (
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestClassOf(t *testing.T) {
	prev := 0
	for n := MinPooled; n <= 8<<20; n += 977 {
		k, size := classOf(n)
		if size < n || size > n+n/8+1 {
			t.Fatalf("classOf(%d) = size %d: not in [n, n*9/8]", n, size)
		}
		if k2, s2 := classOf(size); k2 != k || s2 != size {
			t.Fatalf("classOf(%d) = (%d, %d) but classOf(%d) = (%d, %d)", n, k, size, size, k2, s2)
		}
		if exactClass(size) != k {
			t.Fatalf("exactClass(%d) = %d, want %d", size, exactClass(size), k)
		}
		if k < prev {
			t.Fatalf("classes not increasing at %d", n)
		}
		prev = k
	}
	for _, c := range []int{MinPooled - 1, MinPooled + 1, 3 << 30} {
		if c != MinPooled+1 && exactClass(c) != -1 {
			t.Errorf("exactClass(%d) = %d, want -1", c, exactClass(c))
		}
	}
	if exactClass(MinPooled+1) != -1 {
		t.Errorf("exactClass(%d) is a class", MinPooled+1)
	}
}

func TestRecyclesZeroedAndAligned(t *testing.T) {
	a := &Allocator{}
	for _, n := range []int{100, MinPooled, 300_001, 5 << 20} {
		b := a.Allocate(n)
		if len(b) != n || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%alignment != 0 {
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
		d := a.Reallocate(n+n/2, c)
		for i, v := range d {
			if v != 0 {
				t.Fatalf("Reallocate(%d): byte %d is %#x", n+n/2, i, v)
			}
		}
		a.Free(d)
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

func TestInstall(t *testing.T) {
	defer func(old memory.Allocator) { memory.DefaultAllocator = old }(memory.DefaultAllocator)
	t.Setenv(Env, "off")
	memory.DefaultAllocator = memory.NewGoAllocator()
	Install()
	if _, ok := memory.DefaultAllocator.(*Allocator); ok {
		t.Fatalf("%s=off installed the pool", Env)
	}
	t.Setenv(Env, "poison")
	Install()
	if p, ok := memory.DefaultAllocator.(*Allocator); !ok || !p.Poison {
		t.Fatalf("%s=poison: %T", Env, memory.DefaultAllocator)
	}
	t.Setenv(Env, "")
	Install()
	if p, ok := memory.DefaultAllocator.(*Allocator); !ok || p.Poison {
		t.Fatalf("default: %T", memory.DefaultAllocator)
	}
}
