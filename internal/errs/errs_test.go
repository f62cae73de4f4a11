package errs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestOrKeepsClass: Or never overrides a class found in the chain, and an
// interrupted run is transient whatever the default says. A tensor shard
// write cut short by SIGTERM used to be reported as bad input (exit 3).
func TestOrKeepsClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Class
	}{
		{errors.New("decoder failed"), BadInput},
		{fmt.Errorf("tensors: %w", TransientErr(errors.New("write shard: connection reset"))), Transient},
		{fmt.Errorf("tensors: %w", fmt.Errorf("write shard: %w", context.Canceled)), Transient},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), Transient},
		{fmt.Errorf("tensors: %w", Usagef("bad spec")), Usage},
	} {
		if got := ClassOf(Or(BadInput, c.err)); got != c.want {
			t.Errorf("Or(BadInput, %v) is %v, want %v", c.err, got, c.want)
		}
	}
	if Or(BadInput, nil) != nil {
		t.Error("Or(BadInput, nil) is not nil")
	}
}
