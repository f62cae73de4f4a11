"""NumPy loader throughput: every batch of a relayout output, copied into a
staging buffer (as a loader hands batches to pinned memory), against a plain
copy of the same tensor bytes. usage: numpy_loader.py OUTPUT [BATCH] [REPS]
Prints JSON."""
import json
import statistics
import sys
import time

import numpy as np

import relayout_loader as rl


def loader_pass(out, batch, order="window"):
    ds = rl.Dataset(out, seed=1, epoch=0, shuffle=order)
    stage = {}
    total = 0
    t = time.perf_counter()
    for b in ds.batches(batch):
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


def plain_copy(out):
    ds = rl.Dataset(out)
    arrays = []
    for i in range(len(ds.tensors_info["shards"])):
        sh = ds._shard(i)
        for name in sh.tensors:
            arrays.append(sh.array(name).view(np.uint8))
    buf = np.empty(max(a.nbytes for a in arrays), dtype=np.uint8)
    total = 0
    t = time.perf_counter()
    for a in arrays:
        np.copyto(buf[:a.nbytes], a)
        total += a.nbytes
    return time.perf_counter() - t, total


def main():
    out = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    loader_pass(out, batch)  # warm the page cache
    lt, bt, lb, pt, pb = [], [], 0, [], 0
    for _ in range(reps):
        dt, lb = loader_pass(out, batch)
        lt.append(dt)
        dt, _ = loader_pass(out, batch, "block")
        bt.append(dt)
        dt, pb = plain_copy(out)
        pt.append(dt)
    l, b, p = statistics.median(lt), statistics.median(bt), statistics.median(pt)
    print(json.dumps({"batch": batch, "loader_seconds": l, "loader_bytes": lb, "loader_gbps": lb / l / 1e9,
                      "block_seconds": b, "block_gbps": lb / b / 1e9,
                      "copy_seconds": p, "copy_bytes": pb, "copy_gbps": pb / p / 1e9,
                      "ratio": (lb / l) / (pb / p), "ratio_block": (lb / b) / (pb / p)}))


if __name__ == "__main__":
    main()
