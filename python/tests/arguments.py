"""The Python loader's arguments a training script gets wrong, against a
relayout output (argv[1]): each is a ValueError naming it, never a silent
empty or longer epoch, nor a ZeroDivisionError; prints "ok"."""
import json
import os
import sys
import tempfile

import numpy as np

import relayout_loader as rl

out = sys.argv[1]
full = sum(1 for _ in rl.Dataset(out, seed=1).batches(512))
assert full > 0, full


def refused(what, want, make, batch=512):
    try:
        n = sum(1 for _ in make().batches(batch))
    except ValueError as e:
        assert want in str(e), f"{what}: {e}"
        return
    raise AssertionError(f"{what}: {n} batches, want a ValueError saying {want!r}")


# a dict of slice-key values that matches no slice read as an empty epoch
refused("a value no slice has", "matches no slice", lambda: rl.Dataset(out, slices=[{"country": "C0x"}]))
refused("a key that is not a slice key", "is not a slice key", lambda: rl.Dataset(out, slices=[{"contry": "C01"}]))
# a weight for a value no slice has weighed nothing, silently
refused("a weight for a value no slice has", "matches no slice", lambda: rl.Dataset(out, weights={"country": {"C0x": 5.0}}))
refused("a weight for a key that is not a slice key", "is not a slice key", lambda: rl.Dataset(out, weights={"contry": {"C01": 5.0}}))
# a negative resume point read one batch twice (the Go loader refuses it)
refused("negative samples_seen", "must not be negative", lambda: rl.Dataset(out, samples_seen=-512))
refused("negative epoch", "must not be negative", lambda: rl.Dataset(out, epoch=-1))
for order in ("window", "block"):
    refused(f"batch size 0 ({order})", "positive integer", lambda: rl.Dataset(out, shuffle=order), batch=0)
    refused(f"batch size -1 ({order})", "positive integer", lambda: rl.Dataset(out, shuffle=order), batch=-1)
# a manifest of a newer format version was read as if it were version 1
with open(os.path.join(out, "manifest.json")) as f:
    m = json.load(f)
m["format_version"] = rl.MANIFEST_FORMAT_VERSION + 1
newer = tempfile.mkdtemp()
with open(os.path.join(newer, "manifest.json"), "w") as f:
    json.dump(m, f)
refused("a newer manifest format", "is not supported", lambda: rl.Dataset(newer))
# what is right still reads
assert sum(1 for _ in rl.Dataset(out, seed=1).batches(np.int64(512))) == full
some = sum(1 for _ in rl.Dataset(out, seed=1, slices=[{"country": "C01"}]).batches(512))
assert sum(1 for _ in rl.Dataset(out, seed=1, weights={"country": {"C01": 2.0}}).batches(512)) > 0
assert 0 < some < full, (some, full)
print("ok", rl.MANIFEST_FORMAT_VERSION, rl.GENERATION_FORMAT_VERSION)
