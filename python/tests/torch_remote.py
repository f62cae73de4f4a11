"""The PyTorch wrapper on a remote output (boto3 against the Go test's
loopback S3 server, or azure-storage-blob against its Azurite): a
DataLoader over TorchDataset(URL) with 0 and 2
workers, all sharing one cache folder, yields the same batches, byte for
byte and in order, as over the output on local disk; the workers (forked
after the main process has read the output through the same folder)
download with their own clients; the folder never exceeds cache_bytes
(sampled through the epochs). Prints a JSON summary.

    torch_remote.py LOCAL_OUTPUT URL CACHE_DIR CACHE_BYTES"""
import json
import sys

import torch
from torch.utils.data import DataLoader

import relayout_loader as rl
from cache_folder import PeakSampler

local, url, cache_dir, cache_bytes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
KW = dict(seed=7, epoch=1, index=True, streams=2, window_bytes=32 << 10)


def batches(path, workers, **kw):
    ds = rl.TorchDataset(path, 50, **KW, **kw)
    out = []
    for b in DataLoader(ds, batch_size=None, num_workers=workers):
        out.append({k: v.clone() for k, v in b.items()})
    return out


def same(a, b):
    return len(a) == len(b) and all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b))


want = batches(local, 0)
res = {"batches": len(want)}
with PeakSampler(cache_dir) as sampled:
    for workers in (0, 2):  # the main process reads first, then forked workers
        got = batches(url, workers, cache_dir=cache_dir, cache_bytes=cache_bytes)
        if not want or not same(got, want):
            sys.exit(f"{workers} workers: {len(got)} batches from {url} differ from the {len(want)} local ones")
        res[f"workers_{workers}"] = len(got)
if sampled.peak > cache_bytes:
    sys.exit(f"the cache folder reached {sampled.peak} bytes, cache_bytes is {cache_bytes}")
res["peak_bytes"], res["cache_bytes"] = sampled.peak, cache_bytes
print(json.dumps(res))
