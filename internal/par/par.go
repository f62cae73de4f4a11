// Package par runs independent pieces of work on a bounded number of
// goroutines.
package par

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

// call runs fn(i), turning a panic into an error: a worker goroutine that
// panics would otherwise end the process without its exit-code contract.
func call(fn func(int) error, i int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if os.Getenv("RELAYOUT_DEBUG") != "" {
				fmt.Fprintf(os.Stderr, "panic: %v\n%s", r, debug.Stack())
			}
			err = fmt.Errorf("internal error: panic: %v (set RELAYOUT_DEBUG=1 for the stack and report it)", r)
		}
	}()
	return fn(i)
}

// ForEach calls fn(i) for i in [0, n) on at most workers goroutines and
// returns the error of the lowest i that failed (so the error reported does
// not depend on scheduling), or nil. After a failure, or once ctx is done,
// pieces not yet started are skipped; ctx's error is returned if nothing
// failed first.
func ForEach(ctx context.Context, n, workers int, fn func(i int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	workers = max(min(workers, n), 1)
	errv := make([]error, n)
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed bool
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				mu.Lock()
				stop := failed
				mu.Unlock()
				if stop || ctx.Err() != nil {
					continue
				}
				if err := call(fn, i); err != nil {
					errv[i] = err
					mu.Lock()
					failed = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errv {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}
