#!/usr/bin/env bash
# Fits bitlab's network model to the 1-bit Adam paper's Table 1 (Adam's
# measured fp16 gradient allreduce of BERT-Large on 1-16 nodes; README.md) and
# re-prices experiments/paper-bert-large with the fitted networks and Table 1's
# own compute times. Usage: run.sh [BITLAB] [OUT_DIR]   (about a second)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bitlab="${1:-$root/build/bitlab}"
out="${2:-$root/results/calibrate-table1}"
mkdir -p "$out"
# One message size per row: the intra-node latency is held at the presets'
# assumption (5 us PCIe, 3 us NVLink); everything else is fitted.
"$bitlab" calibrate "$here/ethernet.csv" --fix intra_latency_us=5 --name table1-ethernet \
  --out "$out/ethernet.json" --force
"$bitlab" calibrate "$here/infiniband.csv" --fix intra_latency_us=3 --name table1-infiniband \
  --out "$out/infiniband.json" --force
# Re-price: Table 1's compute per step at batch 16 per GPU = forward + backward
# + optimizer ("other"): Ethernet 16 nodes 35.71 + 60.81 + 75.59 = 172.11 ms,
# InfiniBand 8 nodes 32.81 + 59.99 + 57.79 = 150.59 ms.
for cluster in ethernet infiniband; do
  step_ms=172.11
  [ "$cluster" = infiniband ] && step_ms=150.59
  echo "== paper-bert-large/$cluster.json: preset, then fitted network with Table 1's compute"
  "$bitlab" cost "$root/experiments/paper-bert-large/$cluster.json" | grep -E "speed-up|^  (adam|onebit)" || true
  "$bitlab" cost "$root/experiments/paper-bert-large/$cluster.json" --network-file "$out/$cluster.json" \
    --set compute.step_ms=$step_ms | grep -E "speed-up|^  (adam|onebit)" || true
done
