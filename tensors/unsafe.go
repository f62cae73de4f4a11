package tensors

import "unsafe"

func sizeOf[T any](v T) uintptr { return unsafe.Sizeof(v) }

func unsafeBytes[T any](v []T, size int) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*size)
}

// stringBytes returns s's bytes without copying; they must not be modified.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
