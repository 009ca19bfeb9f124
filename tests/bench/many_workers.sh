#!/usr/bin/env bash
# Benchmark (run on demand, not a test): N = 1024 and 4096 workers, d = 2^20
# and 2^22, Adam and 1-bit Adam on the quadratic, one process per
# configuration (bench_workers.cpp: what it counts and why), then a table.
#   tests/bench/many_workers.sh [BUILD_DIR]     (default build/; ~15 min on 2 cores)
# BENCH_WORKERS, BENCH_LOG2_DIMS, BENCH_OPTIMIZERS, BENCH_REPEATS and BENCH_PAD
# (reference | 8n: the 1-bit allreduce's padding, bench_workers --pad)
# override the grid. The 1-bit family's grid (docs/building.md):
#   BENCH_WORKERS="256 1024 4096" BENCH_LOG2_DIMS=20 BENCH_PAD=8n \
#   BENCH_OPTIMIZERS="onebit_adam zero_one_adam onebit_lamb" tests/bench/many_workers.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${1:-build}"
BIN="$BUILD/bench_workers"
[ -x "$BIN" ] || { echo "many_workers: $BIN not built (cmake --build $BUILD)" >&2; exit 2; }
WORKERS=(${BENCH_WORKERS:-1024 4096})
DIMS=(${BENCH_LOG2_DIMS:-20 22})
OPTS=(${BENCH_OPTIMIZERS:-adam onebit_adam})
REPEATS="${BENCH_REPEATS:-3}"
PAD="${BENCH_PAD:-reference}"
rows=()
for k in "${DIMS[@]}"; do
  for n in "${WORKERS[@]}"; do
    for o in "${OPTS[@]}"; do
      # A configuration killed by the system (out of memory) is a row, not the end.
      out="$("$BIN" --workers "$n" --log2-dim "$k" --optimizer "$o" --pad "$PAD" --repeats "$REPEATS" 2>&1)" ||
        out="result: ended with exit status $? ($out)"
      echo "$out" >&2
      check="$(grep -o '#wrong [0-9]* of [0-9]*' <<<"$out" || echo 'check not run')"
      rows+=("$(printf '%-14s %5s  2^%-3s %s  [%s]' "$o" "$n" "$k" "$(grep '^result:' <<<"$out" | cut -d' ' -f2-)" "$check")")
    done
  done
done
echo
echo "optimizer        N  d      result"
printf '%s\n' "${rows[@]}"
