"""NumPy loader throughput: every batch of a relayout output, copied into a
staging buffer (as a loader hands batches to pinned memory), against plain
copies of the same tensor bytes. usage: numpy_loader.py OUTPUT [BATCH] [REPS]
Prints JSON.

Epochs, each a fresh Dataset (as TorchDataset makes one an epoch):
- window: the window order, window arrays in fresh memory (a first epoch);
- window_reuse: the same with the window arrays kept from the last epoch
  (batches(buffers=)), as TorchDataset keeps them in a persistent worker;
- block: the block order (v1), views of the maps, copied out.
Plain copies of the shards' tensor bytes into one staging buffer:
- copy_map: from fresh maps of the shards (each page's first touch);
- copy_pread: read from the files with pread;
- copy_memory: from arrays already in memory (a memcpy, what the Go bench
  calls a plain copy); the ratios are against this one.
RELAYOUT_TUNE_MALLOC=1 calls relayout_loader.tune_malloc() first."""
import json
import os
import statistics
import sys
import time

import numpy as np

import relayout_loader as rl


def loader_pass(out, batch, order="window", buffers=None):
    ds = rl.Dataset(out, seed=1, epoch=0, shuffle=order)
    stage = {}
    total = 0
    t = time.perf_counter()
    it = ds.batches(batch, buffers=buffers) if order == "window" else ds.batches(batch)
    for b in it:
        for name, a in b.items():
            buf = stage.get(name)
            if buf is None or buf.nbytes < a.nbytes:
                buf = stage[name] = np.empty(max(a.nbytes, 1), dtype=np.uint8)
            flat = a.reshape(-1).view(np.uint8)
            np.copyto(buf[:flat.nbytes], flat)
            total += flat.nbytes
    dt = time.perf_counter() - t
    ds.close()
    return dt, total


def _ranges(out):
    """(path, offset, bytes) of every tensor of every shard."""
    ds = rl.Dataset(out)
    rs = []
    for i in range(len(ds.tensors_info["shards"])):
        sh = ds._shard(i)
        for _, (_, _, begin, end) in sh.tensors.items():
            rs.append((sh.path, sh.data_start + begin, end - begin))
    ds.close()
    return rs


def copy_map(out, buf):
    ds = rl.Dataset(out)
    arrays = []
    for i in range(len(ds.tensors_info["shards"])):
        sh = ds._shard(i)
        for name in sh.tensors:
            arrays.append(sh.array(name).view(np.uint8))
    total = 0
    t = time.perf_counter()
    for a in arrays:
        np.copyto(buf[:a.nbytes], a)
        total += a.nbytes
    dt = time.perf_counter() - t
    arrays.clear()
    ds.close()
    return dt, total


def copy_pread(ranges, buf):
    files = {p: open(p, "rb") for p in {r[0] for r in ranges}}
    total = 0
    t = time.perf_counter()
    for p, off, n in ranges:
        rl._pread_into(files[p].fileno(), buf[:n], off, p)
        total += n
    dt = time.perf_counter() - t
    for f in files.values():
        f.close()
    return dt, total


def copy_memory(src, buf):
    total = 0
    t = time.perf_counter()
    for a in src:
        np.copyto(buf[:a.nbytes], a)
        total += a.nbytes
    return time.perf_counter() - t, total


def main():
    out = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    if os.environ.get("RELAYOUT_TUNE_MALLOC") == "1":
        rl.tune_malloc()
    ranges = _ranges(out)
    buf = np.ones(max(n for _, _, n in ranges), dtype=np.uint8)  # faulted in
    mem = []
    for p, off, n in ranges:
        a = np.empty(n, dtype=np.uint8)
        with open(p, "rb") as f:
            rl._pread_into(f.fileno(), a, off, p)
        mem.append(a)
    bufs = {}
    loader_pass(out, batch)  # warm the page cache
    loader_pass(out, batch, buffers=bufs)
    t = {k: [] for k in ("window", "window_reuse", "block", "copy_map", "copy_pread", "copy_memory")}
    lb = pb = 0
    for _ in range(reps):
        dt, lb = loader_pass(out, batch)
        t["window"].append(dt)
        t["window_reuse"].append(loader_pass(out, batch, buffers=bufs)[0])
        t["block"].append(loader_pass(out, batch, "block")[0])
        dt, pb = copy_map(out, buf)
        t["copy_map"].append(dt)
        t["copy_pread"].append(copy_pread(ranges, buf)[0])
        t["copy_memory"].append(copy_memory(mem, buf)[0])
    med = {k: statistics.median(v) for k, v in t.items()}
    res = {"batch": batch, "loader_bytes": lb, "copy_bytes": pb}
    for k, s in med.items():
        res[k + "_seconds"] = s
        res[k + "_gbps"] = (lb if not k.startswith("copy") else pb) / s / 1e9
    for k in ("window", "window_reuse", "block", "copy_map", "copy_pread"):
        res["ratio_" + k] = res[k + "_gbps"] / res["copy_memory_gbps"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
