package hugepages

import (
	"math"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func madviseHuge(addr, n uintptr) error {
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, addr, n, unix.MADV_HUGEPAGE); e != 0 {
		return e
	}
	return nil
}

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

// smallFaultCost faults in probePages 4 KiB pages of a fresh anonymous
// mapping advised against huge pages, in probeChunks chunks, and returns
// the least CPU time per page of a chunk (faultCost).
func smallFaultCost() time.Duration {
	return faultCost(unix.MADV_NOHUGEPAGE, probePages*smallPage, probeChunks) / probePages
}

// freshMemoryCost is faultCost per MiB: 1 MiB in 4 KiB pages (through
// smallFaultCost), or probeChunks chunks of two huge pages (8 MiB) advised
// for huge pages.
func freshMemoryCost(huge bool) time.Duration {
	if huge {
		return faultCost(unix.MADV_HUGEPAGE, 2*hugePage, probeChunks) * (1 << 20) / (2 * hugePage)
	}
	return smallFaultCost() * (1 << 20) / smallPage
}

const (
	smallPage = 4 << 10
	hugePage  = 2 << 20
)

// faultCost writes a byte to every 4 KiB page of chunks fresh chunks of
// anonymous memory, aligned to a huge page and given advice, and returns
// the least CPU time a chunk took, or 0 where it cannot be measured. The
// thread's CPU clock counts the kernel's fault handling (zeroing the page
// included) and not the time the thread waits for a core, so a busy
// machine does not make faults look dear; the least of the chunks drops
// a chunk an interrupt lengthened.
func faultCost(advice, chunk, chunks int) time.Duration {
	n := chunks * chunk
	m, err := unix.Mmap(-1, 0, n+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0
	}
	defer unix.Munmap(m)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(m))) % hugePage); r != 0 {
		off = hugePage - r
	}
	b := m[off : off+n]
	if unix.Madvise(b, advice) != nil {
		return 0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Duration(math.MaxInt64)
	for c := 0; c < chunks; c++ {
		t0, ok := threadCPU()
		for i := c * chunk; i < (c+1)*chunk; i += smallPage {
			b[i] = 1
		}
		t1, ok1 := threadCPU()
		if !ok || !ok1 {
			return 0
		}
		best = min(best, t1-t0)
	}
	return best
}

// threadCPU reads the calling thread's CPU clock.
func threadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
