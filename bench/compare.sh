#!/usr/bin/env bash
# relayout vs DuckDB, side by side in one run (see bench/README.md).
# Env: BENCH_ROWS (default 1000000), BENCH_REPS (default 3), BENCH_DIR (.bench).
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./bench/compare "$@"
