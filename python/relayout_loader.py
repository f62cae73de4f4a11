"""Read relayout tensor shards with NumPy, following relayout-order-v2 (window
order, the default) or relayout-order-v1 (shuffle="block").

    from relayout_loader import Dataset
    ds = Dataset("out/manifest.json", rank=0, world=8, worker=0, num_workers=4, seed=1, epoch=0)
    for batch in ds.batches(512):   # dict: tensor name -> numpy array
        ...

Shards are memory-mapped. In the window order a reader reads each window's
blocks once, storing their rows in batch order, and copies each batch out of
that; in the block order a batch
whose samples lie in one shard piece is a set of zero-copy views (offsets
tensors are always small rebased copies).
The order and the split between (rank, worker) readers follow the contract in
docs/loader.md, which the Go package github.com/relayout/relayout/loader
implements too. Only NumPy is required; `verify_checksums=True` needs the
xxhash module (Debian: python3-xxhash). Where torch is installed, TorchDataset
wraps Dataset as a torch.utils.data.IterableDataset (torch is imported when
TorchDataset is first used, not with this module).

bfloat16 tensors are returned as uint16 arrays of their bits (NumPy has no
bfloat16); `torch.from_numpy(a).view(torch.bfloat16)` turns them into values.
"""

__version__ = "0.1.0.dev0"  # PEP 440 form of the CLI's version (a Go test keeps them equal)

import atexit
import importlib.util
import json
import mmap
import operator
import os
import struct
import threading
import weakref

import numpy as np

__all__ = ["Dataset", "merge_parts", "open_generation", "read_header", "sequence", "batch_ranges", "SplitMix64", "WindowPerm", "block_order",
           "streams_of", "stream_windows", "window_batches", "window_samples", "tune_malloc"]

ALGORITHM = "relayout-order-v1"
# The manifest and dataset generation format versions this loader reads
# (Go: manifests.FormatVersion, dataset.FormatVersion).
MANIFEST_FORMAT_VERSION = 1
GENERATION_FORMAT_VERSION = 1
M64 = (1 << 64) - 1

DTYPES = {
    "BOOL": np.dtype("|b1"), "U8": np.dtype("|u1"), "I8": np.dtype("|i1"),
    "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
}
MAX_HEADER = 100 << 20


# --- the determinism contract -------------------------------------------------

class SplitMix64:
    """The generator of relayout-order-v1."""

    def __init__(self, seed, epoch):
        self.state = (seed ^ (((epoch + 1) * 0xD1B54A32D192ED03) & M64)) & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)


