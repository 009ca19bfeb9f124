#!/bin/bash
# Checks the time model against a real transport : runs on
# 2 MPI ranks (one worker each, one node), calibrates the model's two link
# parameters (latency, bandwidth) on exact fp32 allreduces of four sizes, then
# predicts the compressed optimizers' communication time with `bitlab recost`
# and sets it beside what was measured inside MPI. Prints a table.
#   experiments/mpi-model-check/run.sh [BITLAB] [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bitlab=${1:-$here/../../build/bitlab}
out=${2:-$here/../../results/mpi-model-check}
if [ -e "$out" ]; then echo "run.sh: $out exists; remove it or pass another folder" >&2; exit 2; fi
mkdir -p "$out"
mpirun_cmd=(mpirun -np 2)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)
run() {  # name, then --set assignments
  local name=$1; shift
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  echo "  $name" >&2
  OMP_NUM_THREADS=1 "${mpirun_cmd[@]}" "$bitlab" run "$here/base.json" --quiet --backend mpi \
    --out "$out/$name" "${sets[@]}" >/dev/null
}
echo "exact fp32 allreduce (Adam), four sizes:" >&2
for h in 64 256 1024 4096; do run "adam-h$h" "problem.hidden=$h"; done
echo "compressed optimizers:" >&2
for h in 1024 4096; do
  run "onebit_adam-h$h" "problem.hidden=$h" optimizer.name=onebit_adam optimizer.freeze_step=10
  run "loco-h$h" "problem.hidden=$h" optimizer.name=loco
done
/usr/bin/python3 "$here/analyse.py" "$bitlab" "$out"
