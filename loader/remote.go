package loader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/relayout/relayout/dataset"
	"github.com/relayout/relayout/internal/errs"
	"github.com/relayout/relayout/internal/par"
	"github.com/relayout/relayout/manifests"
	"github.com/relayout/relayout/storage"
)

// A remote output (s3://, gs://, azblob://, mem://, with the CLI's query
// parameters) is read through a local cache: by block when the manifest
// gives every shard's header (blocks.go), else by whole shard. Every file
// is downloaded under a temporary name, checked against its hash (the
// manifest's, or the shard's block table's), then renamed to a name that
// carries that hash, the only name a reader trusts (a killed download
// leaves a .tmp file no reader uses, removed by the next one that needs the
// space). Several readers (workers, ranks, processes) may share one cache
// folder: a download holds a lock file, and space is reserved under the
// folder's lock (and its ledger). A reader knows its whole epoch (the order
// is a pure function of the manifest and the seed), so it prefetches what
// its next windows need, in order, and evicts first what it will not read
// again this epoch.

// DefaultCacheBytes bounds a remote dataset's cache when Options do not.
const DefaultCacheBytes = 8 << 30

// DefaultMaxRequests is how many ranged reads a remote dataset has in
// flight at most: as many as the S3 client keeps connections to one host
// (storage.StoreConnections), so connections are reused. Ten, the AWS SDK's
// default pool, made an epoch latency-bound: 2.7 s against 1.0 s with 64
// from a loopback store answering after 20 ms (docs/benchmarks.md).
const DefaultMaxRequests = storage.StoreConnections

// DefaultPrefetchWindows is how many windows ahead a reader downloads.
const DefaultPrefetchWindows = 2

// RemoteStats is what a remote dataset downloaded and waited for.
type RemoteStats struct {
	// BytesDownloaded and Downloads count verified shard downloads;
	// Retries the downloads repeated after a failed check or a read error.
	BytesDownloaded, Downloads, Retries int64
	// Waited is the time readers waited for a shard not yet in the cache.
	Waited time.Duration
	// Listings counts the cache folder's listings: at the first
	// reservation, every 30 seconds, and when the ledger says the folder
	// is full (then about once per eighth of CacheBytes downloaded).
	Listings int64
}

type remote struct {
	loc   storage.Location
	url   string
	dir   string
	limit int64
	ahead int

	bytes, downloads, retries, waited, listings atomic.Int64

	mu   sync.Mutex
	cond *sync.Cond
	// uses lists, per cache name, the positions (in the reader's window
	// opening order) of the windows still to open that need it: empty once
	// the reader has opened it for the last time (finished); mapped marks
	// the shards mapped now. Eviction spares both, and evicts what is
	// needed last (or never) first.
	uses   map[string][]int
	mapped map[string]bool
	closed bool
	// lastScan is when reserve last listed the folder (under its lock).
	lastScan atomic.Int64 // unix nanoseconds
	// requests bounds the ranged reads in flight (maxRequests).
	requests chan struct{}
	// byBlock: every shard's header is in the manifest, so the reader
	// fetches blocks, not whole shards (blocks.go).
	byBlock bool
	cur     int // the reader's window now opening (never: none planned)
}

// current is the window the reader is opening.
func (rc *remote) current() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.cur
}

// errNoRoom is a prefetch that would have to evict something needed sooner.
var errNoRoom = errors.New("no room in the cache yet")

// never is the next use of a shard not needed again this epoch.
const never = int(^uint(0) >> 1)

// IsRemote reports whether path names an object-store output.
func IsRemote(path string) bool {
	return storage.IsURL(path) && !strings.HasPrefix(path, "file://")
}

// openRemote reads a remote output's manifest and sets up its cache.
func openRemote(ctx context.Context, url string, opts Options) (*manifests.Manifest, *remote, error) {
	loc, err := storage.OpenDir(ctx, url, false)
	if err != nil {
		return nil, nil, err
	}
	var m *manifests.Manifest
	gens, err := storage.ListKeys(ctx, loc, dataset.GenerationsPrefix)
	if err != nil {
		return nil, nil, err
	}
	if len(gens) > 0 { // a dataset root: its generation's parts as one output
		read := func(rel string) ([]byte, error) { return storage.Get(ctx, loc, rel) }
		if m, err = readGeneration(loc.Name, opts.Generation, gens, read); err != nil {
			return nil, nil, err
		}
	} else {
		data, err := storage.Get(ctx, loc, manifests.FileName)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", loc.URL(manifests.FileName), err)
		}
		if m, err = manifests.Decode(data); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", loc.URL(manifests.FileName), err)
		}
	}
	rc, err := newRemote(loc, url, opts)
	return m, rc, err
}

