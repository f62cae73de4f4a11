"""Print what relayout_loader's window order (relayout-order-v2) yields, for
comparison with the Go loader. usage: order2.py OUTPUT_DIR CONFIGS_JSON (a
list of objects: batch plus Dataset keyword arguments; "weights" keys that
are digits are slice indices; "max_open_files" caps the shard files kept
open for pread, the rest read through their maps). For each config, one entry per batch:
{"index": [...], "hash": {tensor: xxhash64 of its bytes}}."""
import json
import sys

import xxhash

import relayout_loader as rl

out = []
for c in json.loads(sys.argv[2]):
    c = dict(c)
    n = c.pop("batch")
    if "weights" in c:
        c["weights"] = {(int(k) if k.isdigit() else k): v for k, v in c["weights"].items()}
    mof = c.pop("max_open_files", None)
    ds = rl.Dataset(sys.argv[1], index=True, **c)
    if mof is not None:
        ds._files.limit = mof
    res = []
    for b in ds.batches(n):
        idx = b.pop("_index")
        res.append({"index": idx.tolist(),
                    "hash": {k: xxhash.xxh64(v.tobytes()).hexdigest() for k, v in sorted(b.items())}})
    out.append(res)
    ds.close()
print(json.dumps(out))
