"""GPU feed benchmark: does the re-laid data keep the GPU busy where the
Parquet path starves it? Trains a small DLRM-style model (embeddings over
hashed categorical ids, an MLP over the dense features, BCE on the click
label) for a fixed number of steps of 4096 rows, fed three ways in one run:

  parquet  the source Parquet read with pyarrow (iter_batches, row groups
           split over DataLoader workers as Petastorm's batch reader does),
           converted to NumPy/torch per batch;
  flat     the flat output's tensor shards through relayout_loader
           (pinned memory, non-blocking copies);
  packed   the packed output's shards: query features once per query,
           expanded to items on the GPU from query.item_offsets.

For each: samples/s, GPU utilization sampled with NVML every 100 ms, time the
training loop waited for data, host-to-device bytes per epoch. Prints one
table and writes JSON. Runs on CPU too (a smoke test): paths whose packages
are missing (pyarrow, NVML) are skipped or not measured, with a message.

usage: gpu_feed.py --source DIR --flat OUT --packed OUT [--steps N] [--workers W] [--json PATH]
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import threading
import time

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as tud

import relayout_loader as rl

BUCKETS = 1000
ID_BUCKETS = 100_003
CATS = ["country", "device", "os", "item_category"]
FEATS = [f"user_f{i}" for i in range(8)] + [f"item_f{i}" for i in range(8)]


class DLRM(nn.Module):
    """Embeddings for 4 categorical features and 2 hashed ids, an MLP over
    16 dense features, a top MLP over their concatenation."""

    def __init__(self, dim=64, width=1024, layers=3):
        super().__init__()
        self.cat = nn.ModuleList([nn.Embedding(BUCKETS, dim) for _ in CATS])
        self.ids = nn.ModuleList([nn.Embedding(ID_BUCKETS, dim) for _ in range(2)])
        self.bottom = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, dim), nn.ReLU())
        top = [nn.Linear(dim * 7, width), nn.ReLU()]
        for _ in range(layers - 1):
            top += [nn.Linear(width, width), nn.ReLU()]
        self.top = nn.Sequential(*top, nn.Linear(width, 1))

    def forward(self, dense, cats, ids):
        x = [self.bottom(dense)] + [e(c) for e, c in zip(self.cat, cats)] + [e(i) for e, i in zip(self.ids, ids)]
        return self.top(torch.cat(x, dim=1)).squeeze(1)


# --- the Parquet path ----------------------------------------------------------------

class ParquetBatches(tud.IterableDataset):
    """pyarrow iter_batches over the source files; each worker takes every
    num_workers-th row group (Petastorm's split), converts each batch."""

    def __init__(self, files, batch):
        super().__init__()
        self.files, self.batch = files, batch

    def __iter__(self):
        import pyarrow.parquet as pq
        info = tud.get_worker_info()
        w, nw = (info.id, info.num_workers) if info else (0, 1)
        cols = FEATS + CATS + ["user_id", "item_id", "click"]
        k = 0
        while True:  # epochs until the consumer stops
            for f in self.files:
                pf = pq.ParquetFile(f)
                for rg in range(pf.num_row_groups):
                    k += 1
                    if k % nw != w:
                        continue
                    for b in pf.iter_batches(batch_size=self.batch, row_groups=[rg], columns=cols):
                        dense = np.stack([b.column(c).to_numpy() for c in FEATS], axis=1).astype(np.float32)
                        # Categorical strings to ids: dictionary indices (the
                        # cheapest conversion pyarrow offers).
                        cats = [b.column(c).dictionary_encode().indices.to_numpy().astype(np.int64) for c in CATS]
                        click = b.column("click").fill_null(0).to_numpy().astype(np.float32)
                        yield {"dense": torch.from_numpy(dense),
                               "cats": [torch.from_numpy(c) for c in cats],
                               "ids": [torch.from_numpy(b.column(c).to_numpy() % ID_BUCKETS) for c in ("user_id", "item_id")],
                               "label": torch.from_numpy(click)}


# --- the relayout paths --------------------------------------------------------------

class ShardBatches(tud.IterableDataset):
    """relayout_loader batches, epoch after epoch (each worker its share)."""

    def __init__(self, out, batch, packed):
        super().__init__()
        self.out, self.batch, self.packed = out, batch, packed

    def __iter__(self):
        info = tud.get_worker_info()
        w, nw = (info.id, info.num_workers) if info else (0, 1)
        epoch = 0
        import warnings
        warnings.simplefilter("ignore", UserWarning)  # read-only maps
        while True:
            ds = rl.Dataset(self.out, worker=w, num_workers=nw, seed=1, epoch=epoch)
            for b in ds.batches(self.batch):
                yield {k: torch.from_numpy(v) for k, v in b.items()}
            epoch += 1


def flat_inputs(b, dev):
    g = lambda k: b[k].to(dev, non_blocking=True)
    dense = g("dense")
    cats = [g(c) for c in CATS]
    ids = [g("user_id") % ID_BUCKETS, g("item_id") % ID_BUCKETS]
    return dense, cats, ids, g("click").float()


def packed_inputs(b, dev):
    g = lambda k: b[k].to(dev, non_blocking=True)
    offs = g("query.item_offsets")
    counts = offs[1:] - offs[:-1]
    q = lambda x: torch.repeat_interleave(x, counts, dim=0)  # query -> items, on the GPU
    dense = torch.cat([q(g("query.dense_user")), g("item.dense_item")], dim=1)
    cats = [q(g("query.country")), q(g("query.device")), q(g("query.os")), g("item.item_category")]
    ids = [q(g("query.user_id")) % ID_BUCKETS, g("item.item_id") % ID_BUCKETS]
    return dense, cats, ids, g("item.click").float()


def batch_bytes(b):
    if isinstance(b, dict):
        return sum(batch_bytes(v) for v in b.values())
    if isinstance(b, list):
        return sum(batch_bytes(v) for v in b)
    return b.numel() * b.element_size()


# --- measurement ------------------------------------------------------------------------

class NVMLSampler:
    def __init__(self, dev):
        self.samples, self.ok, self.stop = [], False, threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            idx = dev.index or 0
            self.h = pynvml.nvmlDeviceGetHandleByIndex(idx)
            self.nvml = pynvml
            self.ok = True
        except Exception as e:  # no NVML on CPU machines
            self.why = str(e)

    def __enter__(self):
        if self.ok:
            self.t = threading.Thread(target=self.run, daemon=True)
            self.t.start()
        return self

    def run(self):
        while not self.stop.wait(0.1):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.h).gpu)

    def __exit__(self, *a):
        self.stop.set()

    def mean(self):
        return statistics.fmean(self.samples) if self.samples else None


