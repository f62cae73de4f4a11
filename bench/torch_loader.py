"""PyTorch DataLoader throughput over TorchDataset: one epoch of window-order
batches with num_workers 0 and 2 (persistent workers), every tensor copied
into a staging buffer in the main process (as a loader hands batches to
pinned memory or the device: the bytes are read there, not only counted).
usage: torch_loader.py OUTPUT [BATCH] [REPS]
Prints JSON: per worker count, the median epoch seconds and GB/s."""
import json
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader

import relayout_loader as rl


def epochs(out, batch, workers, reps):
    ds = rl.TorchDataset(out, batch, seed=1, rank=0, world=1, streams=2)
    dl = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=workers > 0)
    times, total = [], 0
    stage = torch.ones(1 << 20, dtype=torch.uint8)
    for _ in range(reps + 1):  # the first epoch starts the workers
        t = time.perf_counter()
        total = 0
        for b in dl:
            for v in b.values():
                n = v.numel() * v.element_size()
                if n > stage.numel():
                    stage = torch.ones(n, dtype=torch.uint8)
                stage[:n].copy_(v.reshape(-1).view(torch.uint8))
                total += n
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:]), total


def main():
    out = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    res = {"batch": batch, "torch": torch.__version__}
    for w in (0, 2):
        s, n = epochs(out, batch, w, reps)
        res[f"workers_{w}"] = {"seconds": s, "bytes": n, "gbps": n / s / 1e9}
    print(json.dumps(res))


if __name__ == "__main__":
    main()
