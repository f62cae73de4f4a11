package par

import "testing"

// TestFreeList: values come back last in, first out; an empty list says
// so; PutUpTo keeps no more than its bound; Trim keeps the first n; Clear
// drops what it kept.
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
	c := new(int)
	if !l.PutUpTo(c, 2) || l.PutUpTo(new(int), 2) {
		t.Fatal("PutUpTo(2) with one kept: want the first kept and the second refused")
	}
	l.Trim(1)
	if v, ok := l.Get(); !ok || v != a {
		t.Fatalf("after Trim(1) Get = %p, %v; want the first put, %p", v, ok, a)
	}
	if _, ok := l.Get(); ok {
		t.Fatal("Trim(1) kept more than one value")
	}
	l.Put(a)
	l.Clear()
	if _, ok := l.Get(); ok {
		t.Fatal("a cleared list returned a value")
	}
}