// newRemote is the cache of the output at loc (url) under opts.
func newRemote(loc storage.Location, url string, opts Options) (*remote, error) {
	dir := opts.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "relayout", fmt.Sprintf("%016x", xxhash.Sum64String(loc.Name)))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rc := &remote{loc: loc, url: url, dir: dir, limit: opts.CacheBytes, ahead: opts.PrefetchWindows,
		uses: map[string][]int{}, mapped: map[string]bool{}, cur: never}
	n := opts.MaxRequests
	if n <= 0 {
		n = DefaultMaxRequests
	}
	rc.requests = make(chan struct{}, n)
	if rc.limit <= 0 {
		rc.limit = DefaultCacheBytes
	}
	if rc.ahead <= 0 {
		rc.ahead = DefaultPrefetchWindows
	}
	rc.cond = sync.NewCond(&rc.mu)
	return rc, nil
}

// cacheObj is what the cache holds as one file: a whole shard, a shard's
// header, or one block of a shard (its byte ranges, concatenated).
type cacheObj struct {
	// name is the trusted file name in the cache: it names the content
	// (the hash it was checked against), so a file of that name is trusted.
	name  string
	bytes int64
	hash  string // xxhash64 of the content
	key   string // the shard's path under the output
	// ranges are the byte ranges of the shard fetched and concatenated, in
	// order (nil: the whole shard).
	ranges [][2]int64
	what   string // for messages: "shard", "header" or "block k"
	// block is a block's index in its shard (else 0) and tensors the
	// schema tensor of each of its ranges.
	block   int
	tensors []int
	// reqs are the requests that fetch ranges (those that touch merged:
	// mergeRanges) and at where each one's bytes go in the file; made
	// with the object, which a reader keeps (Dataset.obj).
	reqs [][2]int64
	at   []int64
}

// shardObj is a whole shard.
func shardObj(sh manifests.Shard) cacheObj {
	return cacheObj{name: fmt.Sprintf("%s-%d.safetensors", sh.XXHash64, sh.Bytes), bytes: sh.Bytes, hash: sh.XXHash64, key: sh.Path, what: "shard"}
}

// headerObj is a shard's safetensors prefix (length and JSON header).
func headerObj(sh manifests.Shard) cacheObj {
	o := cacheObj{name: fmt.Sprintf("%s-%d.header", sh.XXHash64, sh.Bytes), bytes: sh.HeaderBytes, hash: sh.HeaderXXHash64,
		key: sh.Path, ranges: [][2]int64{{0, sh.HeaderBytes}}, what: "header"}
	o.reqs, o.at = mergeRanges(o.ranges)
	return o
}

// blockObj is block k of a shard whose data buffer starts at dataStart:
// its ranges in data order.
func blockObj(sh manifests.Shard, bt *manifests.BlockTable, dataStart int64, k int) cacheObj {
	o := cacheObj{name: fmt.Sprintf("%s-%d-%d-%s.block", sh.XXHash64, sh.Bytes, k, bt.XXHash64[k]), hash: bt.XXHash64[k],
		key: sh.Path, what: fmt.Sprintf("block %d", k)}
	r := bt.Ranges[k]
	for j := 0; j+1 < len(r); j += 2 {
		if r[j+1] > r[j] {
			o.ranges = append(o.ranges, [2]int64{dataStart + r[j], dataStart + r[j+1]})
			o.tensors = append(o.tensors, j/2)
			o.bytes += r[j+1] - r[j]
		}
	}
	sort.Sort(byBegin{&o})
	o.reqs, o.at = mergeRanges(o.ranges)
	o.block = k
	return o
}

// byBegin sorts a block's ranges (and their tensors) by offset.
type byBegin struct{ o *cacheObj }

