#!/usr/bin/env bash
# Benchmark (run on demand, not a test): a run beside a busy loop.
# One busy process (a shell loop) takes a core; each job then runs with
# --threads 1 and --threads 2, alternately, BENCH_REPEATS times, and the
# script prints the median wall time of each and the ratio 2 threads / 1
# thread. Target: <= 1.1 (threads must not spin-wait against other work:
# sim/core/threads.hpp). The ratio is a limit measured in the same run, so the
# machine's other load cancels as far as it can; the load average before the
# run is printed beside it.
#   tests/bench/busy_machine.sh [BITLAB_BINARY]      (default build/bitlab; ~2 min)
# BENCH_REPEATS (default 5) sets the repetitions; BENCH_BUSY=0 runs without the
# busy loop (the idle reference). Any OMP_WAIT_POLICY / GOMP_SPINCOUNT in the
# environment is passed on (GOMP_SPINCOUNT=300000 restores libgomp's spinning).
# Check (#wrong, bench_util.hpp's rule in shell): each job's metrics.csv (its
# wall_s column left out) and comm_log.csv with 2 threads, row by row against
# the same run with 1 thread: they must be identical.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-build/bitlab}"
[ -x "$BIN" ] || { echo "busy_machine: $BIN not built (cmake --build build)" >&2; exit 2; }
REPEATS="${BENCH_REPEATS:-5}"
BUSY="${BENCH_BUSY:-1}"
TMP="$(mktemp -d)"
busy_pid=""
cleanup() {
  [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

# The instruction set the runs use: BITLAB_ISA if set, else the widest the CPU has.
isa="${BITLAB_ISA:-}"
if [ -z "$isa" ]; then
  if grep -qw avx512f /proc/cpuinfo; then isa=avx512; elif grep -qw avx2 /proc/cpuinfo; then isa=avx2; else isa=sse2; fi
fi

# name|arguments (the issue's two cases)
JOBS=(
  "mlp-fashion 300 steps, 8 workers|experiments/real-mlp-fashion/base.json --set steps=300 --set cluster.workers=8"
  "1-bit Adam quickstart 1000 steps|experiments/quickstart.json --set optimizer.name=onebit_adam --set steps=1000"
)

run_once() {  # threads args [keep-as] -> wall seconds
  local threads="$1" args="$2" keep="${3:-}" out="$TMP/run-$RANDOM$RANDOM" t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$BIN" run $args --threads "$threads" --quiet --out "$out" >/dev/null
  t1=$(date +%s.%N)
  if [ -n "$keep" ]; then mv "$out" "$TMP/$keep"; else rm -rf "$out"; fi
  echo "$t1 - $t0" | bc -l
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "busy_machine: $BIN, $(nproc) cores, isa $isa, busy loop: $([ "$BUSY" = 1 ] && echo on || echo off)," \
  "wait policy: ${OMP_WAIT_POLICY:+OMP_WAIT_POLICY=$OMP_WAIT_POLICY }${GOMP_SPINCOUNT:+GOMP_SPINCOUNT=$GOMP_SPINCOUNT }(bitlab sets passive when neither is set)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $REPEATS repeats"
if [ "$BUSY" = 1 ]; then
  bash -c 'while :; do :; done' &
  busy_pid=$!
fi
# Rows of the csvs of run A that differ from run B's (metrics.csv without its
# last column, wall_s), and the rows compared: "wrong total".
wrong_rows() {
  local a="$TMP/$1" b="$TMP/$2" w=0 t=0 f
  for f in metrics.csv comm_log.csv; do
    local cut_a cut_b
    if [ "$f" = metrics.csv ]; then
      cut_a="$(sed 's/,[^,]*$//' "$a/$f")" cut_b="$(sed 's/,[^,]*$//' "$b/$f")"
    else
      cut_a="$(cat "$a/$f")" cut_b="$(cat "$b/$f")"
    fi
    t=$((t + $(wc -l <<<"$cut_b")))
    w=$((w + $(diff <(echo "$cut_a") <(echo "$cut_b") | grep -c '^>' || true)))
  done
  echo "$w $t"
}
worst=0
wrong_all=0
for job in "${JOBS[@]}"; do
  name="${job%%|*}" args="${job#*|}"
  run_once 1 "$args" one-thread >/dev/null  # also warms the page cache (data set files)
  one=() two=()
  for ((r = 0; r < REPEATS; ++r)); do
    one+=("$(run_once 1 "$args")")
    two+=("$(run_once 2 "$args" "$([ "$r" = 0 ] && echo two-threads)")")
  done
  m1=$(median "${one[@]}") m2=$(median "${two[@]}")
  ratio=$(echo "$m2 / $m1" | bc -l)
  printf '%-36s 1 thread: median %.2f s [%s]  2 threads: median %.2f s [%s]  ratio %.2f\n' \
    "$name" "$m1" "$(printf '%.2f ' "${one[@]}")" "$m2" "$(printf '%.2f ' "${two[@]}")" "$ratio"
  worst=$(echo "if ($ratio > $worst) $ratio else $worst" | bc -l)
  read -r w t <<<"$(wrong_rows two-threads one-thread)"
  echo "  check metrics.csv and comm_log.csv rows: #wrong $w of $t (against the same run on 1 thread)"
  wrong_all=$((wrong_all + w))
  rm -rf "$TMP/one-thread" "$TMP/two-threads"
done
printf 'result: worst ratio (2 threads / 1 thread) %.2f, target <= 1.10: %s\n' "$worst" \
  "$(echo "$worst <= 1.1" | bc -l | sed 's/1/met/;s/0/NOT met/')"
[ "$wrong_all" = 0 ] || { echo "FAILED: $wrong_all rows differ between 1 and 2 threads"; exit 1; }
