#!/bin/sh
# Regenerates cmd/relayout/default.pgo, the CPU profile Go's compiler uses
# for profile-guided optimization of the relayout binary (go build picks it
# up by itself: -pgo=auto). The profile is merged from the jobs the
# benchmarks time: a flat run in memory and spilling at 128 MiB (1x and 4x
# the generated 1M-row log), a packed run, and a packed run with tensors.
# Run it when the hot paths change (docs/benchmarks.md, "Profile-guided
# optimization"); outputs do not depend on it, only speed.
set -eu
cd "$(dirname "$0")/.."
GO=${GO:-go}
dir=${BENCH_DIR:-.bench}
$GO build -o bin/relayout-gen ./cmd/relayout-gen
$GO build -pgo=off -o bin/relayout-nopgo ./cmd/relayout
for rows in 1000000 4000000; do
	files=$((rows / 250000))
	[ -d "$dir/events-$rows" ] || bin/relayout-gen --out "$dir/events-$rows" --rows "$rows" --files "$files"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
job() { # name, then run's flags
	name=$1
	shift
	RELAYOUT_CPUPROFILE="$tmp/$name.prof" bin/relayout-nopgo run --quiet --overwrite --output "$tmp/out" "$@" >/dev/null
	rm -rf "$tmp/out"
}
job flat --input "$dir/events-1000000" --slice-keys country,date
job flat128 --input "$dir/events-1000000" --slice-keys country,date --memory-limit 128MiB
job flat4x --input "$dir/events-4000000" --slice-keys country,date --memory-limit 128MiB
job packed --input "$dir/events-1000000" --slice-keys country,date --query-key query_id
job tensors --input "$dir/events-1000000" --slice-keys country,date --query-key query_id --tensors
$GO tool pprof -proto "$tmp"/*.prof >cmd/relayout/default.pgo
rm -f bin/relayout-nopgo
echo "wrote cmd/relayout/default.pgo ($(wc -c <cmd/relayout/default.pgo) bytes)"
