"""The NumPy loader on a remote output written with a shard per block
(--shard-blocks 1): one epoch (window order, one reader, a cache of a
quarter of the tensors) equals the local output's batches, byte for byte
and in order; the Go test counts the requests the server saw (one per
shard: no header fetched apart). Prints a JSON summary.

    remote_blocks.py LOCAL_OUTPUT S3_URL CACHE_DIR CACHE_BYTES"""
import json
import sys

import xxhash

import relayout_loader as rl

local, url, cache_dir, cache_bytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=5, epoch=0, index=True, window_bytes=16 << 10, **kw)
    out = [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(50)]
    return out, ds


want, _ = epoch(local)
got, ds = epoch(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
if not got or got != want:
    sys.exit(f"{len(got)} batches from S3 differ from the {len(want)} local ones")
print(json.dumps({"batches": len(got), "stats": dict(ds._remote.stats)}))
