#!/bin/bash
# samebytes.sh OLD NEW: runs two relayout binaries on the same generated
# input in every mode (flat, packed, tensors, packed+tensors, spilled,
# distributed) and fails unless every output file is byte-identical. Use it
# around refactors that must not change the output:
#   git worktree add /tmp/ref HEAD~1 && (cd /tmp/ref && go build -o /tmp/relayout-ref ./cmd/relayout)
#   go build -o bin/relayout ./cmd/relayout && scripts/samebytes.sh /tmp/relayout-ref bin/relayout
set -euo pipefail
old=$(realpath "$1"); new=$(realpath "$2"); rows=${ROWS:-300000}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
go run ./cmd/relayout-gen -rows "$rows" -files 3 -seed 7 -out "$dir/in" >/dev/null
common=(--quiet --input "$dir/in" --slice-keys country,date --row-group-bytes 2MiB --file-bytes 8MiB)
declare -A modes=(
  [flat]=""
  [sorted]="--sort-keys user_id"
  [packed]="--query-key query_id"
  [tensors]="--tensors --shard-bytes 2MiB"
  [packed-tensors]="--query-key query_id --tensors --shard-bytes 2MiB"
  [spilled]="--memory-limit 128MiB --page-bytes 64KiB --tensors --shard-bytes 2MiB"
  [spilled-packed]="--memory-limit 128MiB --page-bytes 64KiB --query-key query_id"
)
fail=0
compare() { # name
  if ! diff -r "$dir/old-$1" "$dir/new-$1" >/dev/null; then
    echo "DIFFERENT: $1"; diff -rq "$dir/old-$1" "$dir/new-$1" | head -5; fail=1
  else
    echo "same: $1 ($(find "$dir/new-$1" -type f | wc -l) files)"
  fi
}
for m in "${!modes[@]}"; do
  for b in old new; do
    bin=$old; [ $b = new ] && bin=$new
    # shellcheck disable=SC2086
    "$bin" run "${common[@]}" ${modes[$m]} --output "$dir/$b-$m" >/dev/null
    rm -f "$dir/$b-$m/_report.json"
  done
  compare "$m"
done
for b in old new; do # distributed: plan, 3 maps, reduces, commit
  bin=$old; [ $b = new ] && bin=$new
  out="$dir/$b-dist"
  "$bin" plan "${common[@]}" --query-key query_id --tensors --shard-bytes 2MiB --output "$out" --map-bytes 4MiB > "$dir/$b-plan.json"
  plan="$out/_relayout/plan.json"
  maps=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["map_tasks"])' "$dir/$b-plan.json")
  detects=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["detect_tasks"])' "$dir/$b-plan.json")
  reduces=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reduce_tasks"])' "$dir/$b-plan.json")
  for ((i = 0; i < maps; i++)); do "$bin" map --quiet --plan "$plan" --task $i >/dev/null; done
  for ((i = 0; i < detects; i++)); do "$bin" detect --quiet --plan "$plan" --task $i >/dev/null; done
  for ((i = 0; i < reduces; i++)); do "$bin" reduce --quiet --plan "$plan" --task $i >/dev/null; done
  "$bin" commit --quiet --plan "$plan" >/dev/null
  rm -f "$out/_report.json"
done
compare dist
exit $fail
