#!/bin/bash
# Checks the time model against a real transport: probes this machine's MPI
# on 2 ranks (`bitlab probe`: the standard collectives, 8 B to 16 MB), fits the
# model's link to the probe (`bitlab calibrate`), then runs 1-bit Adam, LoCo
# (and Adam) on 2 MPI ranks, one worker each, and predicts their measured
# communication (transport.csv) with `bitlab recost --network-file`. Prints
# a table with each ratio and whether it lands within +-25 %.
#   experiments/mpi-model-check/run.sh [BITLAB] [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bitlab=${1:-$here/../../build/bitlab}
out=${2:-$here/../../results/mpi-model-check}
if [ -e "$out" ]; then echo "run.sh: $out exists; remove it or pass another folder" >&2; exit 2; fi
mkdir -p "$out"
# The load on the machine when the timings start and end: on a shared
# machine other processes' load decides how long a rank waits for the other.
cut -d' ' -f1-3 /proc/loadavg > "$out/loadavg.txt"
mpirun_cmd=(mpirun -np 2)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
# The calls bitlab's MPI transport makes (all-to-all and allgather: its
# allreduce is an all-to-all of ranges and an allgather), up to the runs'
# largest message, each call cold, as training makes them (README).
echo "probe (2 ranks, all-to-all and allgather, 8 B - 4 MB, cold calls):" >&2
"${mpirun_cmd[@]}" "$bitlab" probe --min-bytes 8 --max-bytes 4M --cold-bytes "${COLD_BYTES:-4M}" \
  --collectives allgather,alltoall --out "$out/probe.json" > "$out/probe.txt"
# One node: nothing spans nodes, so the inter-node link is held at a value
# (the runs below are one node of 2 and never use it).
"$bitlab" calibrate "$out/probe.json" --fix inter_latency_us=10 --fix inter_bandwidth_gbps=100 \
  --name probe-fit --out "$out/fit.json" > "$out/calibrate.txt"
run() {  # name, then --set assignments
  local name=$1; shift
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  echo "  $name" >&2
  "${mpirun_cmd[@]}" "$bitlab" run "$here/base.json" --quiet --backend mpi --barrier-before-exchanges \
    --out "$out/$name" "${sets[@]}" >/dev/null
}
echo "runs on 2 ranks:" >&2
for h in 1024 4096; do
  run "onebit_adam-h$h" "problem.hidden=$h" optimizer.name=onebit_adam optimizer.freeze_step=10
  run "loco-h$h" "problem.hidden=$h" optimizer.name=loco optimizer.exchange=flat
  run "adam-h$h" "problem.hidden=$h"
done
cut -d' ' -f1-3 /proc/loadavg >> "$out/loadavg.txt"
/usr/bin/python3 "$here/analyse.py" "$bitlab" "$out"
