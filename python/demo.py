"""Show what a training loader sees in a packed relayout output.
usage: demo.py OUTPUT_DIR"""
import sys
import time

import numpy as np

from relayout_loader import Dataset

out = sys.argv[1]
ds = Dataset(out, rank=0, world=2, worker=0, num_workers=1, seed=1, epoch=0)
t = ds.tensors_info
print(f"{t['totals']['shards']} shards, {t['totals']['bytes'] / 1e6:.1f} MB, {len(t['schema'])} tensors, "
      f"{t['totals']['rows']} samples ({t['sample']} level), {t['totals'].get('items', 0)} items")
start = time.perf_counter()
n = items = 0
for i, b in enumerate(ds.batches(256)):
    if i == 0:
        for name in ("query.query_id", "query.item_offsets", "query.query_embedding", "item.item_id", "item.item_tags.values"):
            a = b[name]
            print(f"  {name:24s} {str(a.dtype):8s} {a.shape}")
        # Query features expanded to items, as a GPU would do after the transfer.
        per_item = np.repeat(b["query.user_id"], np.diff(b["query.item_offsets"]))
        print(f"  user_id expanded to items: {per_item.shape} (matches item.item_id: {per_item.shape == b['item.item_id'].shape})")
    n += len(b["query.query_id"])
    items += len(b["item.item_id"])
dt = time.perf_counter() - start
print(f"rank 0 of 2 read {n} queries, {items} items in {dt * 1e3:.1f} ms")
