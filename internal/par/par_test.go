package par

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
)

func TestForEach(t *testing.T) {
	var sum atomic.Int64
	if err := ForEach(context.Background(), 100, 4, func(i int) error { sum.Add(int64(i)); return nil }); err != nil {
		t.Fatal(err)
	}
	if sum.Load() != 4950 {
		t.Fatalf("sum %d: not every piece ran once", sum.Load())
	}
	e3, e7 := errors.New("3"), errors.New("7")
	err := ForEach(context.Background(), 10, 1, func(i int) error {
		switch i {
		case 3:
			return e3
		case 7:
			return e7
		}
		return nil
	})
	if err != e3 {
		t.Fatalf("err = %v, want the lowest failing piece's", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var ran atomic.Int64
	if err := ForEach(ctx, 10, 2, func(int) error { ran.Add(1); return nil }); !errors.Is(err, context.Canceled) || ran.Load() != 0 {
		t.Fatalf("cancelled: err %v, ran %d", err, ran.Load())
	}
}

func TestPanicBecomesError(t *testing.T) {
	err := ForEach(context.Background(), 4, 2, func(i int) error {
		if i == 2 {
			var m map[string]int
			m["x"] = 1 // a nil-map write panics
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "internal error: panic") {
		t.Fatalf("want the panic as an error, got %v", err)
	}
}
