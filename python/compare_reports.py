"""Compare a dry run's report with the real run's _report.json, field by field.

    python3 python/compare_reports.py estimate.json <output>/_report.json

Prints each size the dry run estimated next to what the run measured, and the
worst per-slice error of the read bytes after the re-layout (docs/report.md).
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main(est_path, run_path):
    est, run = load(est_path), load(run_path)
    if not est.get("estimate") or run.get("estimate"):
        sys.exit("give the dry run's report first, then the run's _report.json")
    rows = [
        ("output parquet files", est["output"]["parquet_files"], run["output"]["parquet_files"]),
        ("output row groups", est["output"]["row_groups"], run["output"]["row_groups"]),
        ("output rows", est["output"]["rows"], run["output"]["rows"]),
        ("output parquet bytes", est["output"]["parquet_bytes"], run["output"]["parquet_bytes"]),
        ("tensor shards", est["output"]["shards"], run["output"]["shards"]),
        ("tensor bytes", est["output"]["tensor_bytes"], run["output"]["tensor_bytes"]),
        ("slice read bytes before", est["slices"]["totals"]["read_bytes_before"], run["slices"]["totals"]["read_bytes_before"]),
        ("slice read bytes after", est["slices"]["totals"]["read_bytes_after"], run["slices"]["totals"]["read_bytes_after"]),
        ("memory bytes", est["resources"]["memory_bytes"], run["resources"]["memory_bytes"]),
        ("seconds", round(est["resources"]["seconds"], 1), round(run["resources"]["seconds"], 1)),
    ]
    if est.get("transfer") and run.get("transfer"):
        rows.append(("transfer packed bytes", est["transfer"]["packed_bytes"], run["transfer"]["packed_bytes"]))
    print("%-26s %16s %16s %8s" % ("", "dry run", "run", "error"))
    for name, e, r in rows:
        err = "%+.1f%%" % (100.0 * (e / r - 1)) if r else "-"
        print("%-26s %16s %16s %8s" % (name, e, r, err))
    after = {json.dumps(s["key"], sort_keys=True): s["read_bytes_after"] for s in run["slices"]["list"]}
    errs = [abs(s["read_bytes_after"] / after[k] - 1) for s in est["slices"]["list"]
            if (k := json.dumps(s["key"], sort_keys=True)) in after and after[k]]
    if errs:
        print("per-slice read bytes after: worst error %.1f%% over %d listed slices" % (100 * max(errs), len(errs)))
    print("the dry run read %.1f%% of the input's bytes in %.2f s; the run took %.1f s" % (
        100.0 * est["cost"]["bytes_read"] / max(est["input"]["bytes"], 1), est["cost"]["seconds"], run["seconds"]))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
