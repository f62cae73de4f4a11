package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/relayout/relayout/internal/errs"
)

// LeaseFileName is the object that marks an output as owned by one run
// while it writes there. Its name starts with "_", so input listings skip it.
const LeaseFileName = "_relayout.lock"

// LeaseFormat identifies a lease object.
const LeaseFormat = "relayout-lease"

// DefaultLeaseTTL is how long a lease stays valid without being renewed. A
// run renews its lease every third of it.
const DefaultLeaseTTL = time.Minute

// LeaseInfo is the content of a lease object.
type LeaseInfo struct {
	Format  string    `json:"format"`
	RunID   string    `json:"run_id"`
	Command string    `json:"command"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Renewed time.Time `json:"renewed"`
	// TTLSeconds: the lease is stale once Renewed is older than this.
	TTLSeconds float64 `json:"ttl_seconds"`
}

// Stale reports whether the run that holds the lease is gone: it ran on this
// host and its process no longer exists, or it has not renewed the lease
// within its TTL.
func (li *LeaseInfo) Stale(now time.Time) bool {
	if host, _ := os.Hostname(); li.Host == host && li.PID > 0 {
		if !pidAlive(li.PID) {
			return true
		}
		if li.PID == os.Getpid() && !holding(li.RunID) {
			return true // this process's own, from a run that has ended
		}
	}
	ttl := time.Duration(li.TTLSeconds * float64(time.Second))
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return now.Sub(li.Renewed) > ttl
}

func (li *LeaseInfo) String() string {
	return fmt.Sprintf("run %s (%s, pid %d on %s, started %s, renewed %s)", li.RunID, li.Command, li.PID, li.Host,
		li.Started.UTC().Format(time.RFC3339), li.Renewed.UTC().Format(time.RFC3339))
}

// held are the run IDs of the leases this process holds now.
var held sync.Map

func holding(runID string) bool {
	_, ok := held.Load(runID)
	return ok
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Lease is an output owned by this process. Acquire creates it with a
// conditional create, so of two runs racing for one output exactly one
// gets it; a goroutine renews it until Release.
type Lease struct {
	loc  Location
	info LeaseInfo
	ttl  time.Duration

	mu   sync.Mutex
	lost error
	stop chan struct{}
	done chan struct{}
}

// AcquireLease takes the output at loc for command. If another live run
// holds it, it fails with a transient error (exit 4: try again later, by
// when that run has committed or died). A stale lease (its run is gone) is
// taken over and returned as prev: whatever that run left is debris the
// new owner may remove. ttl <= 0 means DefaultLeaseTTL.
func AcquireLease(ctx context.Context, loc Location, command string, ttl time.Duration) (l *Lease, prev *LeaseInfo, err error) {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	host, _ := os.Hostname()
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	now := time.Now().UTC()
	l = &Lease{loc: loc, ttl: ttl, info: LeaseInfo{Format: LeaseFormat, RunID: hex.EncodeToString(id), Command: command,
		Host: host, PID: os.Getpid(), Started: now, Renewed: now, TTLSeconds: ttl.Seconds()}}
	// Marked as held before it can be seen, so no other run of this process
	// takes it for one that ended.
	runID := l.info.RunID
	held.Store(runID, true)
	defer func() {
		if err != nil {
			held.Delete(runID)
		}
	}()
	for attempt := 0; ; attempt++ {
		err := l.put(ctx, true)
		if err == nil {
			break
		}
		if !IsExists(err) {
			return nil, nil, err
		}
		cur, err := ReadLease(ctx, loc)
		if err != nil {
			if IsNotFound(err) && attempt < 3 {
				continue // released meanwhile
			}
			return nil, nil, err
		}
		if !cur.Stale(time.Now()) {
			return nil, nil, errs.WithHint(errs.TransientErr(fmt.Errorf("output %s is being written by %s", loc.Name, cur)),
				"retry when that run has finished; if it is dead on another host, the lease expires "+fmt.Sprint(time.Duration(cur.TTLSeconds*float64(time.Second)))+" after its last renewal")
		}
		if attempt >= 3 {
			return nil, nil, errs.TransientErr(fmt.Errorf("output %s: could not take over the stale lease of %s", loc.Name, cur))
		}
		// Take the stale lease over: remove it, then race for it again with
		// a conditional create.
		if err := loc.Bucket.Delete(ctx, loc.Key(LeaseFileName)); err != nil && !IsNotFound(err) {
			return nil, nil, Classify(fmt.Errorf("remove stale %s: %w", loc.URL(LeaseFileName), err))
		}
		prev = cur
	}
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.renew(context.WithoutCancel(ctx))
	return l, prev, nil
}

// ReadLease reads the lease object at loc. An unreadable lease (not JSON)
// reads as stale, with no run ID.
func ReadLease(ctx context.Context, loc Location) (*LeaseInfo, error) {
	data, err := Get(ctx, loc, LeaseFileName)
	if err != nil {
		return nil, err
	}
	var li LeaseInfo
	if err := json.Unmarshal(data, &li); err != nil || li.Format != LeaseFormat {
		return &LeaseInfo{Command: "unknown (unreadable lease)"}, nil
	}
	return &li, nil
}

func (l *Lease) put(ctx context.Context, create bool) error {
	data, _ := json.MarshalIndent(l.info, "", " ")
	return Put(ctx, l.loc, LeaseFileName, append(data, '\n'), PutOptions{IfNotExist: create})
}

func (l *Lease) renew(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if err := l.Check(ctx); err != nil {
			return
		}
		l.mu.Lock()
		l.info.Renewed = time.Now().UTC()
		l.mu.Unlock()
		_ = l.put(ctx, false) // a failed renewal is retried at the next tick
	}
}

// RunID identifies the run that holds the lease.
func (l *Lease) RunID() string { return l.info.RunID }

// Check fails (exit 4) if the lease is no longer this run's: another run
// took it over, for instance while this process was stopped past the TTL.
// A run calls it right before its commit; the renewal calls it too.
func (l *Lease) Check(ctx context.Context) error {
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	cur, err := ReadLease(ctx, l.loc)
	if err != nil && !IsNotFound(err) {
		return err
	}
	if err == nil && cur.RunID == l.info.RunID {
		return nil
	}
	who := "nobody (it was removed)"
	if cur != nil {
		who = cur.String()
	}
	lost = errs.TransientErr(fmt.Errorf("output %s: this run lost its lease to %s; nothing was committed", l.loc.Name, who))
	l.mu.Lock()
	l.lost = lost
	l.mu.Unlock()
	return lost
}

// Release stops renewing and removes the lease if it is still this run's.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.Stop()
	if l.Check(ctx) != nil {
		return nil // not ours any more: leave it
	}
	if err := l.loc.Bucket.Delete(ctx, l.loc.Key(LeaseFileName)); err != nil && !IsNotFound(err) {
		return Classify(fmt.Errorf("remove %s: %w", l.loc.URL(LeaseFileName), err))
	}
	return nil
}

// Stop stops renewing the lease and leaves it in place: a run whose
// cleanup failed keeps its mark on the debris, so the next run knows the
// debris is relayout's and may remove it.
func (l *Lease) Stop() {
	if l == nil || l.stop == nil {
		return
	}
	select {
	case <-l.stop:
	default:
		close(l.stop)
		<-l.done
		held.Delete(l.info.RunID)
	}
}
