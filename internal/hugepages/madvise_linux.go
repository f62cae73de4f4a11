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
// the least CPU time per page of a chunk. The thread's CPU clock counts
// the kernel's fault handling and not the time the thread waits for a
// core, so a busy machine does not make faults look dear; the least of
// the chunks drops a chunk an interrupt lengthened.
func smallFaultCost() time.Duration {
	const page = 4 << 10
	n := probeChunks * probePages * page
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0
	}
	defer unix.Munmap(b)
	if unix.Madvise(b, unix.MADV_NOHUGEPAGE) != nil {
		return 0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := time.Duration(math.MaxInt64)
	for c := 0; c < probeChunks; c++ {
		t0, ok := threadCPU()
		for i := c * probePages * page; i < (c+1)*probePages*page; i += page {
			b[i] = 1
		}
		t1, ok1 := threadCPU()
		if !ok || !ok1 {
			return 0
		}
		best = min(best, (t1-t0)/probePages)
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
