// Package faultproxy is an HTTP handler that injects the faults of a flaky
// network and a loaded object store in front of another handler (a loopback
// S3-protocol server in tests): 503 SlowDown answers, connections reset
// before an answer, response bodies cut short, and slow bodies. Faults are
// drawn from a seeded generator, so a failing trial can be replayed.
package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Rates are the probabilities, per request, of each fault.
type Rates struct {
	// Status503 answers 503 SlowDown without passing the request on.
	Status503 float64
	// Reset closes the connection without an answer.
	Reset float64
	// CutBody passes a GET on but ends its response body early (after
	// a random part of it), then drops the connection.
	CutBody float64
	// Slow delays each write of a response body by SlowDelay.
	Slow      float64
	SlowDelay time.Duration
	// Path, when set, limits the faults to requests whose URL path holds
	// it (a store down for data reads, its manifests still served).
	Path string
}

// Counts are the faults injected so far.
type Counts struct {
	Requests, Status503, Reset, CutBody, Slow atomic.Int64
}

func (c *Counts) String() string {
	return fmt.Sprintf("%d requests: %d x 503, %d resets, %d cut bodies, %d slow", c.Requests.Load(), c.Status503.Load(), c.Reset.Load(), c.CutBody.Load(), c.Slow.Load())
}

// Proxy injects faults in front of Next.
type Proxy struct {
	Next   http.Handler
	Counts Counts

	mu    sync.Mutex
	rng   *rand.Rand
	rates Rates
}

// New returns a proxy in front of next, with no faults until SetRates.
func New(next http.Handler, seed uint64) *Proxy {
	return &Proxy{Next: next, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// SetRates changes the fault rates (zero Rates: a clean network).
func (p *Proxy) SetRates(r Rates) {
	p.mu.Lock()
	p.rates = r
	p.mu.Unlock()
}

func (p *Proxy) draw(path string) (fault string, frac float64, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, x := p.rates, p.rng.Float64()
	if r.Path != "" && !strings.Contains(path, r.Path) {
		return "", 0, 0
	}
	frac = p.rng.Float64()
	switch {
	case x < r.Status503:
		return "503", frac, 0
	case x < r.Status503+r.Reset:
		return "reset", frac, 0
	case x < r.Status503+r.Reset+r.CutBody:
		return "cut", frac, 0
	case x < r.Status503+r.Reset+r.CutBody+r.Slow:
		return "slow", frac, r.SlowDelay
	}
	return "", frac, 0
}

// ServeHTTP passes the request on, or fails it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.Counts.Requests.Add(1)
	fault, frac, delay := p.draw(r.URL.Path)
	switch fault {
	case "503":
		p.Counts.Status503.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		return
	case "reset":
		p.Counts.Reset.Add(1)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case "cut":
		if r.Method != http.MethodGet {
			break
		}
		p.Counts.CutBody.Add(1)
		cw := &cutWriter{ResponseWriter: w, frac: frac}
		p.Next.ServeHTTP(cw, r)
		if cw.cut {
			panic(http.ErrAbortHandler) // drop the connection mid-body
		}
		return
	case "slow":
		p.Counts.Slow.Add(1)
		p.Next.ServeHTTP(&slowWriter{ResponseWriter: w, delay: delay}, r)
		return
	}
	p.Next.ServeHTTP(w, r)
}

// cutWriter forwards a response but stops its body after frac of the
// declared length.
type cutWriter struct {
	http.ResponseWriter
	frac        float64
	limit, sent int64
	started     bool
	cut         bool
}

func (c *cutWriter) WriteHeader(code int) {
	c.started = true
	c.limit = -1
	if code/100 == 2 {
		var n int64
		if _, err := fmt.Sscan(c.Header().Get("Content-Length"), &n); err == nil && n > 1 {
			c.limit = int64(float64(n) * c.frac)
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *cutWriter) Write(b []byte) (int, error) {
	if !c.started {
		c.WriteHeader(http.StatusOK)
	}
	if c.limit < 0 {
		return c.ResponseWriter.Write(b)
	}
	if c.sent+int64(len(b)) > c.limit {
		keep := c.limit - c.sent
		if keep > 0 {
			c.ResponseWriter.Write(b[:keep])
		}
		c.sent = c.limit
		c.cut = true
		if f, ok := c.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		return len(b), nil // swallowed; the handler aborts after
	}
	c.sent += int64(len(b))
	return c.ResponseWriter.Write(b)
}

// slowWriter delays every body write.
type slowWriter struct {
	http.ResponseWriter
	delay time.Duration
}

func (s *slowWriter) Write(b []byte) (int, error) {
	time.Sleep(s.delay)
	return s.ResponseWriter.Write(b)
}
