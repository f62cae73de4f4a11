"""The NumPy loader against a slow store (the Go test's loopback S3 server
answering every request after 20 ms): one epoch from S3 equals the local
one, batch for batch. Then two more epochs, each a new Dataset with an
empty cache folder (as TorchDataset makes a Dataset every epoch), which
download everything again on the first one's client and connections.
Prints a JSON summary with the first epoch's seconds; the Go test
(TestRemoteRequestsInFlight) counts the requests in flight and the
connections opened on the server.

    remote_inflight.py LOCAL_OUTPUT S3_URL CACHE_DIR [MAX_REQUESTS]"""
import json
import os
import sys
import time

import xxhash

import relayout_loader as rl

local, url, cache_dir = sys.argv[1], sys.argv[2], sys.argv[3]
extra = {"max_requests": int(sys.argv[4])} if len(sys.argv) > 4 else {}


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=9, window_bytes=1 << 20, **kw)
    return [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(100)]


want = epoch(local)
t0 = time.monotonic()
got = epoch(url, cache_dir=cache_dir, **extra)
seconds = time.monotonic() - t0
if got != want or not got:
    sys.exit(f"{len(got)} batches from the slow store differ from the {len(want)} local ones")
for i in (2, 3):
    again = os.path.join(cache_dir, f"epoch{i}")
    if epoch(url, cache_dir=again, **extra) != want:
        sys.exit(f"epoch {i}, a new Dataset: batches differ from the local ones")
print(json.dumps({"batches": len(got), "seconds": round(seconds, 3)}))
