package par

import "sync"

// FreeList keeps values for reuse across goroutines. Unlike a sync.Pool it
// keeps them through garbage collections: the values it holds (scratch
// buffers, window buffers) are large and costly to regrow.
type FreeList[T any] struct {
	mu   sync.Mutex
	free []T
}

// Get returns a kept value, or ok false when none is kept.
func (l *FreeList[T]) Get() (v T, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		v = l.free[n-1]
		l.free = l.free[:n-1]
		return v, true
	}
	return v, false
}

// Put keeps v for a later Get.
func (l *FreeList[T]) Put(v T) {
	l.mu.Lock()
	l.free = append(l.free, v)
	l.mu.Unlock()
}

// PutUpTo keeps v for a later Get when fewer than n values are kept, and
// reports whether it did (a list bounded by its caller: the values beyond
// go elsewhere or to the collector).
func (l *FreeList[T]) PutUpTo(v T, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) >= n {
		return false
	}
	l.free = append(l.free, v)
	return true
}

// Trim drops the kept values beyond the first n.
func (l *FreeList[T]) Trim(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n = max(n, 0); len(l.free) > n {
		clear(l.free[n:])
		l.free = l.free[:n]
	}
}

// Clear drops every kept value.
func (l *FreeList[T]) Clear() {
	l.mu.Lock()
	l.free = nil
	l.mu.Unlock()
}
