#!/usr/bin/env bash
# Two revisions side by side: each benchmark runs for BASE and for the working tree in
# alternation (base, head, base, head), on the same machine in one session, so a
# change in load moves both. JSON figures go to OUT_DIR; the summary prints each
# figure of both rounds (benchmarks/compare_revisions.py); the load average is printed
# before each run.
#
#   bash benchmarks/compare_revisions.sh BASE [OUT_DIR]    # about 10 minutes, 2 idle cores
#
# BASE is any commit (a worktree of it is made under OUT_DIR); the benchmarks run in
# their quick modes: rope_benchmark --quick, ring_benchmark --quick,
# length_generalisation_benchmark --length 4096 --grad.
set -euo pipefail
cd "$(dirname "$0")/.."
base_rev="${1:?usage: compare_revisions.sh BASE [OUT_DIR]}"
out="${2:-/tmp/compare_revisions}"
mkdir -p "$out"
base="$out/base-tree"
if [ ! -d "$base" ]; then
  git worktree add -f --detach "$base" "$base_rev" >/dev/null
fi
head="$(pwd)"

run() {  # run TREE NAME ROUND ARGS...
  local tree="$1" name="$2" round="$3"
  shift 3
  echo "== $name $(basename "$tree") round $round, load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd "$out" && PYTHONPATH="$tree" python "$tree/benchmarks/$name.py" "$@" \
    --json "$out/$name.$(basename "$tree").$round.json" >"$out/$name.$(basename "$tree").$round.log" 2>&1)
}

for round in 1 2; do
  for tree in "$base" "$head"; do
    run "$tree" rope_benchmark "$round" --quick
    run "$tree" ring_benchmark "$round" --quick
    run "$tree" length_generalisation_benchmark "$round" --length 4096 --grad
  done
done
echo "== done, load $(cut -d' ' -f1-3 /proc/loadavg); figures in $out"
python benchmarks/compare_revisions.py "$out"
