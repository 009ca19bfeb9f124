#!/usr/bin/env bash
# Benchmark (run on demand, not a test): what `bitlab cost` takes to price an
# experiment file — wall time and peak resident memory of the whole process,
# from /usr/bin/time -v, the median of REPEATS runs — for a d = 1e9 quadratic
# (built before, it took 78 s and 7.8 GB) and every experiment file under
# experiments/ (sweep files and cost specs are left out: the first are not
# priced, the second never built a problem). Target: < 1 s and < 100 MB each.
#   tests/bench/bench_cost.sh [BITLAB_BINARY]     (default build/bitlab)
# BENCH_REPEATS (default 5) overrides the repeats; BENCH_DIM the quadratic's d.
# Check (#wrong, as the C++ benchmarks print it): the quadratic's bytes per
# worker and step, priced from its shape alone, against the formulas worked
# out by hand (docs/algorithms.md §1): the warm-up's fp32 ring allreduce
# 2(n−1)/n·4d, and 1-bit Adam's two stages 2(n−1)(D/(8n) + 4) with D = d
# padded to a multiple of n·lcm(n, 8).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${1:-build/bitlab}"
[ -x "$BIN" ] || { echo "bench_cost: $BIN not built" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_cost: needs /usr/bin/time (Debian package time)" >&2; exit 2; }
REPEATS="${BENCH_REPEATS:-5}"
DIM="${BENCH_DIM:-1000000000}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/quadratic_1e9.json" <<EOF
{"name": "quadratic_1e9", "steps": 1000, "problem": {"name": "quadratic", "dim": $DIM},
 "cluster": {"workers": 64}, "network": {"preset": "ethernet_40g_v100x4"},
 "optimizer": {"name": "onebit_adam", "freeze_step": "15%"}}
EOF
files=("$tmp/quadratic_1e9.json")
while IFS= read -r f; do files+=("$f"); done < <(grep -l '"problem"' -r experiments --include='*.json' |
  xargs grep -L '"grid"\|"zip"\|"runs"' | sort)
# An experiment without a network is priced on this preset.
net=(--network ethernet_40g_v100x4)

median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

printf '%-58s %10s %12s  %s\n' "file" "median s" "peak MB" "status"
worst_s=0
worst_mb=0
for f in "${files[@]}"; do
  times=()
  mems=()
  status=ok
  for ((k = 0; k < REPEATS; k++)); do
    if ! /usr/bin/time -v -o "$tmp/time.txt" "$BIN" cost "$f" "${net[@]}" >/dev/null 2>"$tmp/err.txt"; then
      status="exit $(tail -1 "$tmp/err.txt" | cut -c1-60)"
    fi
    times+=("$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0;
      for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$tmp/time.txt")")
    mems+=("$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$tmp/time.txt")")
  done
  t="$(printf '%s\n' "${times[@]}" | median)"
  m="$(printf '%s\n' "${mems[@]}" | median)"
  worst_s="$(printf '%s\n%s\n' "$worst_s" "$t" | sort -g | tail -1)"
  worst_mb="$(printf '%s\n%s\n' "$worst_mb" "$m" | sort -g | tail -1)"
  name="${f#"$tmp"/}"
  printf '%-58s %10s %12s  %s\n' "$name" "$t" "$m" "$status"
done
echo
echo "worst median: $worst_s s (limit 1 s), $worst_mb MB peak RSS (limit 100 MB); $BIN, $REPEATS repeats"
"$BIN" cost "$tmp/quadratic_1e9.json" --json >"$tmp/price.json"
/usr/bin/python3 - "$tmp/price.json" "$DIM" <<'PY'
import json, math, sys
price, d = json.load(open(sys.argv[1])), int(sys.argv[2])
n = price["spec"]["workers"]
pad = n * (n * 8 // math.gcd(n, 8))                 # n·lcm(n, 8)
D = -(-d // pad) * pad
want = {"warmup": 2 * (n - 1) * 4 * d / n, "compressed": 2 * (n - 1) * (D / (8 * n) + 4)}
got = {p["name"]: p["sent_bytes_per_worker"] for p in price["optimizer"]["phases"]}
wrong = sum(got.get(k) != v for k, v in want.items())
print(f"check quadratic_1e9 bytes per worker and step: #wrong {wrong} of {len(want)} "
      f"(against the formulas: {want}; priced {got})")
sys.exit(1 if wrong else 0)
PY
