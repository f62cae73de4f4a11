package hugepages

import (
	"syscall"
	"unsafe"
)

func madviseHuge(addr, n uintptr) error {
	_, _, e := syscall.Syscall(syscall.SYS_MADVISE, addr, n, 14 /* MADV_HUGEPAGE */)
	if e != 0 {
		return e
	}
	return nil
}

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
