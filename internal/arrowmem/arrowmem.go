// Package arrowmem is an arrow memory.Allocator that recycles the large
// buffers arrow releases (decoded row groups, shuffle batches, gathered
// units) instead of leaving them to the garbage collector. Each large
// allocation otherwise costs a fresh span: zeroing, page faults and GC work
// in proportion to the bytes allocated, a quarter of a spilling run's CPU
// (docs/benchmarks.md).
//
// Buffers of at least MinPooled bytes are drawn from size classes, eight
// per power of two (so at most 1/8 of a buffer is slack), each class a
// sync.Pool: what is not reused is collected after two GC cycles, so the
// pool holds no memory a garbage-collected allocator would not. Smaller
// buffers come from arrow's Go allocator. Every buffer handed out is
// zeroed, as the Go allocator's are.
//
// A buffer is recycled only when arrow frees it (its last Release), so a
// slice taken from an array must not be used after the array is released;
// with Poison set, freed buffers are overwritten so that such a use shows
// in tests.
package arrowmem

import (
	"math/bits"
	"os"
	"sync"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

const (
	// MinPooled is the smallest buffer drawn from the pools: below it,
	// Go's size-classed small-object allocator is as fast.
	MinPooled = 64 << 10
	// maxPooled is the largest: a buffer above it is rare and left to Go.
	maxPooled = 1 << 30
	// subBits is log2 of the classes per power of two.
	subBits   = 3
	alignment = 64
)

// Allocator is a recycling memory.Allocator; the zero value is ready.
type Allocator struct {
	// Poison overwrites a buffer when it is freed (tests).
	Poison bool
	pools  [64 << subBits]sync.Pool
	small  memory.GoAllocator
}

var _ memory.Allocator = (*Allocator)(nil)

// classOf returns the size class holding n bytes (n >= MinPooled) and its
// size: the smallest (8+s) * 2^(e-3) >= n.
func classOf(n int) (int, int) {
	e := bits.Len(uint(n-1)) - 1 // 2^e <= n-1 < 2^(e+1)
	step := 1 << (e - subBits)
	s := (n - 1 - 1<<e) / step // n-1 in [2^e + s*step, 2^e + (s+1)*step)
	size := 1<<e + (s+1)*step
	if s+1 == 1<<subBits { // the next power of two
		return (e+1)<<subBits | 0, size
	}
	return e<<subBits | (s + 1), size
}

// exactClass returns the class whose size is exactly c, or -1.
func exactClass(c int) int {
	if c < MinPooled || c > maxPooled {
		return -1
	}
	k, size := classOf(c)
	if size != c {
		return -1
	}
	return k
}

// Allocate returns size zeroed bytes aligned to 64.
func (a *Allocator) Allocate(size int) []byte {
	if size < MinPooled || size > maxPooled {
		return a.small.Allocate(size)
	}
	k, cs := classOf(size)
	if p, ok := a.pools[k].Get().(*[]byte); ok {
		b := *p
		clear(b[:cs])
		return b[:size:cs]
	}
	raw := make([]byte, cs+alignment)
	shift := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % alignment); r != 0 {
		shift = alignment - r
	}
	return raw[shift : shift+size : shift+cs]
}

// Reallocate returns b grown or shrunk to size, its bytes kept.
func (a *Allocator) Reallocate(size int, b []byte) []byte {
	if cap(b) >= size {
		if size > len(b) {
			clear(b[len(b):size]) // bytes past len may be stale
		}
		return b[:size]
	}
	nb := a.Allocate(size)
	copy(nb, b)
	a.Free(b)
	return nb
}

// Free returns b to its class's pool when it came from one.
func (a *Allocator) Free(b []byte) {
	c := cap(b)
	k := exactClass(c)
	if k < 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%alignment != 0 {
		return
	}
	b = b[:c]
	if a.Poison {
		for i := range b {
			b[i] = 0xA5
		}
	}
	a.pools[k].Put(&b)
}

// Env is the variable Install reads: "off" keeps arrow's Go allocator,
// "poison" recycles and overwrites every buffer freed, anything else
// recycles.
const Env = "RELAYOUT_ARROW_POOL"

// Install makes the recycling allocator arrow's default for the process
// (memory.DefaultAllocator), as Env says. Call it before any arrow work.
func Install() {
	switch os.Getenv(Env) {
	case "off", "0":
	case "poison":
		memory.DefaultAllocator = &Allocator{Poison: true}
	default:
		memory.DefaultAllocator = &Allocator{}
	}
}

// InstallForTests is Install for tests: unless Env is set, it poisons
// freed buffers, and sets Env so that the relayout processes the tests
// start poison them too.
func InstallForTests() {
	if os.Getenv(Env) == "" {
		os.Setenv(Env, "poison")
	}
	Install()
}

// TestMain is the TestMain of the packages whose code allocates through
// arrow: it runs m's tests with freed buffers poisoned (InstallForTests),
// so that a slice used after its array's last Release shows as wrong data.
func TestMain(m *testing.M) {
	InstallForTests()
	os.Exit(m.Run())
}
