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
// slice taken from an array, or a string from arrow's String.Value, must
// not be used after the array is released; with Poison set, freed buffers
// are overwritten so that such a use shows in tests. The binary installs
// the allocator unless told not to (Env).
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
	// Go's size-classed small-object allocator is as fast. 16 KiB is
	// arrow-go's page-header buffer, which every column chunk reader
	// allocates: a table of 10,000 small files allocated (and zeroed, and
	// collected) 6.5 GB of them with 64 KiB here, and its read took 15.6 s
	// against 9.1 s pooled (docs/benchmarks.md).
	MinPooled = 16 << 10
	// maxPooled is the largest: a buffer above it is rare and left to Go.
	maxPooled = 1 << 30
	// subBits is log2 of the classes per power of two.
	subBits   = 3
	alignment = 64
)

// Allocator is a recycling memory.Allocator; the zero value is ready.
//
// Like arrow's Go allocator, it hands out slices whose capacity is their
// length: arrow's compute kernels size their appends by cap() and slice by
// len(), so spare capacity past the length breaks them (a Take of strings
// panicked). A pooled buffer's class is therefore kept in a table by its
// address, not in its capacity; the table holds addresses, not
// references, so a buffer arrow never frees is still collected.
type Allocator struct {
	// Poison overwrites a buffer when it is freed (tests).
	Poison bool
	// Min, when set, replaces MinPooled as the smallest buffer pooled
	// (at least 64): the tests pool every buffer, so that their small
	// tables go through the pools as a large run's do.
	Min   int
	pools [64 << subBits]sync.Pool
	small memory.GoAllocator
	mu    sync.Mutex
	class map[uintptr]int // pooled buffers out, by address: their class
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

// classSize is the size of class k.
func classSize(k int) int {
	e, s := k>>subBits, k&(1<<subBits-1)
	return 1<<e + s<<(e-subBits)
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Allocate returns size zeroed bytes aligned to 64, with capacity size.
func (a *Allocator) Allocate(size int) []byte {
	return a.allocate(size, 0)
}

// allocate is Allocate where the caller writes the first keep bytes
// itself: a recycled buffer is zeroed from there on only.
func (a *Allocator) allocate(size, keep int) []byte {
	if size < a.min() || size > maxPooled {
		return a.small.Allocate(size)
	}
	k, cs := classOf(size)
	var b []byte
	if p, ok := a.pools[k].Get().(*[]byte); ok {
		b = *p
		clear(b[min(keep, size):size])
	} else {
		raw := make([]byte, cs+alignment)
		shift := 0
		if r := int(addr(raw) % alignment); r != 0 {
			shift = alignment - r
		}
		b = raw[shift : shift+cs]
	}
	a.mu.Lock()
	if a.class == nil {
		a.class = map[uintptr]int{}
	}
	a.class[addr(b)] = k
	a.mu.Unlock()
	return b[:size:size]
}

// Reallocate returns b grown or shrunk to size, its bytes kept: in place
// when b is a pooled buffer whose class holds size.
func (a *Allocator) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	if k, ok := a.pooled(b); ok && size <= classSize(k) {
		full := unsafe.Slice(unsafe.SliceData(b), classSize(k))
		clear(full[len(b):size])
		return full[:size:size]
	}
	nb := a.allocate(size, len(b)) // copy writes the first len(b) bytes
	copy(nb, b)
	a.Free(b)
	return nb
}

func (a *Allocator) min() int {
	if a.Min > 0 {
		return max(a.Min, 64)
	}
	return MinPooled
}

// pooled returns b's class when b is a pooled buffer out. A buffer's
// capacity is at least the smallest pooled and at most its class's size, which no
// buffer from the Go allocator has (it serves only sizes outside the
// pooled range): so a small buffer Go placed where a pooled one arrow
// never freed was is not taken for it.
func (a *Allocator) pooled(b []byte) (int, bool) {
	if cap(b) < a.min() || cap(b) > maxPooled {
		return 0, false
	}
	a.mu.Lock()
	k, ok := a.class[addr(b)]
	a.mu.Unlock()
	return k, ok && cap(b) <= classSize(k)
}

// Free returns b to its class's pool when it came from one.
func (a *Allocator) Free(b []byte) {
	k, ok := a.pooled(b)
	if !ok {
		return
	}
	a.mu.Lock()
	delete(a.class, addr(b))
	a.mu.Unlock()
	full := unsafe.Slice(unsafe.SliceData(b), classSize(k))
	if a.Poison {
		for i := range full {
			full[i] = 0xA5
		}
	}
	a.pools[k].Put(&full)
}

// Env is the variable Install reads: "off" keeps arrow's Go allocator;
// "poison" recycles every buffer of 64 bytes or more and overwrites every
// buffer freed (tests); anything else, unset included, recycles. Recycling
// was off by default until the code's uses of arrow's aliasing accessors
// (String.Value, ValueStr, the *Values slices) were audited: poisoned tests
// had found two strings kept past their array's release, and the audit
// found the rest transient or copied (docs/benchmarks.md, "Arrow's buffers
// recycled"). "off" is the way back should another such use turn up.
const Env = "RELAYOUT_ARROW_POOL"

// Install makes the recycling allocator arrow's default for the process
// (memory.DefaultAllocator) unless Env says "off". Call it before any
// arrow work.
func Install() {
	switch os.Getenv(Env) {
	case "off", "0":
	case "poison":
		memory.DefaultAllocator = &Allocator{Poison: true, Min: 64}
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