func (b byBegin) Len() int           { return len(b.o.ranges) }
func (b byBegin) Less(i, j int) bool { return b.o.ranges[i][0] < b.o.ranges[j][0] }
func (b byBegin) Swap(i, j int) {
	b.o.ranges[i], b.o.ranges[j] = b.o.ranges[j], b.o.ranges[i]
	b.o.tensors[i], b.o.tensors[j] = b.o.tensors[j], b.o.tensors[i]
}

// requests is how many requests download makes for o.
func (o cacheObj) requests() int {
	return max(len(o.reqs), 1)
}

// mergeRanges returns the requests that fetch ranges (sorted by offset,
// not overlapping), those that touch merged into one, and where each
// request's bytes go in the concatenation of ranges.
func mergeRanges(ranges [][2]int64) (reqs [][2]int64, at []int64) {
	var n int64
	for _, r := range ranges {
		if k := len(reqs) - 1; k >= 0 && reqs[k][1] == r[0] {
			reqs[k][1] = r[1]
		} else {
			reqs, at = append(reqs, r), append(at, n)
		}
		n += r[1] - r[0]
	}
	return reqs, at
}

func (rc *remote) path(o cacheObj) string { return filepath.Join(rc.dir, o.name) }

func (rc *remote) present(o cacheObj) bool {
	st, err := os.Stat(rc.path(o))
	return err == nil && st.Size() == o.bytes
}

// ensure makes an object present in the cache, downloading it (after
// reserving its space) unless it is there, for the window at position pos
// of the reader's order. The reader (wait) evicts whatever is needed later
// than pos; the prefetcher (!wait) gets errNoRoom rather than evict
// something needed sooner than what it fetches.
func (rc *remote) ensure(ctx context.Context, sh cacheObj, pos int, wait bool) error {
	if wait {
		// The reader maps it next: no eviction may take it meanwhile.
		rc.setMapped(sh, true)
	}
	if rc.present(sh) {
		return nil
	}
	unlock, err := lockObjs(rc.dir, []string{sh.name})
	if err != nil {
		return err
	}
	defer unlock()
	if rc.present(sh) { // another reader downloaded it meanwhile
		return nil
	}
	if !wait {
		var needed bool
		if pos, needed = rc.prefetchPos(pos, sh); !needed {
			return nil // the reader went past it while the prefetch waited for room
		}
	}
	tmp, err := rc.reserve(ctx, sh.bytes, pos, wait)
	if err != nil {
		return err
	}
	defer rc.release(tmp, sh.bytes) // after the rename, a no-op
	last := rc.attempts(ctx, func() error { return rc.download(ctx, sh, tmp) })
	if last == nil {
		return nil
	}
	if sh.ranges == nil {
		return fmt.Errorf("shard %s of %s: %w", sh.key, rc.url, last)
	}
	return fmt.Errorf("%s of shard %s of %s: %w", sh.what, sh.key, rc.url, last)
}

// attempts runs a download up to 4 times while what it fetched fails its
// check (each counted as a retry, with a growing pause) and returns the
// last error. A read that failed has been retried already (storage.Retry,
// and the SDK's own retries under it): downloading again would multiply
// the requests sent to a store that is failing (60 GETs and 56 s for one
// shard of a store answering 503, against 15 and 10-20 s).
func (rc *remote) attempts(ctx context.Context, download func() error) error {
	var last error
	for attempt := 0; attempt < 4; attempt++ {
		if attempt > 0 {
			rc.retries.Add(1)
			time.Sleep(time.Duration(attempt*attempt) * 100 * time.Millisecond)
		}
		last = download()
		var bad checkError
		if last == nil || ctx.Err() != nil || !errors.As(last, &bad) {
			break
		}
	}
	return last
}

// checkError is a download whose bytes did not hash to what the manifest
// (or the shard's block table) says: fetched again, it may arrive intact.
type checkError struct{ error }

