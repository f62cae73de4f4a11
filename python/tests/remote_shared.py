"""One rank of a remote epoch, read through a cache folder another process
(the Go test's reader) may use at the same time: its batches must equal the
same rank's batches from the local output. Prints a JSON summary. (Alone,
rank 0 of 1, it is the Python side of TestRemoteShardPerBlock, which counts
its requests.)

    remote_shared.py LOCAL_OUTPUT S3_URL CACHE_DIR CACHE_BYTES RANK WORLD"""
import json
import sys

import xxhash

import relayout_loader as rl

local, url, cache_dir, cache_bytes, rank, world = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=5, epoch=0, index=True, rank=rank, world=world, window_bytes=32 << 10, **kw)
    out = [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(100)]
    return out, ds


want, _ = epoch(local)
got, ds = epoch(url, cache_dir=cache_dir, cache_bytes=cache_bytes)
if not got or got != want:
    sys.exit(f"rank {rank}: {len(got)} batches through the shared cache differ from the {len(want)} local ones")
print(json.dumps({"batches": len(got), "by_block": ds._by_block(), "stats": dict(ds._remote.stats)}))