def train(name, loader, inputs, steps, warmup, dev, args):
    torch.manual_seed(0)
    model = DLRM(width=args.width, layers=args.layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lossf = nn.BCEWithLogitsLoss()
    it = iter(loader)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    amp = dev.type == "cuda"
    wait = 0.0
    samples = 0
    h2d = 0
    with NVMLSampler(dev) as nv:
        for step in range(warmup + steps):
            if step == warmup:
                sync()
                nv.samples.clear()
                t0 = time.perf_counter()
                wait, samples, h2d = 0.0, 0, 0
            tw = time.perf_counter()
            b = next(it)
            wait += time.perf_counter() - tw
            h2d += batch_bytes(b)
            dense, cats, ids, label = inputs(b, dev)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
                loss = lossf(model(dense, cats, ids).float(), label)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            samples += label.shape[0]
        sync()
        dt = time.perf_counter() - t0
    return {"path": name, "steps": steps, "samples": samples, "seconds": dt, "samples_per_s": samples / dt,
            "gpu_util_mean": nv.mean(), "gpu_util_samples": len(nv.samples), "data_wait_s": wait,
            "data_wait_frac": wait / dt, "h2d_bytes_per_sample": h2d / max(samples, 1), "loss": float(loss)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--flat", required=True)
    ap.add_argument("--packed")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = torch.device(args.device)
    pin = dev.type == "cuda"
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if pin else 'cpu'}), torch {torch.__version__}, "
          f"{args.steps} steps of {args.batch} rows, {args.workers} workers", flush=True)

    # The shards open with the safetensors package too, where it is installed.
    try:
        from safetensors import safe_open
        shard = os.path.join(args.flat, rl.Dataset(args.flat).tensors_info["shards"][0]["path"])
        with safe_open(shard, framework="np") as f:
            names = list(f.keys())
            f.get_tensor(names[0])
        print(f"safetensors {__import__('safetensors').__version__} opens {shard}: {len(names)} tensors")
    except ImportError:
        print("safetensors package not installed: shard check skipped")

    results = []
    files = sorted(os.path.join(args.source, f) for f in os.listdir(args.source) if f.endswith(".parquet"))
    mk = lambda ds: tud.DataLoader(ds, batch_size=None, num_workers=args.workers, pin_memory=pin,
                                   persistent_workers=args.workers > 0, prefetch_factor=4 if args.workers > 0 else None)
    if importlib.util.find_spec("pyarrow") is not None:
        results.append(train("parquet (pyarrow)", mk(ParquetBatches(files, args.batch)), flat_inputs_parquet, args.steps, args.warmup, dev, args))
    else:
        print("pyarrow not installed: the Parquet path is skipped (it runs where pyarrow is, e.g. the GPU machine)")
    results.append(train("relayout flat", mk(ShardBatches(args.flat, args.batch, False)), flat_inputs, args.steps, args.warmup, dev, args))
    if args.packed:
        info = rl.Dataset(args.packed).tensors_info
        qb = max(1, round(args.batch * info["totals"]["rows"] / info["totals"]["items"]))  # ~batch items per step
        results.append(train("relayout packed", mk(ShardBatches(args.packed, qb, True)), packed_inputs, args.steps, args.warmup, dev, args))

    rows = rl.Dataset(args.flat).tensors_info["totals"]["rows"]
    print(f"\n{'path':20s} {'samples/s':>12s} {'GPU util %':>10s} {'data wait':>10s} {'H2D MB/epoch':>13s}")
    for r in results:
        r["h2d_bytes_per_epoch"] = r["h2d_bytes_per_sample"] * rows
        util = f"{r['gpu_util_mean']:.1f}" if r["gpu_util_mean"] is not None else "n/a"
        print(f"{r['path']:20s} {r['samples_per_s']:12.0f} {util:>10s} {100 * r['data_wait_frac']:9.1f}% {r['h2d_bytes_per_epoch'] / 1e6:13.1f}")
    by = {r["path"]: r for r in results}
    summary = {}
    if "parquet (pyarrow)" in by:
        summary["samples_per_s_ratio_flat_vs_parquet"] = by["relayout flat"]["samples_per_s"] / by["parquet (pyarrow)"]["samples_per_s"]
        print(f"relayout flat / parquet samples/s: {summary['samples_per_s_ratio_flat_vs_parquet']:.2f}x")
    if "relayout packed" in by:
        summary["h2d_packed_vs_flat"] = by["relayout packed"]["h2d_bytes_per_epoch"] / by["relayout flat"]["h2d_bytes_per_epoch"]
        print(f"host-to-device bytes per epoch, packed / flat: {summary['h2d_packed_vs_flat']:.3f}")
    if NVMLSampler(dev).ok is False:
        print("GPU utilization not measured (no NVML: nvidia-ml-py missing or no GPU)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(dev), "torch": torch.__version__, "args": vars(args), "results": results, "summary": summary}, f, indent=1)
        print(f"results: {args.json}")


def flat_inputs_parquet(b, dev):
    g = lambda t: t.to(dev, non_blocking=True)
    return g(b["dense"]), [g(c) for c in b["cats"]], [g(i) for i in b["ids"]], g(b["label"])


if __name__ == "__main__":
    sys.exit(main())
