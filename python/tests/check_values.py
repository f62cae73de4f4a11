"""Compare tensor shards, read with NumPy through relayout_loader, with
expected values computed independently (by a Go test from parquet-go reads).

usage: check_values.py OUTPUT_DIR EXPECTED_DIR

EXPECTED_DIR/index.json maps every tensor name to {"file": NPY, "dtype": D}:
the .npy holds the source values after the documented transform but before
the final cast to D, which is applied here with NumPy. Every tensor of the
schema must be listed. Prints a JSON summary; exits 1 on the first mismatch.
"""
import json
import os
import sys

import numpy as np

import relayout_loader as rl


def bf16_bits(x):
    """Round float32 values to bfloat16 bits (nearest, ties to even)."""
    f = np.asarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    r[nan] = ((b[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def cast(exp, dt):
    if dt == "BF16":
        return bf16_bits(exp.astype(np.float32))
    if dt == "BOOL":
        return exp != 0
    return exp.astype(rl.DTYPES[dt])


def main():
    out, expected = sys.argv[1], sys.argv[2]
    with open(os.path.join(expected, "index.json")) as f:
        index = json.load(f)
    ds = rl.Dataset(out, shuffle=False, verify_checksums=True)
    n = len(ds)
    batch = ds.batch([(0, n)]) if n else {}
    # Every shard: the header parses, data offsets tile, tensors are aligned.
    for info in ds.tensors_info["shards"]:
        with open(os.path.join(out, info["path"]), "rb") as f:
            buf = f.read()
        meta, tensors, start = rl.read_header(buf)
        if meta.get("spec_hash") != ds.tensors_info["spec_hash"] or int(meta["rows"]) != info["rows"]:
            raise SystemExit(f"{info['path']}: metadata {meta} disagrees with the manifest")
        for name, (dt, shape, begin, end) in tensors.items():
            if (start + begin) % rl.DTYPES[dt].itemsize:
                raise SystemExit(f"{info['path']}: {name} is not aligned to its dtype")
    checked = []
    for t in ds.schema:
        name = t["name"]
        if name not in index:
            raise SystemExit(f"tensor {name} has no expected values: the test does not cover it")
        e = index[name]
        if e["dtype"] != t["dtype"]:
            raise SystemExit(f"{name}: dtype {t['dtype']}, expected {e['dtype']}")
        want = cast(np.load(os.path.join(expected, e["file"])), t["dtype"])
        got = batch[name]
        if got.shape != want.shape:
            raise SystemExit(f"{name}: shape {got.shape}, expected {want.shape}")
        if got.dtype.kind == "f":
            ok = np.array_equal(got, want, equal_nan=True)
        else:
            ok = np.array_equal(got, want)
        if not ok:
            bad = np.flatnonzero((got != want).reshape(-1))[:5]
            raise SystemExit(f"{name}: values differ at flat indices {bad.tolist()}: got {got.reshape(-1)[bad].tolist()}, want {want.reshape(-1)[bad].tolist()}")
        checked.append(name)
    extra = sorted(set(index) - set(checked))
    if extra:
        raise SystemExit(f"expected tensors missing from the shards: {extra}")
    print(json.dumps({"rows": n, "checked": checked}))


if __name__ == "__main__":
    main()
