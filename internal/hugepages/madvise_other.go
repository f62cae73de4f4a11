//go:build !linux

package hugepages

import (
	"errors"
	"unsafe"
)

func madviseHuge(addr, n uintptr) error { return errors.ErrUnsupported }

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
