package par

import "testing"

// TestFreeList: values come back last in, first out; an empty list says
// so; Clear drops what it kept.
func TestFreeList(t *testing.T) {
	var l FreeList[*int]
	if _, ok := l.Get(); ok {
		t.Fatal("an empty list returned a value")
	}
	a, b := new(int), new(int)
	l.Put(a)
	l.Put(b)
	if v, ok := l.Get(); !ok || v != b {
		t.Fatalf("Get = %p, %v; want the last put, %p", v, ok, b)
	}
	l.Clear()
	if _, ok := l.Get(); ok {
		t.Fatal("a cleared list returned a value")
	}
}
