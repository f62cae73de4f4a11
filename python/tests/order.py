"""Print the batch ranges relayout_loader assigns, for comparison with the Go
loader. usage: order.py OUTPUT_DIR CONFIGS_JSON (a list of objects with
batch, seed, epoch, shuffle, rank, world, worker, num_workers, samples_seen,
drop_last and optional slices)."""
import json
import sys

import relayout_loader as rl

out = []
for c in json.loads(sys.argv[2]):
    c = dict(c)
    n = c.pop("batch")
    ds = rl.Dataset(sys.argv[1], **c)
    out.append([[list(r) for r in b] for b in ds.batch_ranges(n)])
print(json.dumps(out))
