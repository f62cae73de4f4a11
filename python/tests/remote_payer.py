"""The NumPy loader on a requester-pays bucket (the Go test's loopback S3
server refuses every request that does not say the requester pays): with
requester_pays=true in the URL, an epoch equals the local output's, batch
for batch; without it, opening or reading fails with the store's 403.

    remote_payer.py LOCAL_OUTPUT URL_WITH URL_WITHOUT CACHE_DIR"""
import sys
import tempfile

import xxhash

import relayout_loader as rl

local, with_url, without_url, cache_dir = sys.argv[1:5]


def epoch(path, **kw):
    ds = rl.Dataset(path, seed=3, epoch=0, window_bytes=64 << 10, **kw)
    return [";".join(f"{k}:{xxhash.xxh64(v.tobytes()).hexdigest()}" for k, v in sorted(b.items())) for b in ds.batches(100)]


want = epoch(local)
got = epoch(with_url, cache_dir=tempfile.mkdtemp(dir=cache_dir))
if got != want or not got:
    sys.exit(f"requester_pays=true: {len(got)} batches differ from the {len(want)} local ones")
try:
    epoch(without_url, cache_dir=tempfile.mkdtemp(dir=cache_dir))
except Exception as e:  # the store's refusal, whichever call meets it first
    if "403" not in str(e) and "AccessDenied" not in str(e) and "Forbidden" not in str(e):
        sys.exit(f"without requester_pays: {type(e).__name__}: {e} (want the store's 403)")
else:
    sys.exit("without requester_pays: the epoch was read from a requester-pays bucket")
print(f"ok: {len(got)} batches")
