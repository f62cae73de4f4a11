//go:build !linux

package hugepages

import (
	"errors"
	"time"
	"unsafe"
)

func madviseHuge(addr, n uintptr) error { return errors.ErrUnsupported }

func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

// smallFaultCost is not measured here (0: unknown).
func smallFaultCost() time.Duration { return 0 }

// freshMemoryCost is not measured here (0: unknown).
func freshMemoryCost(huge bool) time.Duration { return 0 }
