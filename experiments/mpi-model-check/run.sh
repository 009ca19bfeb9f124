#!/bin/bash
# Checks the time model against a real transport: for each model size, probes
# this machine's MPI on 2 ranks (`bitlab probe`: all-to-all and allgather, the
# calls bitlab's MPI transport makes, 8 B to 4 MB, each call cold: after every
# rank has written what a training step of that model writes between its
# exchanges), fits the model's link to the probe (`bitlab calibrate`), then
# runs 1-bit Adam, LoCo (and Adam) on 2 MPI ranks, one worker each, with a
# barrier before each exchange (so the measured time is the transfer, not the
# waiting for the other rank), and predicts their measured communication
# (transport.csv) with `bitlab recost --network-file`. Prints a table with
# each ratio and whether it lands within +-25 %.
#   experiments/mpi-model-check/run.sh [BITLAB] [OUT]
# PRIORITY="chrt -f 10" runs every MPI job at a real-time priority (root):
# on a machine that other jobs load it keeps them from preempting a rank.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bitlab=${1:-$here/../../build/bitlab}
out=${2:-$here/../../results/mpi-model-check}
if [ -e "$out" ]; then echo "run.sh: $out exists; remove it or pass another folder" >&2; exit 2; fi
mkdir -p "$out"
# The load on the machine when the timings start and end: on a shared
# machine other processes' load decides how long a rank waits for the other.
cut -d' ' -f1-3 /proc/loadavg > "$out/loadavg.txt"
read -r -a priority <<< "${PRIORITY:-}"
mpirun_cmd=(${priority[@]+"${priority[@]}"} mpirun -np 2)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
for h in 1024 4096; do
  # The MLP 256-h-4's parameters, d = 257h + 4(h + 1); a step writes its
  # parameters, gradient and the optimizer's two or three rows between
  # exchanges: about 16d bytes, the probe's cold size.
  d=$((257 * h + 4 * (h + 1)))
  echo "h $h (d = $d): probe (2 ranks, all-to-all and allgather, 8 B - 4 MB, cold: $((16 * d)) B):" >&2
  "${mpirun_cmd[@]}" "$bitlab" probe --min-bytes 8 --max-bytes 4M --cold-bytes $((16 * d)) \
    --collectives allgather,alltoall --out "$out/probe-h$h.json" > "$out/probe-h$h.txt"
  # One node: nothing spans nodes, so the inter-node link is held at a value
  # (the runs below are one node of 2 and never use it).
  "$bitlab" calibrate "$out/probe-h$h.json" --fix inter_latency_us=10 --fix inter_bandwidth_gbps=100 \
    --name "probe-h$h" --out "$out/fit-h$h.json" > "$out/calibrate-h$h.txt"
  run() {  # name, then --set assignments
    local name=$1; shift
    local sets=()
    for s in "$@"; do sets+=(--set "$s"); done
    echo "  $name" >&2
    "${mpirun_cmd[@]}" "$bitlab" run "$here/base.json" --quiet --threads 1 --backend mpi \
      --barrier-before-exchanges --out "$out/$name" "${sets[@]}" >/dev/null
  }
  run "onebit_adam-h$h" "problem.hidden=$h" optimizer.name=onebit_adam optimizer.freeze_step=10
  run "loco-h$h" "problem.hidden=$h" optimizer.name=loco optimizer.exchange=flat
  run "adam-h$h" "problem.hidden=$h"
done
cut -d' ' -f1-3 /proc/loadavg >> "$out/loadavg.txt"
/usr/bin/python3 "$here/analyse.py" "$bitlab" "$out"
