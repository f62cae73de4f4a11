#!/usr/bin/env bash
# Installs what relayout's tests and benchmarks need beyond Go: the npm
# packages in tools/node (DuckDB as an independent reader and peer).
set -euo pipefail
cd "$(dirname "$0")/../tools/node"
if ! command -v node >/dev/null; then
  echo "deps: node is missing; install Node.js 20 (apt-get install nodejs npm)" >&2
  exit 1
fi
npm ci --no-audit --no-fund --loglevel=error
# /usr/bin/time measures peak RSS in tests and benchmarks.
if [ ! -x /usr/bin/time ]; then
  if command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time
  else
    echo "deps: /usr/bin/time is missing (install GNU time)" >&2
    exit 1
  fi
fi
