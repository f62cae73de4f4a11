package hugepages

import (
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
