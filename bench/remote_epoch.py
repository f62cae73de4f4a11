"""The Python reader's epoch from object storage, for `make bench`
(BENCH_ONLY=remote): one window-order epoch (batches of 512, seed 1) from a
local output and from its copy at an S3 URL, through a fresh cache folder
each time, REPS times alternating; prints the medians and the last remote
epoch's stats as JSON.

    remote_epoch.py LOCAL URL CACHE_PARENT CACHE_BYTES WINDOW_BYTES REPS"""
import json
import shutil
import statistics
import sys
import tempfile
import time

import relayout_loader as rl

local, url, parent = sys.argv[1], sys.argv[2], sys.argv[3]
cache, window, reps = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=1, epoch=0, window_bytes=window, **kw)
    t0 = time.perf_counter()
    n = sum(1 for _ in ds.batches(512))
    return time.perf_counter() - t0, n, ds


loc, rem = [], []
for _ in range(reps):
    loc.append(epoch(local)[0])
    d = tempfile.mkdtemp(dir=parent, prefix="pycache-")
    try:
        t, n, ds = epoch(url, cache_dir=d, cache_bytes=cache)
    finally:
        shutil.rmtree(d)
    rem.append(t)
print(json.dumps({"local": statistics.median(loc), "s3": statistics.median(rem), "batches": n, "stats": dict(ds._remote.stats)}))