// download fetches one object into its reserved temporary file (tmp, as
// large as the object, so the folder's usage counts it), checks it and
// renames it to its trusted name. A block's ranges are ranged reads into
// their places in the file, each retried on its own (a block has one per
// tensor, so retrying them all together would rarely succeed on a flaky
// network); the file is hashed once written.
func (rc *remote) download(ctx context.Context, sh cacheObj, tmp string) error {
	f, err := os.OpenFile(tmp, os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	h := xxhash.New()
	url := rc.loc.URL(sh.key)
	// get reads n bytes at off (n < 0: the whole object) into w.
	get := func(off, n int64, w io.Writer) error {
		rd, err := rc.loc.Bucket.NewRangeReader(ctx, rc.loc.Key(sh.key), off, n, nil)
		if err != nil {
			return storage.Classify(fmt.Errorf("read %s: %w", url, err))
		}
		defer rd.Close()
		// Not rd's WriteTo, which allocates a large buffer per call: a
		// block's many small ranges would pay for it over and over.
		got, err := storage.Copy(w, rd)
		if err != nil {
			return errs.TransientErr(fmt.Errorf("read %s: %w", url, err))
		}
		want := n
		if n < 0 {
			want = sh.bytes
		}
		if got != want {
			return errs.TransientErr(fmt.Errorf("read %s: %d of %d bytes at %d", url, got, want, off))
		}
		return nil
	}
	if sh.ranges == nil {
		rc.requests <- struct{}{}
		defer func() { <-rc.requests }()
		err = storage.Retry(ctx, func() error {
			h.Reset()
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			return get(0, -1, io.MultiWriter(f, h))
		})
	} else {
		// The ranges at once (the store serves many requests in parallel;
		// one after another, a block would take a round trip per tensor),
		// each into its place in the file; ranges that touch are one
		// request (a shard of one block, --shard-blocks 1, is one).
		reqs, pos := sh.reqs, sh.at
		err = par.ForEach(ctx, len(reqs), rangeParallel, func(k int) error {
			r := reqs[k]
			rc.requests <- struct{}{}
			defer func() { <-rc.requests }()
			return storage.Retry(ctx, func() error {
				return get(r[0], r[1]-r[0], io.NewOffsetWriter(f, pos[k]))
			})
		})
		if err == nil {
			if _, err = f.Seek(0, io.SeekStart); err == nil {
				_, err = io.Copy(h, f)
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if got := fmt.Sprintf("%016x", h.Sum64()); got != sh.hash {
		what := "the manifest says"
		if sh.ranges != nil && sh.what != "header" {
			what = "the shard's block table says"
		}
		return checkError{fmt.Errorf("%s (%s): xxhash64 %s, %s %s (damaged on the store, or changed since the manifest)", url, sh.what, got, what, sh.hash)}
	}
	return rc.commit(tmp, sh)
}

// commit renames a checked download to its trusted name, under the
// folder's lock (a listing racing a rename may miss the file, and reserve
// would count too little), and counts it.
func (rc *remote) commit(tmp string, o cacheObj) error {
	_, unlock, err := lockFolder(rc.dir)
	if err != nil {
		return err
	}
	err = os.Rename(tmp, rc.path(o))
	unlock()
	if err != nil {
		return err
	}
	rc.bytes.Add(o.bytes)
	rc.downloads.Add(1)
	return nil
}

// The cache folder's usage is kept in its lock file, cache.lock, as a
// decimal byte count (the ledger): a reservation that fits the ledger
// takes the fast path, without listing the folder, which holds a file per
// block and would cost a directory scan per download. Only a reservation
// that does not fit lists the folder, takes its true usage (files removed
// by hand, a killed reader's leftovers), evicts, and rewrites the ledger.
// Every change of the folder's usage (a reservation, a failed download's
// temporary file, an eviction) happens under the lock and updates the
// ledger; a rename keeps the size. Go and Python readers keep the same
// ledger. A reader lists the folder at its first reservation and every
// rescanEvery after, so files put there by other means (by hand, by an
// older reader) are counted soon. ledgerSlack counts the ledger's own
// bytes.
const (
	ledgerSlack = 32
	rescanEvery = 30 * time.Second
	// evictLow: an eviction that lists the folder also removes the files
	// the reader will not read again this epoch until the folder is an
	// evictLow-th below its budget, so that the next listing is that many
	// bytes of downloads away, not one.
	evictLow = 8
)

// reserve makes room for n more bytes under the cache folder's lock and
// returns a temporary file of that size holding it. When the ledger says
// the folder is full it evicts first the files this reader will not read
// again this epoch (blocks and shards of other outputs, leftovers of
// killed downloads), oldest first; when the folder is full of files still
// to be read it waits for the reader to finish a window (or another reader
// to free space). A budget too small for what must be open at once is
// refused before the epoch (Reader).
func (rc *remote) reserve(ctx context.Context, n int64, pos int, wait bool) (string, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		lf, unlock, err := lockFolder(rc.dir)
		if err != nil {
			return "", err
		}
		used, known := readLedger(lf)
		ok := known && used+n+ledgerSlack <= rc.limit && time.Since(time.Unix(0, rc.lastScan.Load())) < rescanEvery
		if !ok {
			var files []cacheFile
			used, files = rc.usage()
			rc.lastScan.Store(time.Now().UnixNano())
			rc.listings.Add(1)
			rc.mu.Lock()
			sort.SliceStable(files, func(i, j int) bool { return rc.nextUse(files[i].name) > rc.nextUse(files[j].name) })
			// What must go, plus (evictLow) what this reader has read for
			// the last time this epoch, down to a low mark: a full folder
			// would otherwise be listed again at the next reservation.
			// Beyond what must go, files this reader has not read (another
			// reader's sharing the folder, say) stay.
			low := rc.limit - rc.limit/evictLow
			for _, f := range files {
				fits := used+n+ledgerSlack <= rc.limit
				if fits && used+n+ledgerSlack <= low {
					break
				}
				if rc.spared(f, pos) || fits && !rc.finished(f.name) {
					continue
				}
				if os.Remove(filepath.Join(rc.dir, f.name)) == nil {
					used -= f.size
					delete(rc.uses, f.name) // gone: not this reader's file any more
				}
			}
			ok = used+n+ledgerSlack <= rc.limit
			rc.mu.Unlock()
		}
		if ok {
			var suffix [6]byte
			rand.Read(suffix[:])
			tmp := filepath.Join(rc.dir, fmt.Sprintf(".tmp-%d-%s", os.Getpid(), hex.EncodeToString(suffix[:])))
			f, err := os.Create(tmp)
			if err == nil {
				err = f.Truncate(n) // counted by the folder's usage from now on
				f.Close()
			}
			if err == nil {
				err = writeLedger(lf, used+n)
			} else {
				writeLedger(lf, used)
			}
			unlock()
			if err != nil {
				os.Remove(tmp)
				return "", err
			}
			return tmp, nil
		}
		writeLedger(lf, used)
		unlock()
		if !wait {
			return "", errNoRoom
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("cache %s: %d bytes (CacheBytes) stayed full of files still needed for 2 minutes (other readers share it?); raise CacheBytes", rc.dir, rc.limit)
		}
		time.Sleep(20 * time.Millisecond) // another reader frees space
	}
}

// release removes a reservation's temporary file that did not become a
// cache file (a failed download), and takes it off the ledger.
func (rc *remote) release(tmp string, n int64) {
	if _, err := os.Lstat(tmp); os.IsNotExist(err) {
		return // renamed to its cache name (the name is this reservation's alone): nothing to take back
	}
	lf, unlock, err := lockFolder(rc.dir)
	if err != nil {
		os.Remove(tmp)
		return
	}
	defer unlock()
	if os.Remove(tmp) == nil {
		if used, ok := readLedger(lf); ok {
			writeLedger(lf, max(used-n, 0))
		}
	}
}

// lockFolder locks the cache folder's lock file, cache.lock, across
// processes and returns it open for reading and writing the ledger, with
// the unlock. Goroutines of one process take the folder's mutex first, so
// that one of them at a time waits in flock (each would hold an OS thread
// there); the flock still excludes other processes, and two spellings of
// one folder (two mutexes) are still excluded by it.
func lockFolder(dir string) (*os.File, func(), error) {
	mu := folderMutex(dir)
	mu.Lock()
	f, err := os.OpenFile(filepath.Join(dir, "cache.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		mu.Unlock()
		return nil, nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		mu.Unlock()
		return nil, nil, err
	}
	return f, func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		mu.Unlock()
	}, nil
}

var folderMutexes sync.Map // folder -> *sync.Mutex

// folderMutex is the mutex of the process for the cache folder dir.
func folderMutex(dir string) *sync.Mutex {
	m, _ := folderMutexes.LoadOrStore(dir, new(sync.Mutex))
	return m.(*sync.Mutex)
}

// readLedger reads the usage the ledger records (false: none yet).
func readLedger(f *os.File) (int64, bool) {
	var b [24]byte
	n, _ := f.ReadAt(b[:], 0)
	v, err := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	return v, err == nil && v >= 0
}

// writeLedger records the folder's usage: ledgerWidth bytes, the number
// padded with spaces, written over the last one. Never truncated: ext4
// writes a file truncated to nothing and written again back to disk when
// it is closed (auto_da_alloc), 0.3 ms a reservation under the folder's
// lock. A ledger an older reader wrote (unpadded, shorter) is overwritten
// whole, and every reader trims the spaces.
func writeLedger(f *os.File, used int64) error {
	b := fmt.Appendf(make([]byte, 0, ledgerWidth), "%-*d", ledgerWidth, used)
	_, err := f.WriteAt(b, 0)
	return err
}

// ledgerWidth is the ledger's size: an int64 in decimal, padded.
const ledgerWidth = 20

type cacheFile struct {
	name string
	size int64
	mod  time.Time
}

// usage lists the cache folder's files (shards and downloads in flight),
// oldest first.
func (rc *remote) usage() (int64, []cacheFile) {
	ents, _ := os.ReadDir(rc.dir)
	var used int64
	var out []cacheFile
	for _, e := range ents {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		used += info.Size()
		out = append(out, cacheFile{e.Name(), info.Size(), info.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].mod.Before(out[j].mod) })
	return used, out
}

// spared reports whether eviction for the window at pos must keep a
// cache file: a download in flight (a .tmp file younger than staleTmp:
// older ones are a killed reader's), a mapped shard, or one the reader
// needs at or before pos. Called with rc.mu held.
func (rc *remote) spared(f cacheFile, pos int) bool {
	if strings.HasPrefix(f.name, ".tmp-") {
		return time.Since(f.mod) < staleTmp
	}
	return rc.mapped[f.name] || rc.nextUse(f.name) <= pos
}

// prefetchPos is the window position a prefetch of objs reserves for: pos,
// or the latest of their next uses if later (a prefetch that waited for
// room may find the reader past the windows it planned for; it must evict
// nothing needed before what it fetches). needed is false when the reader
// will open no window that needs one of them this epoch: fetched then, it
// would be a second download of a file the reader has read and evicted.
func (rc *remote) prefetchPos(pos int, objs ...cacheObj) (_ int, needed bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, o := range objs {
		next := rc.nextUse(o.name)
		if next == never {
			return pos, false
		}
		pos = max(pos, next)
	}
	return pos, true
}

// finished reports whether the reader has opened a cache file for the
// last time this epoch. Called with rc.mu held.
func (rc *remote) finished(file string) bool {
	u, ok := rc.uses[file]
	return ok && len(u) == 0
}

// nextUse is the position of the next window that needs a cache file.
func (rc *remote) nextUse(file string) int {
	if u := rc.uses[file]; len(u) > 0 {
		return u[0]
	}
	return never
}

// staleTmp is the age at which a download's temporary file is taken for a
// killed reader's.
const staleTmp = 10 * time.Minute

// stats returns what the cache downloaded and waited for.
func (rc *remote) stats() RemoteStats {
	return RemoteStats{BytesDownloaded: rc.bytes.Load(), Downloads: rc.downloads.Load(), Retries: rc.retries.Load(), Waited: time.Duration(rc.waited.Load()), Listings: rc.listings.Load()}
}

// planUse records that the window at pos will need an object.
func (rc *remote) planUse(o cacheObj, pos int) {
	rc.mu.Lock()
	rc.uses[o.name] = append(rc.uses[o.name], pos)
	rc.mu.Unlock()
}

// opening marks the window at pos as the one the reader opens now and
// drops it from its objects' uses.
func (rc *remote) opening(pos int, objs []cacheObj) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.cur = pos
	for _, o := range objs {
		rc.mapped[o.name] = true // the window maps them next
		u := rc.uses[o.name]
		for len(u) > 0 && u[0] <= pos {
			u = u[1:]
		}
		rc.uses[o.name] = u // empty: finished
	}
}

// setMapped marks an object mapped or not.
func (rc *remote) setMapped(o cacheObj, on bool) {
	rc.mu.Lock()
	if on {
		rc.mapped[o.name] = true
	} else {
		delete(rc.mapped, o.name)
	}
	rc.mu.Unlock()
}
