#!/usr/bin/env bash
# GPU feed benchmark (make bench-gpu; see bench/README.md): generate an
# impression log, re-lay it out flat and packed with tensor shards, then
# train a small DLRM-style model fed from the source Parquet (pyarrow) and
# from the shards (python/relayout_loader.py) in one run.
# Env: GPU_ROWS (default 2000000), GPU_STEPS (300), GPU_WORKERS (4),
# GPU_DIR (.bench-gpu), PYTHON (python3), GPU_ARGS (extra gpu_feed.py flags).
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${GPU_ROWS:-2000000}
dir=${GPU_DIR:-.bench-gpu}
py=${PYTHON:-python3}
if [ ! -x bin/relayout ] || [ ! -x bin/relayout-gen ]; then
  CGO_ENABLED=0 go build -o bin/relayout ./cmd/relayout
  CGO_ENABLED=0 go build -o bin/relayout-gen ./cmd/relayout-gen
fi
mkdir -p "$dir"
t0=$(date +%s)
if [ ! -d "$dir/events" ]; then
  bin/relayout-gen --out "$dir/events" --rows "$rows" --files 8 >/dev/null
fi
bin/relayout run --quiet --overwrite --input "$dir/events" --output "$dir/flat" --slice-keys country,date --tensor-spec bench/tensors-gpu.yaml --shard-bytes 128MiB
bin/relayout run --quiet --overwrite --input "$dir/events" --output "$dir/packed" --slice-keys country,date --query-key query_id --tensor-spec bench/tensors-gpu-packed.yaml --shard-bytes 128MiB
echo "data ready in $(( $(date +%s) - t0 )) s"
PYTHONPATH=python exec "$py" bench/gpu_feed.py --source "$dir/events" --flat "$dir/flat" --packed "$dir/packed" \
  --steps "${GPU_STEPS:-300}" --workers "${GPU_WORKERS:-4}" --json "$dir/gpu_feed.json" ${GPU_ARGS:-}