def block_order(k, seed, epoch, shuffle=True):
    """The order in which an epoch visits k canonical blocks (Fisher-Yates)."""
    p = list(range(k))
    if not shuffle:
        return p
    rng = SplitMix64(seed, epoch)
    for i in range(k - 1, 0, -1):
        j = rng.next() % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def sequence(n, block_samples, sel, seed, epoch, shuffle=True):
    """The epoch's global sample order as [start, end) ranges.

    The n samples are cut into blocks of block_samples; the full blocks are
    visited in block_order, then the partial last block if any, and each is
    cut to the selection sel (sorted disjoint ranges, None for everything)."""
    import bisect
    b = max(int(block_samples), 1)
    order = block_order(n // b, seed, epoch, shuffle)
    if n % b:
        order.append(n // b)
    out = []
    starts = [s for s, _ in sel] if sel is not None else None
    for blk in order:
        lo, hi = blk * b, min((blk + 1) * b, n)
        if sel is None:
            out.append((lo, hi))
            continue
        i = max(bisect.bisect_right(starts, lo) - 1, 0)
        while i < len(sel) and sel[i][0] < hi:
            a, e = max(sel[i][0], lo), min(sel[i][1], hi)
            if e > a:
                out.append((a, e))
            i += 1
    return out


def batch_ranges(seq, size, rank=0, world=1, worker=0, num_workers=1, samples_seen=0, drop_last=False):
    """The batches of one reader, each a list of ranges.

    After samples_seen samples, seq is cut into batches of size samples;
    global batch k goes to rank k % world, and a rank's j-th batch to worker
    j % num_workers. drop_last keeps only full batches, equally many per rank."""
    if size <= 0 or world <= 0 or num_workers <= 0:
        raise ValueError("batch size, world and num_workers must be positive")
    if not (0 <= rank < world and 0 <= worker < num_workers):
        raise ValueError(f"rank {rank} of {world}, worker {worker} of {num_workers}: out of range")
    total = sum(e - s for s, e in seq)
    rem = max(total - samples_seen, 0)
    nb = (rem + size - 1) // size
    if drop_last:
        nb = rem // (size * world) * world
    out = []
    i, off, pos = 0, 0, samples_seen
    while pos > 0 and i < len(seq):
        ln = seq[i][1] - seq[i][0]
        take = min(ln - off, pos)
        off += take
        pos -= take
        if off == ln:
            i, off = i + 1, 0
    for k in range(nb):
        mine = k % world == rank and (k // world) % num_workers == worker
        need = min(size, rem - k * size)
        b = []
        while need > 0 and i < len(seq):
            ln = seq[i][1] - seq[i][0]
            take = min(ln - off, need)
            if mine:
                s = seq[i][0] + off
                if b and b[-1][1] == s:
                    b[-1] = (b[-1][0], s + take)
                else:
                    b.append((s, s + take))
            off += take
            need -= take
            if off == ln:
                i, off = i + 1, 0
        if mine:
            out.append(b)
    return out


# --- relayout-order-v2: windows ---------------------------------------------------

DEFAULT_WINDOW_BYTES = 256 << 20


def window_samples(window_bytes, tensor_bytes, samples, batch):
    """Samples permuted together: those whose average bytes fit window_bytes,
    rounded down to a multiple of batch, at least one batch."""
    if not window_bytes or window_bytes <= 0:
        window_bytes = DEFAULT_WINDOW_BYTES
    w = samples
    if tensor_bytes > 0 and window_bytes * samples // tensor_bytes < (1 << 63):
        w = window_bytes * samples // tensor_bytes
    return max(w - w % batch, batch)


_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(z):
    """SplitMix64's output function on a uint64 array (wrapping)."""
    z = z ^ (z >> np.uint64(30))
    z *= _C1
    z ^= z >> np.uint64(27)
    z *= _C2
    z ^= z >> np.uint64(31)
    return z


TABLE_HALF_BITS = 16  # the widest Feistel half WindowPerm tabulates (Go's TableHalfBits)


class WindowPerm:
    """A window's permutation (relayout-order-v2, step 4): a four-round
    Feistel bijection on 2*half bits, keyed by the window generator's first
    four outputs, walked back into [0, n). pos(q) is where window position
    q goes; at(i) is its inverse. Both take and return int64 arrays."""

    def __init__(self, n, rng):
        self.n = n
        self.half = max(((n - 1).bit_length() + 1) // 2, 1) if n > 1 else 1
        self.keys = [np.uint64(rng.next()) for _ in range(4)]
        self._tabs = None

    def _walk(self, x, rounds):
        x = np.asarray(x, dtype=np.uint64)
        if self.n <= 1:
            return x.astype(np.int64)
        out = np.empty(x.shape, dtype=np.int64)
        step = 1 << 15  # pieces that stay in cache through the rounds' temporaries
        with np.errstate(over="ignore"):
            for a in range(0, x.size, step):
                y = rounds(x[a:a + step])
                bad = np.nonzero(y >= np.uint64(self.n))[0]
                while bad.size:
                    y[bad] = rounds(y[bad])
                    bad = bad[y[bad] >= np.uint64(self.n)]
                out[a:a + step] = y
        return out

    def _tables(self):
        """The round functions tabulated over every half value (halves of
        at most TABLE_HALF_BITS bits): a round is then one take from a
        table that stays in cache, not a mix of the whole array."""
        if self._tabs is None:
            m = np.uint64((1 << self.half) - 1)
            v = np.arange(1 << self.half, dtype=np.uint64)
            with np.errstate(over="ignore"):
                self._tabs = [(_mix(v ^ k) & m).view(np.int64) for k in self.keys]
        return self._tabs

    def _rounds(self, x, order):
        """The Feistel rounds in order: round i (0..3, keyed k[i]) updates
        the left half from the right when i is even, else the right from the
        left; the inverse runs them last first."""
        if self.half <= TABLE_HALF_BITS:
            t, h, m = self._tables(), self.half, (1 << self.half) - 1
            x = x.view(np.int64)
            l, r = x >> h, x & m
            for i in order:
                if i % 2 == 0:
                    l ^= t[i].take(r)
                else:
                    r ^= t[i].take(l)
            return ((l << h) | r).view(np.uint64)
        h, m, k = np.uint64(self.half), np.uint64((1 << self.half) - 1), self.keys
        l, r = x >> h, x & m
        for i in order:
            if i % 2 == 0:
                l ^= _mix(r ^ k[i]) & m
            else:
                r ^= _mix(l ^ k[i]) & m
        return (l << h) | r

    def _fwd(self, x):
        return self._rounds(x, (0, 1, 2, 3))

    def _inv(self, y):
        return self._rounds(y, (3, 2, 1, 0))

    def pos(self, q):
        return self._walk(q, self._fwd)

    def at(self, i):
        return self._walk(i, self._inv)

    def batch(self, first, count):
        """The window positions of places [first, first+count), ascending."""
        return np.sort(self.at(np.arange(first, first + count, dtype=np.uint64)))

    def order(self, batch):
        """Every window position, batch after batch (batch = pos // batch),
        ascending within a batch: batch j is order[j*batch:(j+1)*batch]."""
        lab = self.pos(np.arange(self.n, dtype=np.uint64)) // batch
        nb = (self.n + batch - 1) // batch
        if nb <= 1 << 16:
            lab = lab.astype(np.uint16)  # a stable sort of 16-bit keys is a radix sort
        return np.argsort(lab, kind="stable")


def _stream_rng(seed, epoch, s, w):
    tag = ((((s + 1) & M64) * 0x9E3779B97F4A7C15) & M64) ^ ((((w + 1) & M64) * 0xC2B2AE3D27D4EB4F) & M64)
    return SplitMix64(seed ^ tag, epoch)


def _cut(pieces, sel):
    out, j = [], 0
    for lo, hi in pieces:
        while j > 0 and sel[j - 1][1] > lo:
            j -= 1
        while j < len(sel) and sel[j][0] < hi:
            a, e = max(sel[j][0], lo), min(sel[j][1], hi)
            if e > a:
                out.append((a, e))
            j += 1
    return out


def _pieces(n, block_samples, sel, weights, seed, epoch, piece_samples=None):
    b = max(int(block_samples), 1)
    ps = piece_samples if piece_samples and 0 < piece_samples < b else b
    blocks = [(q, min(q + ps, s + b, n)) for s in range(0, n, b) for q in range(s, min(s + b, n), ps)]
    if weights is None:
        return blocks if sel is None else _cut(blocks, sel)
    rows = sum(e - s for (s, e), _ in weights)
    total = 0.0
    for _, w in weights:
        total += w
    out = []
    for i, ((s, e), w) in enumerate(weights):
        if e <= s or w <= 0 or total <= 0:
            continue
        want = int(np.floor(float(rows) * w / total + 0.5))
        own = _cut(blocks, [(s, e)])
        while want >= e - s:
            out.extend(own)
            want -= e - s
        rng = _stream_rng(seed, epoch, -2, i)
        order = list(range(len(own)))
        for k in range(len(order) - 1, 0, -1):
            j = rng.next() % (k + 1)
            order[k], order[j] = order[j], order[k]
        for k in order:
            if want <= 0:
                break
            lo, hi = own[k]
            if hi - lo > want:
                hi = lo + want
            out.append((lo, hi))
            want -= hi - lo
    return out


def streams_of(n, block_samples, sel, weights, seed, epoch, streams, batch, piece_samples=None):
    """relayout-order-v2's streams: lists of (start, end) pieces, and the
    epoch's global batch count."""
    ps = _pieces(n, block_samples, sel, weights, seed, epoch, piece_samples)
    rng = SplitMix64(seed, epoch)
    for i in range(len(ps) - 1, 0, -1):
        j = rng.next() % (i + 1)
        ps[i], ps[j] = ps[j], ps[i]
    m = sum(e - s for s, e in ps)
    full, last = divmod(m, batch)
    out, cur = [], _Cursor()
    for s in range(streams):
        nb = full // streams + (1 if s < full % streams else 0)
        cnt = nb * batch
        if s == full % streams and last > 0:
            cnt += last
        out.append(cur.take(ps, cnt))
    return out, full + (1 if last else 0)


class _Cursor:
    """Walks a list of pieces: piece k, of which off samples are taken."""

    def __init__(self):
        self.k, self.off = 0, 0

    def take(self, ps, n):
        """The next n samples of ps as pieces (the ends possibly cut)."""
        out = []
        while n > 0:
            lo, hi = ps[self.k]
            t = min(hi - lo - self.off, n)
            out.append((lo + self.off, lo + self.off + t))
            self.off += t
            n -= t
            if self.off == hi - lo:
                self.k, self.off = self.k + 1, 0
        return out


def stream_windows(pieces, s, window, seed, epoch):
    """Stream s's windows: (pieces, WindowPerm of their samples)."""
    total = sum(e - a for a, e in pieces)
    out, cur, w = [], _Cursor(), 0
    while total > 0:
        n = min(window, total)
        wp = cur.take(pieces, n)
        out.append((wp, WindowPerm(n, _stream_rng(seed, epoch, s, w))))
        total -= n
        w += 1
    return out


def window_batches(streams, total, batch, window, rank=0, world=1, worker=0, num_workers=1,
                   samples_seen=0, drop_last=False):
    """One reader's batches: (k, stream, window, first, count), in order."""
    if batch <= 0 or world <= 0 or num_workers <= 0:
        raise ValueError("batch size, world and num_workers must be positive")
    if not (0 <= rank < world and 0 <= worker < num_workers):
        raise ValueError(f"rank {rank} of {world}, worker {worker} of {num_workers}: out of range")
    S, R = len(streams), world * num_workers
    if S % R:
        raise ValueError(f"streams {S} must be a multiple of world {world} x num_workers {num_workers}")
    if samples_seen % batch and samples_seen < total * batch:
        raise ValueError(f"samples_seen {samples_seen} is not a multiple of the batch size {batch} (resume at a batch boundary)")
    sizes = [sum(e - s for s, e in st) for st in streams]
    K = total
    if drop_last:
        full = total - (1 if sum(sizes) != total * batch else 0)
        K = full // world * world
    wps = window // batch
    out = []
    for k in range((samples_seen + batch - 1) // batch, K):
        if k % world != rank or (k // world) % num_workers != worker:
            continue
        s, j = k % S, k // S
        out.append((k, s, j // wps, (j % wps) * batch, min(batch, sizes[s] - j * batch)))
    return out


def _key_str(v):
    """A key value as the Go loader prints it (fmt.Sprint of the JSON value)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _rows(a):
    """a (n, ...) as n items of one row each (a 1-D array as it is): a
    row then moves as one item when indexed, not value by value."""
    if a.ndim == 1:
        return a
    per = a.dtype.itemsize * int(np.prod(a.shape[1:]))
    return np.ascontiguousarray(a).view(np.dtype((np.void, per))).reshape(a.shape[0])


class _Window:
    """A window's tensors: data, those joined in window order (lists);
    scattered, name -> (rows in batch order, whether item-level);
    item_starts, where each slot's items start in the scattered item rows
    (packed outputs); item_lists, whether joined tensors are cut by items
    (item-level lists), so a batch needs its item rows in window order."""

    def __init__(self, data):
        self.data, self.scattered, self.item_starts, self.item_lists = data, {}, None, False


def _buf(bufs, key, n, dtype):
    """bufs[key] grown to at least n elements of dtype; its first n."""
    b = bufs.get(key)
    if b is None or b.dtype != dtype or b.size < n:
        b = bufs[key] = np.empty(n, dtype=dtype)
    return b[:n]


def _positions(pieces):
    """The sample positions of pieces ((start, end) ranges), in order."""
    if not pieces:
        return np.zeros(0, dtype=np.int64)
    p = np.asarray(pieces, dtype=np.int64).reshape(-1, 2)
    return _expand(p.reshape(-1), np.arange(0, 2 * len(p), 2))


def _expand(offsets, r):
    """The rows offsets[r[i]]:offsets[r[i]+1] for every i, concatenated."""
    r = np.asarray(r, dtype=np.int64)
    starts, ends = offsets[r], offsets[r + 1]
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens)
    return first + np.arange(total, dtype=np.int64)


# --- safetensors ------------------------------------------------------------------

def check_tensors(t, slices, where):
    """Refuse a tensors section whose counts do not add up, before anything
    is sized by them (an edited or damaged manifest), as the Go loader does
    (manifests.Tensors.Check): shards tiling the samples and items in
    order, totals their sums, blocks of at least one sample, shard slices
    inside their shard, and slices inside the samples."""
    def bad(msg):
        raise ValueError(f"{where}: tensors: {msg}")

    def num(v):
        return isinstance(v, int) and not isinstance(v, bool)

    try:
        if not num(t["order"]["block_samples"]) or t["order"]["block_samples"] < 1:
            bad(f"{t['order']['block_samples']!r} samples per block, want at least 1")
        if not t["schema"]:
            bad("no tensors in the schema")
        shards, tot = t["shards"], t["totals"]
        if tot["shards"] != len(shards):
            bad(f"totals count {tot['shards']} shards, the manifest lists {len(shards)}")
        rows = items = nbytes = 0
        for k, sh in enumerate(shards):
            r, i, b = sh["rows"], sh.get("items", 0), sh["bytes"]
            h = sh.get("header_bytes", 0)
            if not all(num(x) for x in (sh["first_row"], r, sh.get("first_item", 0), i, b, h)) or \
                    sh["first_row"] != rows or r < 0 or sh.get("first_item", 0) != items or i < 0 or b < 0 or h < 0 or h > b:
                bad(f"shard {k} ({sh.get('path')}): samples [{sh['first_row']}, +{r}), items [{sh.get('first_item', 0)}, +{i}), "
                    f"{b} bytes, where the shards before it end at sample {rows}, item {items}")
            for ss in sh.get("slices") or []:
                if not (num(ss["slice"]) and 0 <= ss["slice"] < len(slices) and num(ss["first_row"]) and num(ss["rows"])
                        and ss["first_row"] >= 0 and ss["rows"] >= 0 and ss["first_row"] + ss["rows"] <= r):
                    bad(f"shard {k}: slice {ss['slice']} at samples [{ss['first_row']}, +{ss['rows']}) of its {r}")
            rows, items, nbytes = rows + r, items + i, nbytes + b
        if (rows, items, nbytes) != (tot["rows"], tot.get("items", 0), tot["bytes"]):
            bad(f"the shards hold {rows} samples, {items} items and {nbytes} bytes; the totals say "
                f"{tot['rows']}, {tot.get('items', 0)} and {tot['bytes']}")
        for i, s in enumerate(slices):
            if not (num(s["first_row"]) and num(s["rows"]) and s["first_row"] >= 0 and s["rows"] >= 0
                    and s["first_row"] + s["rows"] <= rows):
                raise ValueError(f"{where}: slice {i}: rows [{s['first_row']}, +{s['rows']}) of the {rows} samples")
    except (KeyError, TypeError) as e:
        raise ValueError(f"{where}: tensors: {type(e).__name__} {e}: not a relayout manifest's tensors") from None


def _merge_ranges(ranges):
    """Byte ranges (sorted, disjoint) with those that touch merged: the
    requests that fetch them, whose bytes concatenated are theirs."""
    out = []
    for a, e in ranges:
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], e)
        else:
            out.append((a, e))
    return out


def read_header(buf, size=None):
    """Parse and validate a safetensors header from a buffer (bytes, mmap).

    Returns (metadata, tensors, data_start) where tensors maps a name to
    (dtype, shape, begin, end) with offsets relative to data_start."""
    size = len(buf) if size is None else size
    if size < 8:
        raise ValueError("safetensors: too short for a header")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n > MAX_HEADER or n > size - 8:
        raise ValueError(f"safetensors: header length {n} does not fit a {size}-byte file")
    text = bytes(buf[8:8 + n]).decode("utf-8")
    if not text.startswith("{"):
        raise ValueError("safetensors: the header is not a JSON object")
    obj = json.loads(text)
    meta = obj.pop("__metadata__", {}) or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ValueError("safetensors: __metadata__ must map strings to strings")
    tensors = {}
    for name, t in obj.items():
        if set(t) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"safetensors: tensor {name!r}: want dtype, shape and data_offsets")
        dt = t["dtype"]
        if dt not in DTYPES:
            raise ValueError(f"safetensors: tensor {name!r}: unknown dtype {dt!r}")
        begin, end = t["data_offsets"]
        shape = tuple(int(x) for x in t["shape"])
        count = 1
        for x in shape:
            if x < 0:
                raise ValueError(f"safetensors: tensor {name!r}: negative dimension")
            count *= x
        if count * DTYPES[dt].itemsize != end - begin:
            raise ValueError(f"safetensors: tensor {name!r}: shape {shape} of {dt} needs {count * DTYPES[dt].itemsize} bytes, offsets span {end - begin}")
        tensors[name] = (dt, shape, begin, end)
    pos = 0
    for name, (_, _, begin, end) in sorted(tensors.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if begin != pos:
            raise ValueError(f"safetensors: tensor {name!r} starts at {begin}, want {pos} (offsets must tile the buffer)")
        pos = end
    if pos != size - 8 - n:
        raise ValueError(f"safetensors: tensors cover {pos} bytes, the buffer holds {size - 8 - n}")
    return meta, tensors, 8 + n


def tune_malloc(mmap_threshold=32 << 20, trim_threshold=128 << 20):
    """Make glibc's malloc keep large freed blocks for reuse in this process:
    blocks below mmap_threshold come from the heap instead of a fresh
    mapping each, and up to trim_threshold of free heap is kept instead of
    being returned to the kernel. NumPy's temporaries (the window order's
    places, its sort, each batch's arrays) are then memory the process has
    already touched, not fresh pages that fault one by one: an epoch of the
    dense bench output 90 -> 66 ms in the process on the VM of
    docs/benchmarks.md. The process may keep up to trim_threshold more
    resident. It changes the whole process's allocator, so the reader never
    calls it itself: call it once in a process that reads (in DataLoader
    workers it measured no faster: their time goes to the batches' shared
    memory). Returns False where the C library is not glibc (nothing
    changed)."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
        # M_MMAP_THRESHOLD (-3; at most 32 MiB on 64-bit), M_TRIM_THRESHOLD (-1).
        return bool(libc.mallopt(-3, int(min(mmap_threshold, 32 << 20)))) and bool(libc.mallopt(-1, int(trim_threshold)))
    except (OSError, AttributeError):
        return False


def _pread_into(fd, out, offset, path):
    """Fill out (a contiguous uint8 array) with the bytes at offset of file
    descriptor fd (of path)."""
    mv, got = memoryview(out), 0
    while got < len(mv):
        n = os.preadv(fd, [mv[got:]], offset + got)
        if n <= 0:
            raise OSError(f"{path}: {len(mv) - got} bytes missing at offset {offset + got}")
        got += n


# Files a Dataset keeps open for pread at most; shards and blocks past it
# are read through their maps (the same bytes, a little slower the first
# time), so a dataset of thousands of shards needs no more descriptors.
MAX_OPEN_FILES = 256


class _Files:
    """A Dataset's budget of files kept open (MAX_OPEN_FILES)."""

    def __init__(self, limit=MAX_OPEN_FILES):
        self.limit, self.n = limit, 0

    def take(self):
        if self.n >= self.limit:
            return False
        self.n += 1
        return True

    def give(self):
        self.n -= 1


def _open_mapped(path, expect_bytes, what, files):
    """(map, file descriptor kept open for pread or None) of path, checked
    to be expect_bytes long (what names the source of that figure)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    keep = False
    try:
        size = os.fstat(fd).st_size
        if size != expect_bytes:
            raise ValueError(f"{path}: {size} bytes, {what} says {expect_bytes}")
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if size else None
        keep = files is not None and files.take()
        return mm, (fd if keep else None)
    finally:
        if not keep:
            os.close(fd)


class _Mapped:
    """What _Shard and _Block share: a map (array(name): zero-copy views)
    and, while the Dataset's budget of open files lasts, the file kept open
    for pread (rows(): the window order's copies, which need no map: the
    first pass over a fresh map costs a page-table entry per 4 KiB page,
    40 ms against 9 ms by pread for 93 MB on the VM of docs/benchmarks.md,
    and TorchDataset makes a Dataset every epoch). A subclass sets path,
    files, mm, fd and _arrays, and says where a tensor starts (_at)."""

    def _at(self, name):
        """(NumPy dtype, offset in the file of element 0) of tensor name."""
        raise NotImplementedError

    def rows(self, name, a, b, stage):
        """Elements [a, b) of tensor name (a block's: not rebased), read
        with pread into stage (a uint8 array of at least that many bytes;
        valid until stage is written again), or a view of the map when the
        file is not open."""
        if self.fd is None:
            return self.array(name)[a:b]
        d, start = self._at(name)
        out = stage[:(b - a) * d.itemsize]
        _pread_into(self.fd, out, start + a * d.itemsize, self.path)
        return out.view(d)

    def close(self):
        """Drop the views, the map (unless views are still held: it closes
        with them) and the kept file."""
        self._arrays.clear()
        if self.mm is not None:
            try:
                self.mm.close()
            except BufferError:
                pass
        self._close_fd()

    def _close_fd(self):
        """Close the kept descriptor (also when collected unclosed), giving
        its place in the budget back."""
        fd = getattr(self, "fd", None)
        if fd is not None:
            self.fd = None
            os.close(fd)
            self.files.give()

    def __del__(self):
        self._close_fd()


class _Shard(_Mapped):
    """A shard file (_Mapped)."""

    def __init__(self, path, expect_bytes, expect_hash=None, files=None):
        self.path, self.files = path, files
        self.mm, self.fd = _open_mapped(path, expect_bytes, "the manifest", files)
        self._arrays = {}
        try:
            if self.mm is None:
                raise ValueError(f"{path}: an empty file is not a shard")
            if expect_hash is not None:
                try:
                    import xxhash
                except ImportError as e:
                    raise RuntimeError("verify_checksums needs the xxhash module (apt-get install python3-xxhash)") from e
                got = xxhash.xxh64(self.mm).hexdigest()
                if got != expect_hash:
                    raise ValueError(f"{path}: xxhash64 {got}, the manifest says {expect_hash}")
            self.meta, self.tensors, self.data_start = read_header(self.mm, expect_bytes)
        except BaseException:
            self.close()
            raise

    def array(self, name):
        """The whole tensor as a flat zero-copy NumPy view."""
        a = self._arrays.get(name)
        if a is None:
            dt, shape, begin, end = self.tensors[name]
            d = DTYPES[dt]
            a = np.frombuffer(self.mm, dtype=d, count=(end - begin) // d.itemsize, offset=self.data_start + begin)
            self._arrays[name] = a
        return a

    def _at(self, name):
        dt, _, begin, _ = self.tensors[name]
        return DTYPES[dt], self.data_start + begin


class _Block(_Mapped):
    """One block of a shard, as the cache holds it (its ranges of every
    tensor, in data order), with the _Shard interface: array(name) is the
    block's part of the tensor, rows counted from the block's first and
    offsets rebased to start at 0."""

    def __init__(self, path, expect_bytes, schema, ranges, files=None):
        self.path, self.files = path, files
        self.mm, self.fd = _open_mapped(path, expect_bytes, "the block table", files)
        order = sorted(range(len(schema)), key=lambda j: ranges[2 * j])
        self._where, pos = {}, 0
        for j in order:
            n = ranges[2 * j + 1] - ranges[2 * j]
            self._where[schema[j]["name"]] = (schema[j], pos, n)
            pos += n
        self._arrays = {}

    def array(self, name):
        a = self._arrays.get(name)
        if a is None:
            t, pos, n = self._where[name]
            d = DTYPES[t["dtype"]]
            a = np.frombuffer(self.mm, dtype=d, count=n // d.itemsize, offset=pos) if n else np.zeros(0, d)
            if t["kind"] == "offsets" and len(a):
                a = a - a[0]
            self._arrays[name] = a
        return a

    def _at(self, name):
        t, pos, _ = self._where[name]
        return DTYPES[t["dtype"]], pos


# --- remote outputs: a shard cache (the Go loader's, same folder format) ------

DEFAULT_CACHE_BYTES = 8 << 30
# Ranged reads a remote dataset has in flight at most, each on a pooled
# connection (the Go loader's DefaultMaxRequests is 64).
DEFAULT_MAX_REQUESTS = 64
_NEVER = 1 << 62
_STALE_TMP = 600.0
_LEDGER_SLACK = 32  # the ledger's own bytes, in cache.lock
_MAX_RUN, _MAX_RUN_BYTES = 32, 16 << 20  # consecutive blocks fetched together
# A shard's presigned GET URL is valid this long and used for half of it.
_PRESIGN_SECONDS = 3600
_RESCAN_EVERY = 30.0  # a reader lists the folder at its first reservation and this often after
# An eviction that lists the folder also removes what the reader has read
# for the last time this epoch until the folder is this fraction of its
# budget below it, so that the next listing is that many bytes of downloads
# away.
_EVICT_LOW = 8


class _StoreRefused(IOError):
    """The store's answer to a read that asking again will not change (a
    4xx but 408 and 429: the object is gone, or access is denied): raised
    at once, not retried."""


def _refused(status):
    """Whether an HTTP status is a store's answer that asking again will
    not change: a 4xx but 408 (timeout) and 429 (slow down)."""
    return 400 <= status < 500 and status not in (408, 429)


class _SignedRefused(IOError):
    """The store refused a presigned URL that get_object may still read
    with (_Remote._signed_get)."""


def _xml_code(r):
    """The <Code> of an S3 or GCS XML error response, or ""."""
    body = r.content[:300]
    return body.split(b"<Code>")[1].split(b"</Code>")[0].decode(errors="replace") if b"<Code>" in body else ""


def _ranged_data(r, start, end, refusing, describe):
    """The bytes [start, end) in a signed ranged GET's response r (a 206,
    or a 200 with the whole object where the store ignored the range), or
    raises with describe()'s message: _SignedRefused for a status in
    refusing (the signature or URL itself refused: the client may still
    read), _StoreRefused for another 4xx but 408 and 429, IOError for the
    rest (retried by the callers)."""
    if r.status_code != 206 and not (r.status_code == 200 and start == 0):
        msg = describe()
        if r.status_code in refusing:
            raise _SignedRefused(msg)
        if _refused(r.status_code):
            raise _StoreRefused(msg)
        raise IOError(msg)
    data = r.content
    if r.status_code == 200:
        data = data[:end]  # the whole object (the store ignored the range)
    return data


_FOLDER_LOCKS = {}  # cache folder -> threading.Lock: one thread of a process at a time takes cache.lock
# A forked child (a DataLoader worker) starts with fresh locks: one another
# thread held at the fork would never be released in the child.
os.register_at_fork(after_in_child=_FOLDER_LOCKS.clear)
_LOCK_FILES = set()  # the lock files open in this process: cache.lock, blocks.lock, an object's lock file
# Held around opening a lock file and adding it to _LOCK_FILES (and closing
# and removing it), and by the fork: a descriptor opened but not yet in the
# set at the fork escaped _drop_inherited_locks (two children hung that
# way, under load).
_LOCK_FILES_GUARD = threading.Lock()


def _open_lock_file(path):
    """path opened for reading and writing (created if missing), as a lock
    file: _close_lock_file closes it."""
    with _LOCK_FILES_GUARD:
        f = open(path, "r+b", opener=lambda p, _: os.open(p, os.O_RDWR | os.O_CREAT, 0o644))
        _LOCK_FILES.add(f)
    return f


def _close_lock_file(f):
    with _LOCK_FILES_GUARD:
        try:
            f.close()
        finally:
            _LOCK_FILES.discard(f)


def _drop_inherited_locks():
    """In a forked child: let go of the parent's lock files. A flock or OFD
    lock belongs to the open file description, which the fork shares, so
    the child's copy of a descriptor kept a lock one of the parent's
    threads held at the fork (or took afterwards) until the child exited:
    the child and the parent both waited on it for good (two forked
    children hung that way, TestRemoteRequestsInFlight). Each inherited
    descriptor is pointed at /dev/null instead of closed, so that the file
    objects close it harmlessly (and flush what they held there)."""
    global _LOCK_FILES_GUARD
    _LOCK_FILES_GUARD = threading.Lock()  # the parent's, held across the fork
    if not _LOCK_FILES:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for f in list(_LOCK_FILES):
            try:
                os.dup2(null, f.fileno())
            except (OSError, ValueError):  # closed meanwhile
                pass
    finally:
        os.close(null)
    _LOCK_FILES.clear()


def _guard_release():
    _LOCK_FILES_GUARD.release()


os.register_at_fork(before=lambda: _LOCK_FILES_GUARD.acquire(), after_in_parent=_guard_release,
                    after_in_child=_drop_inherited_locks)


class _FolderLock:
    """cache.lock, locked (flock) and open for its ledger, taken by one
    thread of the process at a time: threads queue on a lock of the
    process, not in the kernel (the Go loader does the same)."""

    def __init__(self, path, tlock):
        import fcntl
        tlock.acquire()
        try:
            self.f = _open_lock_file(path)
            fcntl.flock(self.f, fcntl.LOCK_EX)
        except BaseException:
            if getattr(self, "f", None) is not None:
                _close_lock_file(self.f)
            tlock.release()
            raise
        self.tlock = tlock

    def close(self):
        try:
            _close_lock_file(self.f)  # closing the description releases the flock
        finally:
            self.tlock.release()


def is_remote(path):
    i = path.find("://")
    return i > 0 and not path.startswith("file://") and "/" not in path[:i]


class RemoteStats(dict):
    """bytes_downloaded, downloads, retries, waited_seconds, listings (of the
    cache folder: at the first reservation, every 30 seconds, and when the
    ledger says it is full, then about once per eighth of cache_bytes
    downloaded)."""


class _PerProcess:
    """A value made once per process by make(): a forked process (a
    DataLoader worker) makes its own, since a client's connections are not
    shared between processes."""

    def __init__(self, make):
        self._make, self._value, self._pid, self._lock = make, None, None, threading.Lock()

    def get(self):
        pid = os.getpid()
        if self._pid != pid and self._value is not None:
            self._lock = threading.Lock()  # one held at the fork stays held in the child
        with self._lock:
            if self._value is None or self._pid != pid:
                self._value, self._pid = self._make(), pid
            return self._value


_STORES = {}  # (scheme, bucket, query, max_requests, env) -> a store's client, for this process
_STORES_LOCK = threading.Lock()
# Credentials and endpoints the clients take from the environment where the
# URL does not say (the AWS, Google and Azure libraries'), as the Go
# reader's bucketKey: a client made after one of them changed is another.
_STORE_ENV = ("AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "STORAGE_EMULATOR_HOST", "AZURE_", "MSI_", "IDENTITY_")


def _forget_stores():
    global _STORES_LOCK
    _STORES.clear()  # a forked child makes its own: a connection is not shared between processes
    _STORES_LOCK = threading.Lock()  # one held at the fork stays held in the child


os.register_at_fork(after_in_child=_forget_stores)


def _url_bool(query, key, what, default="false"):
    """A URL's boolean query parameter (default when absent), spelled as
    the CLI takes it (Go's strconv.ParseBool, any case); empty is False,
    anything else a ValueError naming what (the store URL)."""
    v = query.get(key, default).strip().lower()
    if v not in ("1", "t", "true", "0", "f", "false", ""):
        raise ValueError(f"{what}: {key}={v!r} is not a boolean")
    return v in ("1", "t", "true")


def _request_payer(request, **kwargs):
    """botocore's before-sign hook for requester-pays buckets."""
    request.headers["x-amz-request-payer"] = "requester"


def _store_client(scheme, bucket, query, max_requests, make):
    """make()'s client for a store, made once per process and shared by
    every Dataset that reads one output on it with the same query, request
    limit and credential variables: its connections and credentials
    outlive one Dataset (TorchDataset makes one an epoch in each worker;
    a boto3 client took 130-250 ms of CPU to make, and each began with new
    connections and its own credential lookup). A failed make() is not
    kept."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_STORE_ENV) or k == "HOME"))
    key = (scheme, bucket, tuple(sorted(query.items())), max_requests, env)
    with _STORES_LOCK:  # a forked child starts with none (_forget_stores)
        client = _STORES.get(key)
        if client is None:
            client = _STORES[key] = make()
        return client


class _AzureBlobs:
    """An azblob:// container through Microsoft's client
    (azure-storage-blob: Debian's python3-azure-storage, or pip install
    ./python[azure]), opened as the CLI opens it (gocloud's azureblob): the
    URL's query takes domain, protocol, cdn, localemu and storage_account,
    the environment AZURE_STORAGE_ACCOUNT, AZURE_STORAGE_DOMAIN,
    AZURE_STORAGE_PROTOCOL, AZURE_STORAGE_IS_CDN and
    AZURE_STORAGE_IS_LOCAL_EMULATOR for what the query does not say; the
    credentials are, in this order, AZURE_STORAGE_ACCOUNT with
    AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN,
    AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGEBLOB_CONNECTIONSTRING),
    else azure-identity's DefaultAzureCredential. A forked process (a
    DataLoader worker) makes its own client: a connection is not shared
    between processes."""

    _PARAMS = ("domain", "protocol", "cdn", "localemu", "storage_account")

    def __init__(self, container, query, max_requests):
        try:
            from azure.storage.blob import ContainerClient
            del ContainerClient  # imported where the client is made (_open)
        except ImportError as e:
            raise RuntimeError("azblob:// needs azure-storage-blob (pip install ./python[azure], or apt-get install python3-azure-storage)") from e
        env = os.environ.get
        unknown = sorted(set(query) - set(self._PARAMS))
        if unknown:
            raise ValueError(f"azblob://{container}: unknown query parameter {unknown[0]!r} (the CLI's are {', '.join(self._PARAMS)})")

        def flag(name, var):
            return _url_bool(query, name, f"azblob://{container}", env(var, "false"))
        self.container, self.max_requests = container, max_requests
        self.account = query.get("storage_account") or env("AZURE_STORAGE_ACCOUNT", "")
        domain = query.get("domain") or env("AZURE_STORAGE_DOMAIN") or "blob.core.windows.net"
        protocol = query.get("protocol") or env("AZURE_STORAGE_PROTOCOL") or "https"
        if protocol not in ("http", "https"):
            raise ValueError(f"azblob://{container}: protocol must be http or https, not {protocol!r}")
        if flag("localemu", "AZURE_STORAGE_IS_LOCAL_EMULATOR"):
            self.service = f"{protocol}://{domain}/{self.account}"
        elif flag("cdn", "AZURE_STORAGE_IS_CDN"):
            self.service = f"{protocol}://{domain}"
        else:
            if not self.account:
                raise ValueError(f"azblob://{container}: no storage account (set AZURE_STORAGE_ACCOUNT or ?storage_account=)")
            self.service = f"{protocol}://{self.account}.{domain}"
        self._client, self._http = _PerProcess(self._open), None  # _open sets _http
        self._lock = threading.Lock()
        self._sas, self.signed_reads = None, True  # (token, renew after); off once the store refuses one

    def _container(self):
        """This process's container client."""
        return self._client.get()

    def _token(self):
        """A read-only SAS token for the container, or None: the one in
        AZURE_STORAGE_SAS_TOKEN, or one signed here with the account key
        (signing is local), valid an hour and made again after half of it."""
        import time
        env = os.environ.get
        if not (self.account and env("AZURE_STORAGE_KEY")):
            sas = env("AZURE_STORAGE_SAS_TOKEN")
            return sas.lstrip("?") if sas else None
        now = time.time()
        with self._lock:
            if self._sas is None or self._sas[1] < now:
                import datetime
                from azure.storage.blob import ContainerSasPermissions, generate_container_sas
                expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=_PRESIGN_SECONDS)
                tok = generate_container_sas(self.account, self.container, account_key=env("AZURE_STORAGE_KEY"),
                                             permission=ContainerSasPermissions(read=True), expiry=expiry)
                self._sas = (tok, now + _PRESIGN_SECONDS / 2)
            return self._sas[0]

    def _signed_get(self, key, start, end, what):
        """Bytes [start, end) through the blob's SAS URL, sent on the
        client's own HTTP session: about a fifth of the CPU of the client's
        download_blob pipeline (policies, signing, response handling), which
        holds the GIL, as presigned reads are for S3. Raises _SignedRefused
        where the store refuses the token (403, 400: then the client reads,
        with whatever credential it has), _StoreRefused on another 4xx but
        408 and 429, IOError otherwise."""
        import urllib.parse
        self._container()  # this process's session
        url = f"{self.service}/{self.container}/{urllib.parse.quote(key)}?{self._token()}"
        r = self._http.get(url, headers={"Range": f"bytes={start}-{end - 1}", "x-ms-version": "2021-08-06"}, timeout=60)
        return _ranged_data(r, start, end, (400, 403), lambda: f"{what}: HTTP {r.status_code} {r.headers.get('x-ms-error-code', '')}".rstrip())

    def _open(self):
        import requests
        from azure.core.pipeline.transport import RequestsTransport
        from azure.storage.blob import ContainerClient
        env = os.environ.get
        # As many pooled connections as ranged reads in flight (requests'
        # default pool of 10 would open and close one per read past it).
        http = requests.Session()
        # The environment's proxies and CA bundle read once, not at every
        # request (requests looked them up per request: half a
        # millisecond of a ranged read's CPU).
        http.proxies.update(requests.utils.get_environ_proxies(self.service))
        http.verify = env("REQUESTS_CA_BUNDLE") or env("CURL_CA_BUNDLE") or True
        http.trust_env = False
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=self.max_requests)
        http.mount("http://", adapter)
        http.mount("https://", adapter)
        self._http = http
        kw = dict(transport=RequestsTransport(session=http, session_owner=True), retry_total=8, retry_backoff_factor=0.2)
        key, sas = env("AZURE_STORAGE_KEY"), env("AZURE_STORAGE_SAS_TOKEN")
        conn = env("AZURE_STORAGE_CONNECTION_STRING") or env("AZURE_STORAGEBLOB_CONNECTIONSTRING")
        if self.account and key:
            cred = {"account_name": self.account, "account_key": key}
        elif sas:
            cred = sas.lstrip("?")
        elif conn:
            return ContainerClient.from_connection_string(conn, self.container, **kw)
        else:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError as e:
                raise RuntimeError(f"azblob://{self.container}: no AZURE_STORAGE_KEY, AZURE_STORAGE_SAS_TOKEN or AZURE_STORAGE_CONNECTION_STRING, "
                                   "and azure-identity (for DefaultAzureCredential) is not installed") from e
            cred = DefaultAzureCredential()
        return ContainerClient(self.service, self.container, credential=cred, **kw)

    def get(self, key, start=None, end=None):
        """The object's bytes, or bytes [start, end) of it. A 4xx the store
        will answer again (the object gone, access denied, a range past the
        end) raises _StoreRefused; other errors raise for the caller to
        retry (the client has retried them already)."""
        from azure.core.exceptions import HttpResponseError
        what = f"GET azblob://{self.container}/{key}" + ("" if start is None else f" bytes {start}-{end - 1}")
        if start is not None and self.signed_reads and self._token():
            try:
                return self._signed_get(key, start, end, what)
            except _SignedRefused:
                self.signed_reads = False  # the client's reads from now on
        try:
            if start is None:
                return self._container().download_blob(key, max_concurrency=1).readall()
            # A ranged read is retried by its caller (_range_retried), as
            # the S3 and GCS readers' are: tried once here (retry_total=0,
            # per request), not the client's 9 times inside each of those.
            return self._container().download_blob(key, offset=start, length=end - start, max_concurrency=1, retry_total=0).readall()
        except HttpResponseError as e:
            status = e.status_code or 0
            code = getattr(e, "error_code", None) or ""
            if _refused(status):
                raise _StoreRefused(f"{what}: HTTP {status} {code}".rstrip()) from e
            raise IOError(f"{what}: HTTP {status} {code}".rstrip()) from e

    def list(self, prefix):
        """The names of the objects directly under prefix."""
        n = len(prefix)
        return [b.name[n:] for b in self._container().walk_blobs(name_starts_with=prefix, delimiter="/")
                if not b.name.endswith("/") and "/" not in b.name[n:]]


class _GCSObjects:
    """A gs:// bucket, opened as the CLI opens it (gocloud's gcsblob):
    Google's application default credentials (google-auth: Debian's
    python3-google-auth, or pip install ./python[gcs]), none with
    ?anonymous=true or access_id=-, or for an emulator named by
    STORAGE_EMULATOR_HOST; ?universe_domain= for another universe. Objects
    are read as the Go client reads them, by GET of /BUCKET/OBJECT (the XML
    API) with a Range, on google-auth's AuthorizedSession (it adds and
    refreshes the token); listings through the JSON API. The official
    google-cloud-storage is the same calls on the same session, and is not
    a Debian package. A forked process makes its own session."""

    _PARAMS = ("access_id", "private_key_path", "anonymous", "universe_domain", "grpc", "zonal")

    def __init__(self, bucket, query, max_requests):
        if importlib.util.find_spec("google") is None or importlib.util.find_spec("google.auth") is None:
            raise RuntimeError("gs:// needs google-auth (pip install ./python[gcs], or apt-get install python3-google-auth)")
        unknown = sorted(set(query) - set(self._PARAMS))
        if unknown:
            raise ValueError(f"gs://{bucket}: unknown query parameter {unknown[0]!r} (the CLI's are {', '.join(self._PARAMS)})")

        def flag(name):
            return _url_bool(query, name, f"gs://{bucket}")
        if flag("zonal"):
            raise ValueError(f"gs://{bucket}: zonal=true reads over gRPC, which the Python reader does not speak")
        emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
        if emulator:
            self.endpoint = emulator.rstrip("/") if "://" in emulator else "http://" + emulator.rstrip("/")
        else:
            self.endpoint = "https://storage." + (query.get("universe_domain") or "googleapis.com")
        anonymous = flag("anonymous")  # checked even where an emulator makes it moot
        self.anonymous = bool(emulator) or anonymous or query.get("access_id") == "-"
        self.bucket, self.max_requests = bucket, max_requests
        self._session = _PerProcess(self._open)

    def _http(self):
        """This process's session."""
        return self._session.get()

    def _open(self):
        import google.auth
        import requests
        from google.auth.credentials import AnonymousCredentials
        from google.auth.transport.requests import AuthorizedSession
        if self.anonymous:
            creds = AnonymousCredentials()
        else:
            creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/devstorage.read_only"])
        http = AuthorizedSession(creds)
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=self.max_requests)
        http.mount("http://", adapter)
        http.mount("https://", adapter)
        return http

    def _call(self, what, url, headers, params=None, tries=6):
        """A GET, tried up to tries times on connection errors and 408, 429
        and 5xx; a response otherwise (the caller reads its status)."""
        import time
        last = None
        for attempt in range(tries):
            if attempt:
                time.sleep(0.05 * (1 << (attempt - 1)))
            try:
                r = self._http().get(url, headers=headers, params=params, timeout=60)
            except Exception as e:  # a reset, a timeout: ask again
                last = IOError(f"{what}: {e}")
                continue
            if r.status_code in (408, 429) or r.status_code >= 500:
                last = IOError(f"{what}: HTTP {r.status_code}")
                continue
            return r
        raise last

    def get(self, key, start=None, end=None):
        """The object's bytes, or bytes [start, end) of it. A 4xx but 408
        and 429 (the object gone, access denied) raises _StoreRefused."""
        import urllib.parse
        what = f"GET gs://{self.bucket}/{key}" + ("" if start is None else f" bytes {start}-{end - 1}")
        url = f"{self.endpoint}/{self.bucket}/{urllib.parse.quote(key, safe='/')}"
        # A ranged read is retried by its caller (_range_retried), as the
        # S3 and Azure readers' are: tried once here, not 6 x 5 times.
        r = self._call(what, url, {} if start is None else {"Range": f"bytes={start}-{end - 1}"},
                       tries=6 if start is None else 1)

        def describe():
            return f"{what}: HTTP {r.status_code} {_xml_code(r)}".rstrip()
        if start is None:
            if r.status_code != 200:
                raise (_StoreRefused if _refused(r.status_code) else IOError)(describe())
            return r.content
        return _ranged_data(r, start, end, (), describe)

    def list(self, prefix):
        """The names of the objects directly under prefix (JSON API)."""
        import urllib.parse
        url = f"{self.endpoint}/storage/v1/b/{urllib.parse.quote(self.bucket, safe='')}/o"
        out, token = [], None
        while True:
            params = {"prefix": prefix, "delimiter": "/", "fields": "items(name),nextPageToken"}
            if token:
                params["pageToken"] = token
            what = f"list gs://{self.bucket}/{prefix}"
            r = self._call(what, url, {}, params)
            if r.status_code != 200:
                raise (_StoreRefused if _refused(r.status_code) else IOError)(f"{what}: HTTP {r.status_code}")
            page = r.json()
            out += [o["name"][len(prefix):] for o in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return [n for n in out if n and "/" not in n]


_REMOTES = weakref.WeakSet()  # every _Remote of the process, for _after_fork


def _remotes_after_fork():
    for rc in list(_REMOTES):
        rc._after_fork()


os.register_at_fork(after_in_child=_remotes_after_fork)


class _Remote:
    """A remote output's blocks (or whole shards, for outputs without header
    entries in their manifest), downloaded into cache_dir: each under a
    temporary name, checked against its hash (the shard's block table's, or
    the manifest's), then renamed to a name carrying it (the only names
    trusted); never more than cache_bytes in the folder (space reserved
    under its lock and ledger; eviction by next use in the reader's known
    order). The folder format, ledger and locks are the Go loader's, so Go
    and Python readers can share one."""

    def __init__(self, url, cache_dir, cache_bytes, prefetch_windows, max_requests=None):
        import threading
        import urllib.parse
        # Ranged reads in flight at most, and as many pooled connections
        # (boto3's default pool, 10, would open and close one per request
        # past the tenth).
        self.max_requests = max_requests or DEFAULT_MAX_REQUESTS
        u = urllib.parse.urlsplit(url)
        q = dict(urllib.parse.parse_qsl(u.query))
        self.url, self.scheme, self.bucket = url, u.scheme, u.netloc
        self._az, self._s3_pp = None, None
        self.requester_pays = False
        self.prefix = u.path.strip("/") + "/" if u.path.strip("/") else ""
        if u.scheme == "s3":
            try:
                import boto3
                from botocore.config import Config
            except ImportError as e:
                raise RuntimeError("s3:// needs boto3 (pip install ./python[s3], or apt-get install python3-boto3)") from e
            # requester_pays=true (as the CLI takes it): every request, and
            # every presigned URL, says the reader pays (a requester-pays
            # bucket answers 403 otherwise).
            store = f"s3://{self.bucket}"
            self.requester_pays = _url_bool(q, "requester_pays", store)
            # Booleans as the CLI parses them (any case, 1/t/true): a URL
            # spelled use_path_style=1 addressed the bucket by host name
            # here and by path in the CLI.
            path_style = _url_bool(q, "use_path_style", store)
            if "s3ForcePathStyle" in q:  # the CLI's older name, which wins there too
                path_style = _url_bool(q, "s3ForcePathStyle", store)
            endpoint = q.get("endpoint")
            if endpoint and "://" not in endpoint:
                endpoint = ("http://" if _url_bool(q, "disable_https", store) else "https://") + endpoint
            # SigV4 for presigned URLs too (_signed_get): botocore presigns
            # with SigV2 in some regions otherwise, which buckets made since
            # 2020 refuse.
            kw = dict(retries={"max_attempts": 8, "mode": "standard"}, max_pool_connections=self.max_requests,
                      signature_version="s3v4",
                      s3={"addressing_style": "path" if path_style else "auto"})
            try:  # newer botocore checksums every request unless told; older ones know neither option
                cfg = Config(request_checksum_calculation="when_required", response_checksum_validation="when_required", **kw)
            except TypeError:
                cfg = Config(**kw)

            def make(config=cfg):
                # The responses' timestamps (Last-Modified) stay strings: the
                # reader never looks at them, and parsing them with dateutil was
                # a tenth of a GET's CPU, which holds the GIL.
                import botocore.session
                session = botocore.session.get_session()
                session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
                client = boto3.session.Session(botocore_session=session).client(
                    "s3", endpoint_url=endpoint, region_name=q.get("region"), config=config)
                if self.requester_pays:
                    client.meta.events.register("before-sign.s3", _request_payer)
                return client
            def pair():
                c = _store_client("s3", self.bucket, q, self.max_requests, make)
                return c, getattr(getattr(c, "_endpoint", None), "http_session", None)
            self._s3_pp = _PerProcess(pair)
            # Ranged reads through get_object (where a bucket refuses
            # presigned URLs) are retried by _range_retried: their client
            # tries once, not botocore's 9 times (8 retries) inside each of
            # those 8.
            once = cfg.merge(Config(retries={"total_max_attempts": 1, "mode": "standard"}))
            self._s3_once_pp = _PerProcess(lambda: _store_client("s3-once", self.bucket, q, self.max_requests, lambda: make(once)))
            self._s3_client()  # a missing credential or bad query fails here
            self._fs = None
        elif u.scheme == "azblob":
            self._az = _store_client("azblob", self.bucket, q, self.max_requests, lambda: _AzureBlobs(self.bucket, q, self.max_requests))
            self._fs = None
        elif u.scheme == "gs":
            self._az = _store_client("gs", self.bucket, q, self.max_requests, lambda: _GCSObjects(self.bucket, q, self.max_requests))
            self._fs = None
        else:
            try:
                import fsspec
            except ImportError as e:
                raise RuntimeError(f"{u.scheme}:// needs fsspec (pip install ./python[fsspec])") from e
            proto = {"gs": "gcs"}.get(u.scheme, u.scheme)
            self._fs = fsspec.filesystem(proto)
        if cache_dir is None:
            import hashlib
            base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            cache_dir = os.path.join(base, "relayout", hashlib.sha1(url.split("?")[0].encode()).hexdigest()[:16])
        os.makedirs(cache_dir, exist_ok=True)
        self.dir, self.limit = cache_dir, cache_bytes or DEFAULT_CACHE_BYTES
        self.ahead = prefetch_windows or 2
        self.lock = threading.Lock()
        self.uses, self.pinned = {}, set()
        self._pools, self._pools_pid, self._pools_lock = {}, os.getpid(), threading.Lock()
        self._signed, self._signed_lock = {}, threading.Lock()  # key -> (presigned URL, renew after)
        self.signed_reads = True  # off once the store refuses a presigned URL (_signed_get)
        self._last_scan = 0.0
        self.stats = RemoteStats(bytes_downloaded=0, downloads=0, retries=0, waited_seconds=0.0, listings=0)
        _REMOTES.add(self)

    def _after_fork(self):
        """A forked child's own state: new locks (one a thread of the parent
        held at the fork is never released in the child), no pins (the
        parent's reads in flight are not the child's: their files would
        never be evicted here) and no thread pools. Its store client is
        its own too (_s3_client)."""
        self.lock, self._pools_lock, self._signed_lock = threading.Lock(), threading.Lock(), threading.Lock()
        self.pinned = set()
        self._pools, self._pools_pid = {}, os.getpid()

    def _s3_client(self):
        """This process's boto3 client for the store and its HTTP session
        (which presigned reads are sent on: _signed_get; None where botocore
        keeps it elsewhere). A Dataset made in one process and used in a
        forked one (a DataLoader worker given it, a multiprocessing child)
        takes the child's own client: on the parent's pooled connections,
        two processes read each other's responses (two forked children hung
        that way, TestRemoteRequestsInFlight)."""
        return self._s3_pp.get()

    @property
    def _s3(self):
        return self._s3_client()[0] if self._s3_pp is not None else None

    @property
    def _http(self):
        return self._s3_client()[1] if self._s3_pp is not None else None

    def get(self, rel):
        """The bytes of an object under the output, retried."""
        key = self.prefix + rel
        if self._s3 is not None:
            return self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        if self._az is not None:
            return self._az.get(key)
        with self._fs.open(f"{self.bucket}/{key}", "rb") as f:
            return f.read()

    def list(self, rel):
        """The names directly under a folder of the output."""
        prefix = self.prefix + rel
        if self._s3 is not None:
            out, token = [], None
            while True:
                kw = {"Bucket": self.bucket, "Prefix": prefix}
                if token:
                    kw["ContinuationToken"] = token
                r = self._s3.list_objects_v2(**kw)
                out += [o["Key"][len(prefix):] for o in r.get("Contents", [])]
                if not r.get("IsTruncated"):
                    return [n for n in out if "/" not in n]
                token = r["NextContinuationToken"]
        if self._az is not None:
            return self._az.list(prefix)
        try:
            return [os.path.basename(p) for p in self._fs.ls(f"{self.bucket}/{prefix}", detail=False)]
        except FileNotFoundError:
            return []

    # Cache objects (the Go loader's cacheObj): a whole shard, a shard's
    # header, or one block (its byte ranges of every tensor, in data order).
    @staticmethod
    def shard_obj(info):
        return {"name": f"{info['xxhash64']}-{info['bytes']}.safetensors", "bytes": info["bytes"],
                "hash": info["xxhash64"], "key": info["path"], "ranges": None, "what": "shard"}

    @staticmethod
    def header_obj(info):
        return {"name": f"{info['xxhash64']}-{info['bytes']}.header", "bytes": info["header_bytes"],
                "hash": info["header_xxhash64"], "key": info["path"], "ranges": [(0, info["header_bytes"])],
                "reqs": _merge_ranges([(0, info["header_bytes"])]), "what": "header"}

    @staticmethod
    def block_obj(info, table, data_start, k):
        r = table["ranges"][k]
        parts = sorted((data_start + r[j], data_start + r[j + 1], j // 2) for j in range(0, len(r), 2) if r[j + 1] > r[j])
        ranges = [(a, e) for a, e, _ in parts]
        return {"name": f"{info['xxhash64']}-{info['bytes']}-{k}-{table['xxhash64'][k]}.block",
                "bytes": sum(e - a for a, e in ranges), "hash": table["xxhash64"][k], "key": info["path"],
                "ranges": ranges, "reqs": _merge_ranges(ranges), "tensors": [t for _, _, t in parts], "block": k,
                "what": f"block {k}"}

    def _lock_objs(self, objs):
        """Lock the objects against other downloads of them, as the Go
        loader does (loader/objlock.go): on Linux an exclusive byte-range
        lock of an open file description (F_OFD_SETLKW) on the folder's
        blocks.lock, one byte per object at xxhash64(name) >> 2, taken in
        ascending order; closing the returned file releases them. Without
        F_OFD_SETLKW (not Linux, Python < 3.9), a lock file per object,
        removed when released."""
        import fcntl
        if hasattr(fcntl, "F_OFD_SETLKW"):
            import struct
            import xxhash
            f = _open_lock_file(os.path.join(self.dir, "blocks.lock"))
            try:
                for off in sorted({xxhash.xxh64(o["name"].encode()).intdigest() >> 2 for o in objs}):
                    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks)
                    fcntl.fcntl(f.fileno(), fcntl.F_OFD_SETLKW, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, off, 1, 0))
            except BaseException:
                _close_lock_file(f)
                raise
            return [f]
        return [self._flock(os.path.join(self.dir, n + ".lock")) for n in sorted({o["name"] for o in objs})]

    def _unlock_objs(self, locks):
        """Release what _lock_objs took."""
        for lk in reversed(locks):
            if os.path.basename(lk.name) == "blocks.lock":
                _close_lock_file(lk)
            else:
                self._unlock_obj(lk)

    def path(self, obj):
        return os.path.join(self.dir, obj["name"])

    def present(self, obj):
        try:
            return os.stat(self.path(obj)).st_size == obj["bytes"]
        except FileNotFoundError:
            return False

    def get_range(self, rel, start, end):
        """Bytes [start, end) of an object under the output."""
        key = self.prefix + rel
        if self._s3 is not None:
            if self._http is not None and self.signed_reads:
                try:
                    return self._signed_get(key, start, end)
                except _SignedRefused:
                    self.signed_reads = False  # get_object from now on
            from botocore.exceptions import ClientError
            try:
                client = self._s3_once_pp.get()
                return client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")["Body"].read()
            except ClientError as e:
                status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if _refused(status):
                    raise _StoreRefused(self._s3_get_failed(key, start, end, status, str(e))) from e
                raise IOError(self._s3_get_failed(key, start, end, status, e.response.get("Error", {}).get("Code", ""))) from e
        if self._az is not None:
            return self._az.get(key, start, end)
        return self._fs.cat_file(f"{self.bucket}/{key}", start=start, end=end)

    def _s3_get_failed(self, key, start, end, status, what):
        """The message of a failed ranged GET of key, as every S3 read path
        words it: the object, the range, the status and what the store
        said (its error code)."""
        return f"GET s3://{self.bucket}/{key} bytes {start}-{end - 1}: HTTP {status} {what}".rstrip()

    def _presigned(self, key, renew=False):
        """A presigned GET URL of key, made once per half of its validity
        (signing is local: boto3 needs no request for it)."""
        import time
        now = time.time()
        with self._signed_lock:
            u = self._signed.get(key)
            if u is None or renew or u[1] < now:
                params = {"Bucket": self.bucket, "Key": key}
                if self.requester_pays:
                    params["RequestPayer"] = "requester"
                url = self._s3.generate_presigned_url("get_object", Params=params, ExpiresIn=_PRESIGN_SECONDS)
                u = self._signed[key] = (url, now + _PRESIGN_SECONDS / 2)
            return u[0]

    def _signed_get(self, key, start, end):
        """Bytes [start, end) of key through a presigned URL, sent on the
        boto3 client's own HTTP session (its connection pool, proxies and
        TLS settings). A 64 KiB ranged read this way takes 0.39 ms of CPU,
        which holds the GIL, against 0.69 ms through get_object's pipeline
        of events, signing and response parsing (docs/benchmarks.md); a
        block of a large shard is one read per tensor, and a shard's URL
        serves all of them. A 403 is asked once more, signed anew (expired
        credentials). Where the store refuses the URL itself (a 403 still, a
        400 or a redirect: a bucket policy against query-string auth, a
        bucket in another region than the client's, which get_object
        follows), it raises _SignedRefused, and the reader uses get_object
        from then on. Another 4xx but 408 and 429 (the object gone, a range
        past its end) raises _StoreRefused, which is not retried; anything
        else raises for the callers to retry."""
        from botocore.awsrequest import AWSRequest
        for renew in (False, True):  # a 403 once more, signed anew (expired credentials)
            url = self._presigned(key, renew=renew)
            req = AWSRequest(method="GET", url=url, headers={"Range": f"bytes={start}-{end - 1}"}).prepare()
            r = self._http.send(req)
            if r.status_code != 403:
                break
        return _ranged_data(r, start, end, (301, 307, 400, 403),
                            lambda: self._s3_get_failed(key, start, end, r.status_code, _xml_code(r)))

    def _range_retried(self, key, start, end):
        """Bytes [start, end) of an object, retried on its own: 8 tries,
        backing off 0.05 s doubling to 2 s (about 5 s in all, as long as the
        Go loader's reads wait before a store that keeps failing is an
        error)."""
        import time
        last = None
        for attempt in range(8):
            if attempt:
                time.sleep(min(0.05 * (1 << (attempt - 1)), 2.0))
            try:
                data = self.get_range(key, start, end)
            except _StoreRefused:
                raise
            except Exception as e:  # a 5xx, a reset, a cut body: try again
                last = e
                continue
            if len(data) == end - start:
                return data
            last = ValueError(f"{len(data)} of {end - start} bytes at {start}")
        raise last

    def _fetch(self, obj):
        """An object's bytes from the store (ranges fetched in parallel,
        each retried on its own), or raises."""
        if obj["ranges"] is None:  # a whole shard: its size is known
            return self._range_retried(obj["key"], 0, obj["bytes"])
        reqs = obj["reqs"]  # ranges that touch: one request (_merge_ranges)
        if len(reqs) == 1:
            return self._range_retried(obj["key"], *reqs[0])
        return b"".join(self.pool().map(lambda r: self._range_retried(obj["key"], *r), reqs))

    def _runs(self, objs):
        """Missing objs grouped into runs of consecutive blocks of one shard
        (at most 32 blocks, 16 MiB), fetched together (the Go loader's
        runs); everything else a run of one."""
        out, nbytes = [], 0
        for o in sorted(objs, key=lambda o: (o["key"], o.get("block", -1))):
            if out and o.get("tensors") is not None:
                run = out[-1]
                last = run[-1]
                if (last.get("tensors") == o["tensors"] and last["key"] == o["key"] and last["block"] + 1 == o["block"]
                        and len(run) < _MAX_RUN and nbytes + o["bytes"] <= _MAX_RUN_BYTES
                        and all(a0 <= b0 <= a1 <= b1 for (a0, a1), (b0, b1) in zip(last["ranges"], o["ranges"]))):
                    run.append(o)
                    nbytes += o["bytes"]
                    continue
            out.append([o])
            nbytes = o["bytes"]
        return out

    @staticmethod
    def _check(obj, data):
        """None when data is obj's content (size and xxhash64), else the
        error."""
        import xxhash
        if len(data) != obj["bytes"]:
            return ValueError(f"{obj['what']}: {len(data)} of {obj['bytes']} bytes")
        got = xxhash.xxh64(data).hexdigest()
        if got != obj["hash"]:
            says = "the shard's block table says" if obj["what"].startswith("block") else "the manifest says"
            return ValueError(f"{obj['what']}: xxhash64 {got}, {says} {obj['hash']} (damaged on the store, or changed since the manifest)")
        return None

    def _commit(self, tmp, obj, data):
        """Write checked data into its reserved file and rename it to its
        trusted name under the folder's lock; count it."""
        with open(tmp, "r+b") as f:
            f.write(data)
        folder = self._lock_ledger()
        try:
            os.replace(tmp, self.path(obj))
        finally:
            folder.close()
        self.stats["bytes_downloaded"] += len(data)
        self.stats["downloads"] += 1

    def ensure_run(self, run, pos, wait):
        """Fetch a run of consecutive blocks with one ranged read per tensor
        spanning them, each block checked and renamed on its own, under
        their locks (_lock_objs). True when done, False when a
        prefetch found no room, "split" when a block appeared meanwhile."""
        locks = self._lock_objs(run)
        try:
            if any(self.present(o) for o in run):
                return "split"
            if not wait:
                pos = self._prefetch_pos(pos, run)
                if pos is None:
                    return "split"  # one by one: ensure skips what is not needed
            tmps = []
            try:
                for o in run:
                    tmp = self._reserve(o["bytes"], pos, wait)
                    if tmp is None:
                        return False
                    tmps.append(tmp)
                first, lastb = run[0], run[-1]
                last = None
                for _ in self._attempts():
                    try:
                        spans = list(self.pool().map(lambda i: self._range_retried(first["key"], first["ranges"][i][0], lastb["ranges"][i][1]),
                                                     range(len(first["ranges"]))))
                    except Exception as e:  # refused, or retried already (_range_retried): not again
                        last = e
                        break
                    bad = None
                    for k, o in enumerate(run):
                        if self.present(o):
                            continue
                        data = b"".join(spans[i][a - first["ranges"][i][0]:e - first["ranges"][i][0]] for i, (a, e) in enumerate(o["ranges"]))
                        bad = self._check(o, data)
                        if bad is not None:
                            break
                        self._commit(tmps[k], o, data)
                    if bad is None:
                        return True
                    last = bad
                raise RuntimeError(f"blocks {first['block']}-{lastb['block']} of shard {first['key']} of {self.url}: {last}")
            finally:
                for k, tmp in enumerate(tmps):
                    self._release(tmp, run[k]["bytes"])
        finally:
            self._unlock_objs(locks)

    def pool(self):
        """The threads ranged reads run on (the store serves many requests
        at once; one after another, a block takes a round trip per tensor)."""
        return self._executor("ranges", self.max_requests)

    def _executor(self, key, n):
        """A thread pool of n threads kept for the reader's life, by key:
        started once, not once per window (a window's pool cost the reader
        171 thread starts and joins an epoch, a third of its wall time,
        docs/benchmarks.md). A forked child (a DataLoader worker) makes its
        own: the parent's threads do not exist in it."""
        from concurrent.futures import ThreadPoolExecutor
        with self._pools_lock:
            if self._pools_pid != os.getpid():
                self._pools, self._pools_pid = {}, os.getpid()
            ex = self._pools.get((key, n))
            if ex is None:
                ex = self._pools[(key, n)] = ThreadPoolExecutor(n, thread_name_prefix=f"relayout-{key}")
            return ex

    def _flock(self, path):
        import fcntl
        f = _open_lock_file(path)
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
        except BaseException:
            _close_lock_file(f)
            raise
        return f

    @staticmethod
    def _unlock_obj(f):
        """Release an object's lock file, removing it first if it is still
        the one locked (a reader that opened it before then holds a lock no
        one else takes; one that opens it after creates a new file; either
        finds the object present, or downloads it again to its own
        temporary file)."""
        try:
            if os.path.samestat(os.fstat(f.fileno()), os.stat(f.name)):
                os.remove(f.name)
        except OSError:
            pass
        _close_lock_file(f)

    def _next_use(self, name):
        u = self.uses.get(name)
        return u[0] if u else _NEVER

    def _prefetch_pos(self, pos, objs):
        """The window position a prefetch of objs reserves for: pos, or the
        latest of their next uses if later (a prefetch that waited for room
        may find the reader past the windows it planned for, and must evict
        nothing needed before what it fetches); None when the reader opens
        no window that needs one of them this epoch (fetched then, it would
        be a second download of a file read and evicted already). The Go
        loader's prefetchPos."""
        with self.lock:
            for o in objs:
                nxt = self._next_use(o["name"])
                if nxt == _NEVER:
                    return None
                pos = max(pos, nxt)
        return pos

    def _lock_ledger(self):
        """Lock the folder's cache.lock and return it open for its ledger:
        the folder's usage as a decimal byte count, kept as the Go loader
        keeps it (a reservation that fits it needs no listing of the
        folder)."""
        tlock = _FOLDER_LOCKS.setdefault(self.dir, threading.Lock())
        return _FolderLock(os.path.join(self.dir, "cache.lock"), tlock)

    @staticmethod
    def _read_ledger(lk):
        f = lk.f
        f.seek(0)
        try:
            v = int(f.read(24).decode().strip())
            return v if v >= 0 else None
        except ValueError:
            return None

    @staticmethod
    def _write_ledger(lk, used):
        # Padded to 20 bytes and written over the last value, never
        # truncated: ext4 writes a file truncated to nothing and written
        # again back to disk when it is closed (auto_da_alloc), 0.3 ms a
        # reservation under the folder's lock. The Go loader writes the same.
        lk.f.flush()  # and drops what it buffered of the old value
        os.pwrite(lk.f.fileno(), b"%-20d" % used, 0)

    def _attempts(self, n=4):
        """Yields n attempts of a download, counting each retry and backing
        off before it (0.1 s, 0.4 s, 0.9 s), as the Go loader does. A
        download is attempted again only when what it fetched fails its
        check: a read that failed was retried already (_range_retried, and
        the client under it), and downloading again would multiply the
        requests sent to a store that is failing (20 GETs in 6 s for one
        shard of an S3 store answering 503; now 8 in 5 s)."""
        import time
        for attempt in range(n):
            if attempt:
                self.stats["retries"] += 1
                time.sleep(0.1 * attempt * attempt)
            yield attempt

    def _reserve(self, n, pos, wait):
        import secrets
        import time
        deadline = time.time() + 120
        while True:
            lk = self._lock_ledger()
            try:
                used = self._read_ledger(lk)
                ok = (used is not None and used + n + _LEDGER_SLACK <= self.limit
                      and time.time() - self._last_scan < _RESCAN_EVERY)
                if not ok:  # list the folder: its true usage, and evict
                    self._last_scan = time.time()
                    self.stats["listings"] += 1
                    files = []
                    for e in os.scandir(self.dir):
                        if e.is_file() and not e.name.endswith(".lock"):
                            try:
                                st = e.stat()
                            except FileNotFoundError:
                                continue
                            files.append((e.name, st.st_size, st.st_mtime))
                    used = sum(f[1] for f in files)
                    low = self.limit - self.limit // _EVICT_LOW
                    with self.lock:
                        files.sort(key=lambda f: (-self._next_use(f[0]), f[2]))
                        for fname, size, mtime in files:
                            fits = used + n + _LEDGER_SLACK <= self.limit
                            if fits and used + n + _LEDGER_SLACK <= low:
                                break
                            if fname.startswith(".tmp-"):
                                if time.time() - mtime < _STALE_TMP:
                                    continue
                            elif fname in self.pinned or self._next_use(fname) <= pos:
                                continue
                            # Beyond what must go, only what this reader has
                            # read for the last time this epoch (planned, no
                            # use left), not another reader's files.
                            if fits and (fname.startswith(".tmp-") or self.uses.get(fname, None) != []):
                                continue
                            try:
                                os.remove(os.path.join(self.dir, fname))
                                used -= size
                                self.uses.pop(fname, None)  # gone: not this reader's file any more
                            except FileNotFoundError:
                                pass
                    ok = used + n + _LEDGER_SLACK <= self.limit
                if ok:
                    tmp = os.path.join(self.dir, f".tmp-{os.getpid()}-{secrets.token_hex(6)}")
                    with open(tmp, "wb") as f:
                        f.truncate(n)  # counted by the folder's usage from now on
                    self._write_ledger(lk, used + n)
                    return tmp
                self._write_ledger(lk, used)
            finally:
                lk.close()
            if not wait:
                return None
            if time.time() > deadline:
                raise RuntimeError(f"cache {self.dir}: {self.limit} bytes (cache_bytes) stayed full of files still needed for 2 minutes; raise cache_bytes")
            time.sleep(0.02)

    def _release(self, tmp, n):
        """Remove a reservation that did not become a cache file (a failed
        download) and take it off the ledger."""
        if not os.path.lexists(tmp):
            return  # renamed to its cache name (the name is this reservation's alone)
        lk = self._lock_ledger()
        try:
            os.remove(tmp)
            used = self._read_ledger(lk)
            if used is not None:
                self._write_ledger(lk, max(used - n, 0))
        except FileNotFoundError:
            pass  # renamed: a cache file now, of the same size
        finally:
            lk.close()

    def ensure(self, obj, pos, wait):
        """Make a cache object present for the window at pos; False when a
        prefetch found no room."""
        if wait:
            with self.lock:
                self.pinned.add(obj["name"])
        if self.present(obj):
            return True
        locks = self._lock_objs([obj])
        try:
            if self.present(obj):
                return True
            if not wait:
                pos = self._prefetch_pos(pos, [obj])
                if pos is None:
                    return True  # the reader went past it while the prefetch waited for room
            tmp = self._reserve(obj["bytes"], pos, wait)
            if tmp is None:
                return False
            try:
                last = None
                for _ in self._attempts():
                    try:
                        data = self._fetch(obj)
                    except Exception as e:  # refused, or retried already (_range_retried): not again
                        last = e
                        break
                    last = self._check(obj, data)
                    if last is not None:
                        continue
                    self._commit(tmp, obj, data)
                    return True
                what = "" if obj["what"] == "shard" else obj["what"] + " of "
                raise RuntimeError(f"{what}shard {obj['key']} of {self.url}: {last}")
            finally:
                self._release(tmp, obj["bytes"])
        finally:
            self._unlock_objs(locks)

    def ensure_all(self, objs, pos, wait, stop=None):
        """ensure for several objects, 8 at a time; a prefetch (not wait)
        retries what found no room until stop() says so. The reader (wait)
        counts the time it waited."""
        import time
        if wait:
            with self.lock:
                self.pinned.update(o["name"] for o in objs)
        missing = [o for o in objs if not self.present(o)]
        if not missing:
            return
        t0 = time.time()
        try:
            self._ensure_all(missing, pos, wait, stop)
        finally:
            if wait:
                self.stats["waited_seconds"] += time.time() - t0

    def _ensure_all(self, objs, pos, wait, stop):
        import time

        def one_run(run):
            if len(run) > 1:
                while True:
                    r = self.ensure_run(run, pos, wait)
                    if r is True or (stop is not None and stop()):
                        return
                    if r == "split":
                        break
                    time.sleep(0.01)
            for o in run:
                while not self.ensure(o, pos, wait):
                    if stop is not None and stop():
                        return
                    time.sleep(0.01)
        runs = self._runs(objs)
        if len(runs) <= 1:
            for run in runs:
                one_run(run)
            return
        import concurrent.futures
        # As many objects at once as keep max_requests busy: a shard of one
        # block is one request, a block one per tensor (at least 8). The
        # reader and the prefetcher have pools of their own, so that the
        # reader's runs never queue behind the prefetcher's.
        per = max([1] + [len(o["reqs"]) for o in objs if o["ranges"] is not None])
        ex = self._executor("read" if wait else "prefetch", max(8, self.max_requests // per))
        futures = [ex.submit(one_run, run) for run in runs]
        concurrent.futures.wait(futures)  # all done before one's error is raised, as a pool's exit waits
        for f in futures:
            f.result()

    def unpin(self, obj):
        with self.lock:
            self.pinned.discard(obj["name"])


# --- dataset roots (docs/datasets.md) ------------------------------------------

def open_generation(root, generation=0):
    """The manifest of a dataset root's generation (0: the newest): its parts'
    manifests merged by merge_parts, shard paths relative to the root."""
    def read(rel):
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()
    return _read_generation(root, generation, lambda: os.listdir(os.path.join(root, "generations")), read)


def _read_generation(root, generation, list_names, read):
    if not generation:
        names = [n for n in list_names() if n.endswith(".json") and n[:-5].isdigit() and len(n) == 13]
        if not names:
            raise ValueError(f"{root}: no generation")
        generation = max(int(n[:-5]) for n in names)
    g = json.loads(read("generations/%08d.json" % generation))
    if g.get("format") != "relayout-dataset-generation" or g.get("generation") != generation \
            or g.get("format_version") != GENERATION_FORMAT_VERSION:
        raise ValueError(f"{root}: generation {generation} is not a relayout dataset generation "
                         f"of format version {GENERATION_FORMAT_VERSION}")
    parts, paths = [], []
    for p in g["parts"]:
        parts.append(json.loads(read(p["path"].rstrip("/") + "/manifest.json")))
        paths.append(p["path"])
    return merge_parts(parts, paths)


def merge_parts(parts, paths):
    """Concatenate a dataset's part manifests into one (the Python half of the
    reading contract; Go's is loader.MergeParts): files, slices and shards in
    part order, their paths prefixed by the part's folder, their positions
    past the parts before. The parts must share tensor schema and order."""
    if not parts:
        raise ValueError("a generation of no parts has no tensors to read")
    first = parts[0]
    if not first.get("tensors"):
        raise ValueError(f"part {paths[0]} has no tensor shards (run relayout with --tensors)")
    ft = first["tensors"]
    out = dict(first)
    t = dict(ft)
    out["tensors"] = t
    out["files"], out["slices"], t["shards"] = [], [], []
    out["fingerprint"] = None
    tot = {"rows": 0, "files": 0, "row_groups": 0, "bytes": 0, "slices": 0}
    ttot = {"shards": 0, "bytes": 0, "rows": 0, "items": 0}
    rows = items = file_rows = 0
    for m, path in zip(parts, paths):
        mt = m.get("tensors")
        if (not mt or mt["spec_hash"] != ft["spec_hash"] or mt["order"] != ft["order"] or mt["sample"] != ft["sample"]
                or m["slice_keys"] != first["slice_keys"]):
            raise ValueError(f"part {path}: its tensors differ from part {paths[0]}'s: the parts of one generation are laid out alike")
        pre = path.rstrip("/") + "/"
        nf, ns = len(out["files"]), len(out["slices"])
        for f in m["files"]:
            f = dict(f, path=pre + f["path"], first_row=f["first_row"] + file_rows)
            out["files"].append(f)
        for sl in m["slices"]:
            segs = [dict(sg, file=sg["file"] + nf) for sg in sl["segments"]]
            out["slices"].append(dict(sl, first_row=sl["first_row"] + rows, segments=segs))
        for sh in mt["shards"]:
            sh = dict(sh, path=pre + sh["path"], first_row=sh["first_row"] + rows,
                      slices=[dict(x, slice=x["slice"] + ns) for x in sh["slices"]])
            if sh.get("items", 0) > 0 or sh.get("first_item", 0) > 0:
                sh["first_item"] = sh.get("first_item", 0) + items
            t["shards"].append(sh)
        rows += mt["totals"]["rows"]
        items += mt["totals"].get("items", 0)
        file_rows += m["totals"]["rows"]
        for k in ttot:
            ttot[k] += mt["totals"].get(k, 0)
        for k in tot:
            tot[k] += m["totals"][k]
    t["shards"].sort(key=lambda sh: sh["first_row"])
    t["totals"] = ttot
    out["totals"] = tot
    return out


class Dataset:
    """Tensor shards of a relayout output, read by one (rank, worker).

    manifest: an output's manifest.json or folder, or a dataset root (its
    generation's parts read as one dataset; generation=N pins one, 0 the
    newest).

    slices: None for everything, or a list of slice indices and/or dicts of
    slice-key values ({"country": "C01"} matches every slice with that
    country); only the shards and row ranges of those slices are read.
    samples_seen resumes an epoch after that many samples of its global
    order (all ranks together).

    shuffle: "window" (relayout-order-v2, the default; True means it),
    "block" (relayout-order-v1) or "none" (False: the output order).
    streams: v2's canonical streams (default world * num_workers); any job
    whose world * num_workers divides it reads the same global order.
    window_bytes: tensor bytes permuted together per stream (256 MiB).
    piece_samples: cut blocks into read pieces this small (default: whole
    blocks) for more mixing when each reader owns few blocks.
    weights: sampling weights, {slice index: w} and/or {key: {value: w}}
    (values as the manifest prints them); a slice's weight is the product
    (1 where none is given). index=True adds "_index" (int64 global sample
    positions) to every batch.

    A remote output (s3://, gs://, azblob:// with the CLI's query
    parameters) is downloaded into cache_dir (default: the user cache
    folder), never more than cache_bytes (8 GiB), prefetch_windows windows
    ahead (2), with at most max_requests ranged reads in flight (64)."""

    def __init__(self, manifest, rank=0, world=1, worker=0, num_workers=1, seed=0, epoch=0,
                 shuffle=True, slices=None, samples_seen=0, drop_last=False, verify_checksums=False,
                 streams=None, window_bytes=None, weights=None, index=False, piece_samples=None, generation=0,
                 cache_dir=None, cache_bytes=None, prefetch_windows=None, max_requests=None):
        self._remote, self._pos = None, _NEVER
        if is_remote(manifest):
            self._remote = rc = _Remote(manifest, cache_dir, cache_bytes, prefetch_windows, max_requests)
            gens = rc.list("generations/")
            if gens:  # a dataset root: its generation's parts as one output
                self.manifest = _read_generation(manifest, generation, lambda: gens, rc.get)
            else:
                self.manifest = json.loads(rc.get("manifest.json"))
            manifest = manifest.split("?")[0].rstrip("/") + "/manifest.json"
        elif os.path.isdir(os.path.join(manifest, "generations")):
            self.manifest = open_generation(manifest, generation)
            manifest = os.path.join(manifest, "manifest.json")  # shard paths are relative to the root
        else:
            if os.path.isdir(manifest):
                manifest = os.path.join(manifest, "manifest.json")
            with open(manifest) as f:
                self.manifest = json.load(f)
        m = self.manifest
        if m.get("format") != "relayout-manifest":
            raise ValueError(f"{manifest}: not a relayout manifest")
        if m.get("format_version") != MANIFEST_FORMAT_VERSION:  # as the Go loader (manifests.Parse)
            raise ValueError(f"{manifest}: manifest format_version {m.get('format_version')} is not supported "
                             f"(this loader reads {MANIFEST_FORMAT_VERSION})")
        self.tensors_info = m.get("tensors")
        if not self.tensors_info:
            raise ValueError(f"{manifest}: this output has no tensor shards (run relayout with --tensors)")
        if self.tensors_info["order"]["algorithm"] != ALGORITHM:  # v2 is a way of reading v1 blocks
            raise ValueError(f"{manifest}: order algorithm {self.tensors_info['order']['algorithm']} is not {ALGORITHM}")
        check_tensors(self.tensors_info, m.get("slices") or [], manifest)
        self.root = None if self._remote else os.path.dirname(os.path.abspath(manifest))
        self.rank, self.world, self.worker, self.num_workers = rank, world, worker, num_workers
        self.seed, self.epoch, self.shuffle = seed, epoch, shuffle
        self.samples_seen, self.drop_last = samples_seen, drop_last
        if samples_seen < 0 or epoch < 0:  # as the Go loader (Assignment.check): -512 read one batch twice
            raise ValueError(f"epoch {epoch} and samples_seen {samples_seen} must not be negative")
        self.verify_checksums = verify_checksums
        self.schema = self.tensors_info["schema"]
        self.by_name = {t["name"]: t for t in self.schema}
        shards = self.tensors_info["shards"]
        self._firsts = [s["first_row"] for s in shards]
        self._ends = [s["first_row"] + s["rows"] for s in shards]
        self._shards = [None] * len(shards)
        self._blocked = [None] * len(shards)  # by block: each shard's header
        self._blocks = {}  # by block: the window's mapped blocks
        self._files = _Files()  # shard and block files kept open for pread
        self.selection = self._select(slices)
        if shuffle is True:
            shuffle = "window"
        elif shuffle is False or shuffle is None:
            shuffle = "none"
        if shuffle not in ("window", "block", "none"):
            raise ValueError(f"shuffle={shuffle!r}: want 'window', 'block' or 'none'")
        self.order = shuffle
        self.shuffle = shuffle != "none"
        self.streams = streams if streams else world * num_workers
        if window_bytes is None and self._remote is not None:
            # A remote output's default window fits its cache (pass the same
            # window_bytes locally for the same order).
            per = max(self.streams // max(world * num_workers, 1), 1)
            window_bytes = max(min(256 << 20, self._remote.limit // (4 * per)), 1)
        self.window_bytes = window_bytes
        self.piece_samples = piece_samples
        self.index = index
        self.weights = self._weigh(weights) if weights is not None else None
        if self.weights is not None and self.order != "window":
            raise ValueError("weights need shuffle='window'")

    def _select(self, slices):
        if slices is None:
            return None
        ms = self.manifest["slices"]
        idx = set()
        for s in slices:
            if isinstance(s, int):
                if not 0 <= s < len(ms):
                    raise ValueError(f"slice {s}: the manifest has {len(ms)} slices")
                idx.add(s)
            elif isinstance(s, dict):
                for k in s:
                    self._slice_key("slices", k)
                found = [i for i, sl in enumerate(ms) if all(sl["key"].get(k) == v for k, v in s.items())]
                if not found:  # a typo read as an empty epoch, silently
                    some = sorted({json.dumps(sl["key"].get(k)) for sl in ms for k in s})[:5]
                    raise ValueError(f"slices: {s!r} matches no slice of the manifest (values there: {', '.join(some)}, ...)")
                idx.update(found)
            else:
                raise TypeError("slices: want slice indices or dicts of key values")
        rs = sorted((ms[i]["first_row"], ms[i]["first_row"] + ms[i]["rows"]) for i in idx)
        out = []
        for s, e in rs:
            if e <= s:
                continue
            if out and s <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((s, e))
        return out

    def _slice_key(self, what, k):
        """Refuse k where it is not a slice key (slices= and weights= name
        slices by key values)."""
        keys = self.manifest["slice_keys"]
        if k not in keys:
            raise ValueError(f"{what}: {k!r} is not a slice key (the slice keys are {keys})")

    def _weigh(self, weights):
        ms = self.manifest["slices"]
        per_slice, per_key = {}, {}
        for k, v in weights.items():
            if isinstance(k, int):
                if not 0 <= k < len(ms):
                    raise ValueError(f"weights: slice {k}: the manifest has {len(ms)} slices")
                per_slice[k] = float(v)
            elif isinstance(k, str) and isinstance(v, dict):
                self._slice_key("weights", k)
                per_key[k] = {str(x): float(w) for x, w in v.items()}
                have = {_key_str(sl["key"].get(k)) for sl in ms}
                for x in per_key[k]:
                    if x not in have:  # a typo would weigh nothing, silently
                        raise ValueError(f"weights: {k}={x!r} matches no slice of the manifest")
            else:
                raise TypeError("weights: want {slice index: weight} or {key: {value: weight}}")
        out = []
        for i, sl in enumerate(ms):
            r = (sl["first_row"], sl["first_row"] + sl["rows"])
            if self.selection is not None and not _cut([r], self.selection):
                continue
            w = per_slice.get(i, 1.0)
            for name, value in sl["key"].items():
                x = per_key.get(name, {}).get(_key_str(value))
                if x is not None:
                    w *= x
            if not (w >= 0 and w != float("inf")):
                raise ValueError(f"weights: slice {i} has weight {w}; want a finite weight >= 0")
            out.append((r, w))
        return out

    def __len__(self):
        if self.selection is None:
            return self.tensors_info["totals"]["rows"]
        return sum(e - s for s, e in self.selection)

    def sequence(self):
        t = self.tensors_info
        return sequence(t["totals"]["rows"], t["order"]["block_samples"], self.selection, self.seed, self.epoch, self.shuffle)

    def batch_ranges(self, n):
        return batch_ranges(self.sequence(), n, self.rank, self.world, self.worker, self.num_workers,
                            self.samples_seen, self.drop_last)

    def _shard(self, i):
        s = self._shards[i]
        if s is None:
            info = self.tensors_info["shards"][i]
            if self._remote is not None:
                obj = self._remote.shard_obj(info)
                for attempt in range(6):  # a reader sharing the cache may evict it first
                    self._remote.ensure_all([obj], self._pos, True)
                    try:
                        s = _Shard(self._remote.path(obj), info["bytes"], None, self._files)
                        break
                    except FileNotFoundError:
                        if attempt == 5:
                            raise
            else:
                s = _Shard(os.path.join(self.root, info["path"]), info["bytes"],
                           info["xxhash64"] if self.verify_checksums else None, self._files)
            for t in self.schema:
                if t["name"] not in s.tensors or s.tensors[t["name"]][0] != t["dtype"]:
                    raise ValueError(f"{s.path}: tensor {t['name']} ({t['dtype']}) is missing or has another dtype")
            self._shards[i] = s
        return s

    def _pieces(self, ranges, by_block=False):
        """The ranges cut at shard boundaries: (shard, lo, hi) with rows
        counted from the shard's first; by_block, cut at block boundaries
        too: (block, lo, hi) with rows counted from the block's first."""
        import bisect
        out = []
        for start, end in ranges:
            s = start
            while s < end:
                i = bisect.bisect_right(self._ends, s)
                if i >= len(self._ends):
                    raise IndexError(f"sample {s} is past the last shard")
                if by_block and not self._whole(i):
                    k, first, e = self._block_at(i, s)
                    e = min(end, e)
                    out.append((self._block(i, k), s - first, e - first))
                else:
                    e = min(end, self._ends[i])
                    out.append((self._shard(i), s - self._firsts[i], e - self._firsts[i]))
                s = e
        return out

    def batch(self, ranges, bufs=None, by_block=False, names=None):
        """Materialize the samples in ranges: dict of tensor name -> array
        (only the tensors in names, when given): views of the maps where a
        tensor's samples lie in one piece. With bufs (a dict the caller
        keeps), every array is written into its buffers, grown as needed
        (copies, never views of the maps, which a remote window's units
        close): they are then valid until the next call with bufs."""
        pieces = self._pieces(ranges, by_block)

        def join(name, parts):
            if bufs is None:
                return np.concatenate(parts)
            shape = (sum(len(p) for p in parts),) + parts[0].shape[1:]
            return np.concatenate(parts, out=_buf(bufs, name, int(np.prod(shape)), parts[0].dtype).reshape(shape))

        out = {}
        for t in self.schema:
            name, shape = t["name"], tuple(t["shape"])
            if names is not None and name not in names:
                continue
            if t["kind"] == "offsets":
                parts, base = [np.zeros(1, dtype=np.int64)], 0
                for sh, lo, hi in pieces:
                    l0, l1 = self._level_range(sh, lo, hi, t["level"])
                    o = sh.array(name)
                    parts.append(o[l0 + 1:l1 + 1] - o[l0] + base)
                    base += int(o[l1] - o[l0])
                out[name] = join(name, parts)
                continue
            views = []
            for sh, lo, hi in pieces:
                a = sh.array(name)
                if t["kind"] == "values":
                    ot = self.by_name[t["offsets"]]
                    l0, l1 = self._level_range(sh, lo, hi, ot["level"])
                    o = sh.array(t["offsets"])
                    views.append(a[int(o[l0]):int(o[l1])])
                else:
                    l0, l1 = self._level_range(sh, lo, hi, t["level"])
                    per = int(np.prod(shape)) if shape else 1
                    views.append(a[l0 * per:l1 * per].reshape((l1 - l0,) + shape))
            if len(views) == 1 and bufs is None:
                out[name] = views[0]
            elif views:
                out[name] = join(name, views)
            else:
                out[name] = np.zeros((0,) + (shape if t["kind"] != "values" else ()), dtype=DTYPES[t["dtype"]])
        return out

    def window_plan(self, n):
        """relayout-order-v2's streams, global batch count and window size."""
        t = self.tensors_info
        N = t["totals"]["rows"]
        window = window_samples(self.window_bytes, t["totals"]["bytes"], N, n)
        streams, total = streams_of(N, t["order"]["block_samples"], self.selection, self.weights,
                                    self.seed, self.epoch, self.streams, n, self.piece_samples)
        return streams, total, window

    def batches(self, n, buffers=None):
        """Yield this reader's batches of n samples (queries when packed).
        buffers: a dict the caller keeps to reuse the window order's window
        arrays from one call to the next (an epoch's Dataset to the next
        one's) instead of fresh memory, whose pages cost a fault each on
        first touch. Batches are copies either way; use a dict for one
        iteration at a time."""
        try:
            n = operator.index(n)  # an int, or a NumPy integer
        except TypeError:
            raise ValueError(f"batch size {n!r}: want a positive integer") from None
        if n <= 0:
            raise ValueError(f"batch size {n!r}: want a positive integer")
        if self.order != "window":
            if self._remote is not None and self.tensors_info["totals"]["bytes"] > self._remote.limit:
                raise ValueError(f"cache {self._remote.dir}: the {self.order} order returns views of mapped shards, so a remote "
                                 f"output's {self.tensors_info['totals']['bytes']} tensor bytes must fit cache_bytes ({self._remote.limit}); "
                                 "use the window order or raise cache_bytes")
            self._pos = _NEVER
            for ranges in self.batch_ranges(n):
                b = self.batch(ranges)
                if self.index:
                    b["_index"] = np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in ranges]) if ranges else np.zeros(0, np.int64)
                yield b
            return
        streams, total, window = self.window_plan(n)
        plan = window_batches(streams, total, n, window, self.rank, self.world, self.worker, self.num_workers,
                              self.samples_seen, self.drop_last)
        wins, cur = {}, {}
        bufs = {} if buffers is None else buffers
        for s in {s for _, s, _, _, _ in plan}:
            wins[s] = stream_windows(streams[s], s, window, self.seed, self.epoch)
        fetch = self._plan_remote(plan, wins) if self._remote is not None else None
        try:
            for k, s, w, first, count in plan:
                if s not in cur or cur[s][0] != w:
                    pieces, perm = wins[s][w]
                    order = perm.order(n)
                    # Read the window's pieces in order, once; drop the last.
                    pos = _positions(pieces) if self.index else None
                    cur[s] = (w, self._read_window(pieces, order, fetch, bufs.setdefault(s, {})), pos, order)
                _, data, pos, order = cur[s]
                idx = order[first:first + count]
                b = self._gather(data, idx, first)
                if self.index:
                    b["_index"] = pos[idx]
                yield b
        finally:
            if fetch is not None:
                fetch["stop"] = True

    def _shards_of(self, pieces):
        import bisect
        out = []
        for s, e in pieces:
            i = bisect.bisect_right(self._ends, s)
            while i < len(self._firsts) and self._firsts[i] < e:
                if i not in out:
                    out.append(i)
                i += 1
        return sorted(out)

    def _by_block(self):
        """A remote output whose manifest gives every shard's header is read
        by block (the Go loader's blocks.go): the headers of the shards read,
        then only the blocks the windows draw from."""
        by = self.__dict__.get("_by_block_memo")
        if by is None:  # asked once per window: the shards are listed once
            shards = self.tensors_info["shards"]
            by = self._by_block_memo = self._remote is not None and bool(shards) and all(
                sh.get("header_bytes") and sh.get("header_xxhash64") for sh in shards)
        return by

    def _load_headers(self, idx):
        """Fetch, check and parse the headers of shards idx (8 at a time,
        each released once read)."""
        rc, shards = self._remote, self.tensors_info["shards"]
        todo = [i for i in idx if self._blocked[i] is None]

        def one(i):
            info = shards[i]
            obj = rc.header_obj(info)
            try:
                rc.ensure_all([obj], 0, True)
                with open(rc.path(obj), "rb") as f:
                    hb = f.read()
            finally:
                rc.unpin(obj)
            self._blocked[i] = self._parse_blocked(info, hb)
        if len(todo) <= 1:
            for i in todo:
                one(i)
            return
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(8) as ex:
            for f in [ex.submit(one, i) for i in todo]:
                f.result()

    def _parse_blocked(self, info, hb):
        where = f"{self._remote.url.split('?')[0].rstrip('/')}/{info['path']}"
        if len(hb) != info["header_bytes"] or len(hb) < 8 or 8 + struct.unpack_from("<Q", hb)[0] != len(hb):
            raise ValueError(f"{where}: header of {len(hb)} bytes, the manifest says {info['header_bytes']}")
        meta, tensors, data_start = read_header(hb, info["bytes"])
        for t in self.schema:
            if t["name"] not in tensors or tensors[t["name"]][0] != t["dtype"]:
                raise ValueError(f"{where}: tensor {t['name']} ({t['dtype']}) is missing or has another dtype")
        raw = (meta or {}).get("blocks")
        if raw is None:
            raise ValueError(f"{where}: the header has no block table, though the manifest gives its hash")
        table = json.loads(raw)
        rows, ranges, hashes = table.get("rows"), table.get("ranges"), table.get("xxhash64")
        n = len(rows) - 1 if rows else 0
        data_len = info["bytes"] - info["header_bytes"]
        if n < 1 or rows[0] != 0 or rows[-1] != info["rows"] or len(ranges) != n or len(hashes) != n:
            raise ValueError(f"{where}: block table does not cover the shard's {info['rows']} samples")
        for k in range(n):
            if rows[k + 1] <= rows[k] or len(ranges[k]) != 2 * len(self.schema):
                raise ValueError(f"{where}: block table: block {k} is malformed")
            for j, t in enumerate(self.schema):
                a, e = ranges[k][2 * j], ranges[k][2 * j + 1]
                _, _, b0, e0 = tensors[t["name"]]
                if e < a or (e > a and (a < b0 or e > e0)) or e > data_len:
                    raise ValueError(f"{where}: block table: block {k}'s range of {t['name']} is outside the tensor")
        return {"table": table, "data_start": data_start}

    def _block_at(self, i, s):
        """Block of shard i holding global sample s: (k, global first, end)."""
        import bisect
        rows = self._blocked[i]["table"]["rows"]
        r = s - self._firsts[i]
        k = bisect.bisect_right(rows, r) - 1
        return k, self._firsts[i] + rows[k], self._firsts[i] + rows[k + 1]

    def _whole(self, i):
        """Whether a dataset read by block reads shard i whole: a shard
        within one canonical block (every shard of --shard-blocks 1) is its
        header and that block, one request instead of two (Go: whole)."""
        b = self.tensors_info["order"]["block_samples"]
        first, rows = self._firsts[i], self._ends[i] - self._firsts[i]
        return b > 0 and rows > 0 and first // b == (first + rows - 1) // b

    def _units_of(self, pieces):
        """The units (shard, block; block -1: the whole shard) the pieces
        draw from, sorted."""
        if not self._by_block():
            return [(i, -1) for i in self._shards_of(pieces)]
        import bisect
        out = set()
        for start, end in pieces:
            s = start
            while s < end:
                i = bisect.bisect_right(self._ends, s)
                if i >= len(self._ends):
                    break
                if self._whole(i):
                    k, e = -1, self._ends[i]
                else:
                    k, _, e = self._block_at(i, s)
                out.add((i, k))
                s = min(e, end)
        return sorted(out)

    def _obj(self, u):
        info = self.tensors_info["shards"][u[0]]
        if u[1] < 0:
            return self._remote.shard_obj(info)
        b = self._blocked[u[0]]
        return self._remote.block_obj(info, b["table"], b["data_start"], u[1])

    def _block(self, i, k):
        """Block k of shard i, read from the cache (fetched again if a
        reader sharing the folder evicted it)."""
        blk = self._blocks.get((i, k))
        if blk is None:
            obj = self._obj((i, k))
            self._remote.ensure_all([obj], self._pos, True)
            blk = self._blocks[(i, k)] = _Block(self._remote.path(obj), obj["bytes"], self.schema,
                                                self._blocked[i]["table"]["ranges"][k], self._files)
        return blk

    def _plan_remote(self, plan, wins):
        """The windows in opening order and their units (blocks, or whole
        shards): the cache's uses, the up-front size check, and a prefetch
        thread."""
        import threading
        import time
        rc = self._remote
        order, seen = [], set()
        for _, s, w, _, _ in plan:
            if (s, w) not in seen:
                seen.add((s, w))
                order.append(wins[s][w][0])
        if self._by_block():
            need = sorted({i for pieces in order for i in self._shards_of(pieces) if not self._whole(i)})
            self._load_headers(need)
        order = [[self._obj(u) for u in self._units_of(pieces)] for pieces in order]
        # The window is read into memory whole, so its units are needed
        # only while it is read: one window's at a time.
        peak = max((sum(o["bytes"] for o in objs) for objs in order), default=0)
        if peak > rc.limit:
            what = "blocks" if self._by_block() else "shards"
            raise ValueError(f"cache {rc.dir}: {rc.limit} bytes (cache_bytes) cannot hold the {peak} bytes of {what} one window needs; raise cache_bytes or lower window_bytes")
        with rc.lock:
            for k, objs in enumerate(order):
                for o in objs:
                    rc.uses.setdefault(o["name"], []).append(k)
        fetch = {"order": order, "pos": 0, "stop": False}
        self._pos = 0

        def prefetch():
            for k, objs in enumerate(order):
                while k > fetch["pos"] + rc.ahead and not fetch["stop"]:
                    time.sleep(0.005)
                if fetch["stop"]:
                    return
                try:
                    rc.ensure_all(objs, k, False, stop=lambda: fetch["stop"])
                except Exception:
                    return  # the reader asks again and reports it
        threading.Thread(target=prefetch, daemon=True).start()
        return fetch

    def _level_range(self, sh, lo, hi, level):
        """Samples [lo, hi) of a shard or block as rows of a tensor at
        level: themselves, or their items (via query.item_offsets)."""
        if level != "item":
            return lo, hi
        io = sh.array("query.item_offsets")
        return int(io[lo]), int(io[hi])

    def _window_data(self, pieces, order, bufs, by_block=False):
        """A window's tensors (_Window). Those of fixed-size rows (one per
        sample, or per item of a packed output) are scattered into batch
        order: window position q goes to slot s where order[s] = q, and a
        query's items follow its slot's. Every piece's rows are read once,
        front to back, and stored to their slots, so each batch is one
        range of rows: one pass over the window instead of a join and then
        a gather of random rows. Lists (values and their offsets) are joined
        in window order and gathered per batch. All live in bufs, the
        stream's buffers from its last window: batches are copies, so
        nothing a caller holds points into them."""
        scat = [t for t in self.schema if t["kind"] not in ("offsets", "values")]
        rest = {t["name"] for t in self.schema if t["kind"] in ("offsets", "values")}
        w = _Window(self.batch(pieces, bufs, by_block, names=rest) if rest else {})
        w.item_lists = any(t["level"] == "item" for t in self.schema if t["name"] in rest)
        n = len(order)
        slot = _buf(bufs, ("_slot",), n, np.int64)
        slot[order] = np.arange(n, dtype=np.int64)
        dest = {"row": slot, "query": slot}
        if any(t["level"] == "item" for t in scat):
            io = w.data["query.item_offsets"]  # window order, from 0
            counts = np.diff(io)
            w.item_starts = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(counts[order], out=w.item_starts[1:])
            # Item i of window query q goes to item_starts[slot[q]] + i - io[q].
            dest["item"] = np.arange(io[-1], dtype=np.int64) + np.repeat(w.item_starts[slot] - io[:-1], counts)
        srcs = self._pieces(pieces, by_block)
        for t in scat:
            name, shape, d = t["name"], tuple(t["shape"]), dest[t["level"]]
            per = int(np.prod(shape)) if shape else 1
            out = _buf(bufs, ("_scatter", name), len(d) * per, DTYPES[t["dtype"]]).reshape((len(d),) + shape)
            dst, q = _rows(out), 0
            for sh, lo, hi in srcs:
                l0, l1 = self._level_range(sh, lo, hi, t["level"])
                stage = _buf(bufs, ("_stage",), (l1 - l0) * out.itemsize * per, np.uint8)
                src = _rows(sh.rows(name, l0 * per, l1 * per, stage).reshape((l1 - l0,) + shape))
                if shape:  # put moves a row as one item: indexing a void array is 2x slower
                    np.put(dst, d[q:q + l1 - l0], src)
                else:
                    dst[d[q:q + l1 - l0]] = src
                q += l1 - l0
            w.scattered[name] = (out, t["level"] == "item")
        return w

    def _read_window(self, pieces, order, fetch, bufs):
        """A window's data (_window_data): remote units are released
        after."""
        if fetch is None:
            return self._window_data(pieces, order, bufs)
        rc = self._remote
        k = fetch["pos"]
        self._pos = k
        objs = fetch["order"][k]
        with rc.lock:
            for o in objs:
                rc.pinned.add(o["name"])
                u = rc.uses.get(o["name"], [])
                while u and u[0] <= k:
                    u.pop(0)
        fetch["pos"] = k + 1
        rc.ensure_all(objs, k, True)
        w = self._window_data(pieces, order, bufs, by_block=self._by_block())  # copies: the maps go below
        for i, sd in enumerate(self._shards):
            if sd is not None:
                sd.close()
                self._shards[i] = None
        for blk in self._blocks.values():
            blk.close()
        self._blocks.clear()
        for o in objs:
            rc.unpin(o)
        return w

    def _gather(self, w, idx, first):
        """A window's batch: samples idx (window positions, ascending),
        places [first, first+len(idx)) of its order (copies)."""
        data, last = w.data, first + len(idx)
        rows = {"row": idx, "query": idx}
        if w.item_lists:
            rows["item"] = _expand(data["query.item_offsets"], idx)
        out, value_rows = {}, {}
        for t in self.schema:  # offsets first: values are cut by them
            if t["kind"] != "offsets":
                continue
            name, src = t["name"], data[t["name"]]
            if name == "query.item_offsets" and w.item_starts is not None:
                out[name] = w.item_starts[first:last + 1] - w.item_starts[first]
                continue
            r = rows[t["level"]]
            lens = src[r + 1] - src[r]
            offs = np.zeros(len(r) + 1, dtype=np.int64)
            np.cumsum(lens, out=offs[1:])
            out[name] = offs
            if name != "query.item_offsets":
                value_rows[name] = _expand(src, r)
        for t in self.schema:
            name = t["name"]
            if t["kind"] == "offsets":
                continue
            if name in w.scattered:
                a, item = w.scattered[name]
                lo, hi = (w.item_starts[first], w.item_starts[last]) if item else (first, last)
                out[name] = a[lo:hi].copy()
                continue
            r = value_rows[t["offsets"]] if t["kind"] == "values" else rows[t["level"]]
            # np.take copies a row of a 2-D array in one move; indexing
            # (a[r]) copies it element by element: 3.6x slower for the
            # rows of a (n, 16) float32 tensor.
            out[name] = np.take(data[name], r, axis=0)
        return {t["name"]: out[t["name"]] for t in self.schema}

    def state_dict(self, samples_seen):
        """What to store to resume this epoch after samples_seen samples."""
        return {"algorithm": ALGORITHM, "seed": self.seed, "epoch": self.epoch, "samples_seen": samples_seen}

    def close(self):
        for s in self._shards:
            if s is not None:
                s.close()  # a map whose views are still alive closes with them
        self._shards = [None] * len(self._shards)


def _torch_dataset():
    """TorchDataset, defined when first used: importing torch takes seconds
    and a few hundred MB, which a reader that never asks for it (NumPy,
    JAX, TensorFlow) should not pay."""
    import torch
    import torch.utils.data as _tud

    class TorchDataset(_tud.IterableDataset):
        """An IterableDataset of batches (dicts of torch tensors).

        Use it with DataLoader(ds, batch_size=None, num_workers=W): each
        worker reads its share; the DataLoader's round robin over workers
        restores the rank's batch order. rank/world default to
        torch.distributed's when it is initialized. Pass streams= (a multiple
        of world * every num_workers you use, e.g. world * 2) to make the
        order the same for num_workers 0, 1 and 2. bfloat16 tensors come as
        torch.bfloat16; uint16 ones as int32 (torch has no uint16)."""

        def __init__(self, manifest, batch_size, seed=0, epoch=0, rank=None, world=None, **kw):
            super().__init__()
            self.manifest, self.batch_size, self.seed, self.epoch = manifest, batch_size, seed, epoch
            if rank is None or world is None:
                # Read here, in the main process: DataLoader workers are
                # processes of their own, where torch.distributed is not set up.
                dist = torch.distributed
                if dist.is_available() and dist.is_initialized():
                    rank, world = dist.get_rank(), dist.get_world_size()
            self.rank, self.world, self.kw = rank, world, kw
            self._buffers = None  # window arrays kept from one epoch to the next

        def __getstate__(self):
            state = dict(self.__dict__)
            state["_buffers"] = None  # a worker makes its own
            state["_pool"] = None
            return state

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            import warnings
            rank, world = self.rank, self.world
            if rank is None or world is None:
                dist = torch.distributed
                if dist.is_available() and dist.is_initialized():
                    rank, world = dist.get_rank(), dist.get_world_size()
                else:
                    rank, world = 0, 1
            info = _tud.get_worker_info()
            worker, nw = (info.id, info.num_workers) if info is not None else (0, 1)
            ds = Dataset(self.manifest, rank=rank, world=world, worker=worker, num_workers=nw,
                         seed=self.seed, epoch=self.epoch, **self.kw)
            bf16 = {t["name"] for t in ds.schema if t["dtype"] == "BF16"}
            # The last epoch's window arrays (a persistent worker's, or this
            # process's), taken so that an iterator started meanwhile makes
            # its own.
            buffers, self._buffers = self._buffers or {}, None
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # read-only maps
                    for b in ds.batches(self.batch_size, buffers=buffers):
                        if info is not None:  # a worker: the batch crosses to the main process
                            if getattr(self, "_pool", None) is None:
                                self._pool = _ShmPool()
                            yield _packed(b, bf16, self._pool)
                            continue
                        out = {}
                        for k, v in b.items():
                            if k in bf16:  # NumPy holds bfloat16 as its bits
                                out[k] = torch.from_numpy(v.view(np.int16)).view(torch.bfloat16)
                            elif v.dtype == np.uint16:  # torch has no uint16: widened
                                out[k] = torch.from_numpy(v.astype(np.int32))
                            else:
                                out[k] = torch.from_numpy(v)
                        yield out
            finally:
                self._buffers = buffers

    class _Batch(dict):
        """A worker's batch: tensors that are views of one shared-memory
        buffer. It pickles (to the DataLoader's main process) as that buffer
        and the views' places, one shared storage a batch: torch shares a
        storage per tensor it pickles, a file descriptor each, and with six
        tensors a batch that cost 2 ms a batch against 0.6 ms for one
        (docs/benchmarks.md). The main process gets a plain dict. A pooled
        buffer (_ShmPool) also carries where its flag is, which the main
        process clears once it holds nothing of the buffer."""

        def __reduce__(self):
            base, layout = None, []
            for k, v in self.items():
                ref = getattr(v, "_relayout_base", None)
                if ref is None or (base is not None and ref[0] is not base):
                    return (dict, (dict(self),))
                base = ref[0]
                layout.append((k, v.dtype, tuple(v.shape), ref[1], v.numel() * v.element_size()))
            flag = getattr(base, "_relayout_flag", -1)  # the batch dict may be a copy (default_convert)
            return (_rebuild_batch, (base, layout, flag))

    def _shared_bytes(n):
        """An uninitialized uint8 tensor of n bytes in shared memory, so that
        pickling it to the main process passes it without a copy."""
        try:
            return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(n))
        except (AttributeError, RuntimeError, TypeError):
            return torch.empty(n, dtype=torch.uint8)

    class _ShmPool:
        """A worker's shared-memory batch buffers, reused once the main
        process has let go of them. A fresh buffer a batch costs a page fault
        per 4 KiB page in the worker that fills it (on the bench VM, 0.29 s of
        an epoch's 0.39 s in a worker, docs/benchmarks.md). A pooled buffer
        ends in a flag (8 bytes, after its batch): the worker sets it to 1
        when it sends the buffer, and the main process (_rebuild_batch) sets
        it back to 0 once no tensor there shares the batch's storage any
        more (a weak reference to it, checked whenever a batch arrives). A
        buffer whose flag is still 1 is never written. Past SLOTS buffers
        (what the DataLoader's prefetch, the batch the caller holds and the
        check's lag of a batch or two need), batches get fresh unpooled
        ones, so a worker keeps at most SLOTS batches of shared memory
        (/dev/shm) when idle. The flag travels inside the buffer, not as a
        storage of its own: a second storage a batch cost 0.05-0.07 s an
        epoch of 245 batches."""
        SLOTS = 8

        def __init__(self):
            self.bufs = []  # (buffer, its flag as a one-element int64 array)

        def take(self, n):
            """A buffer with room for n bytes: a free pooled one, a new
            pooled one, or past SLOTS in use a fresh unpooled one. A pooled
            buffer's _relayout_flag is where its flag is (set when made)."""
            free = [(b, f) for b, f in self.bufs if f[0] == 0]
            fit = [(b, f) for b, f in free if b.numel() - 64 >= n]
            if fit:
                buf, flag = min(fit, key=lambda bf: bf[0].numel())
            elif len(self.bufs) < self.SLOTS or free:
                if len(self.bufs) >= self.SLOTS:  # the smallest free one makes room
                    gone = min(free, key=lambda bf: bf[0].numel())[0]
                    self.bufs = [(b, f) for b, f in self.bufs if b is not gone]
                # Room for batches a little larger (packed batches vary in items).
                buf = _shared_bytes(((max(n + n // 8, 64) + 63) & ~63) + 64)
                buf._relayout_flag = buf.numel() - 8
                flag = buf.numpy()[-8:].view(np.int64)
                self.bufs.append((buf, flag))
            else:
                return _shared_bytes(max(n, 1))
            flag[0] = 1
            return buf

    def _packed(b, bf16, pool=None):
        """Batch b (NumPy arrays) as a _Batch: its arrays copied into one
        shared buffer (from pool when given), each at a 64-byte aligned
        place."""
        conv = {}
        for k, v in b.items():
            if v.dtype == np.uint16 and k not in bf16:  # torch has no uint16: widened
                v = v.astype(np.int32)
            conv[k] = np.ascontiguousarray(v)
        places, n = [], 0
        for v in conv.values():
            places.append(n)
            n += (v.nbytes + 63) & ~63
        base = pool.take(max(n, 1)) if pool is not None else _shared_bytes(max(n, 1))
        raw = base.numpy()
        out = _Batch()
        for (k, v), o in zip(conv.items(), places):
            np.copyto(raw[o:o + v.nbytes].view(v.dtype).reshape(v.shape), v)
            t = base[o:o + v.nbytes].view(torch.int16 if k in bf16 else torch.from_numpy(v[:0].reshape(-1)).dtype).view(v.shape)
            if k in bf16:
                t = t.view(torch.bfloat16)
            t._relayout_base = (base, o)
            out[k] = t
        return out

    TorchDataset.__qualname__ = "TorchDataset"  # pickled by name (DataLoader workers, spawn)
    return TorchDataset


def _rebuild_batch(base, layout, flag=-1):
    """A worker's batch in the main process: its tensors as views of the one
    buffer it was pickled as (TorchDataset). A pooled buffer (its flag at
    byte flag) is watched until nothing here shares the batch's storage,
    then handed back; the buffer itself stays mapped here (_anchors), so
    that when the worker sends it again torch finds it mapped already, not
    a fresh map whose pages cost a fault each when the batch is read."""
    if flag < 0:
        return {k: base[o:o + n].view(dtype).view(shape) for k, dtype, shape, o, n in layout}
    # The views share a storage of their own over the buffer's memory
    # (from_numpy), whose weak reference says when the caller let go,
    # while the anchor keeps the buffer's own storage, and its map, alive.
    import torch  # imported already: base is a tensor
    raw = base.numpy()
    proxy = torch.from_numpy(raw[:flag])
    out = {k: proxy[o:o + n].view(dtype).view(shape) for k, dtype, shape, o, n in layout}
    _return_lent(base, raw[flag:flag + 8].view(np.int64), proxy)
    return out


_lent = []  # (weak reference to a pooled buffer's batch storage, the buffer's flag)
_anchors = {}  # buffer address -> (buffer, flag): pooled buffers kept mapped, oldest first
_ANCHOR_BYTES = 128 << 20  # released buffers past this are let go, oldest first
_lent_lock = threading.Lock()  # a pin-memory thread rebuilds batches too


@atexit.register
def _drop_lent():
    """Let the weak references and buffers go before torch's modules are
    torn down at exit (their finalizers need them)."""
    with _lent_lock:
        _lent.clear()
        _anchors.clear()


def _return_lent(base, flag, proxy):
    """Clear the flags of pooled buffers nothing in this process shares any
    more, watch proxy's storage (the batch just rebuilt from base), and keep
    base mapped."""
    from torch.multiprocessing.reductions import StorageWeakRef
    with _lent_lock:
        keep = []
        for ref, f in _lent:
            if ref.expired():
                f[0] = 0
            else:
                keep.append((ref, f))
        st = proxy.untyped_storage() if hasattr(proxy, "untyped_storage") else proxy.storage()
        keep.append((StorageWeakRef(st), flag))
        _lent[:] = keep
        key = base.data_ptr()
        _anchors.pop(key, None)
        _anchors[key] = (base, flag)  # newest last
        total = sum(b.numel() for b, _ in _anchors.values())
        for k in list(_anchors):
            if total <= _ANCHOR_BYTES:
                break
            b, f = _anchors[k]
            if k != key and f[0] == 0:  # released: only a map is lost
                total -= b.numel()
                del _anchors[k]


def __getattr__(name):
    if name == "TorchDataset":
        try:
            cls = _torch_dataset()
        except ImportError as e:
            raise ImportError("relayout_loader.TorchDataset needs torch (Debian: python3-torch; or pip install torch)") from e
        globals()["TorchDataset"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if importlib.util.find_spec("torch") is not None:
    __all__.append("TorchDataset")
