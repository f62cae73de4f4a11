package main

import "unsafe"

func sizeOfT[T any](v T) uintptr { return unsafe.Sizeof(v) }

func unsafeBytes[T any](v []T, size int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*size)
}
