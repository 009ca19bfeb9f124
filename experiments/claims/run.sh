#!/usr/bin/env bash
# Re-run the rows of claims.csv (docs: experiments/claims/README.md).
#   experiments/claims/run.sh              the cost rows, each within 1 % of its recorded figure (what CI runs)
#   experiments/claims/run.sh --train      the training rows (two 5-seed sweeps: 17 min on 2 busy cores, ~2 min idle)
#   experiments/claims/run.sh --self-test  plant wrong figures and show the check fails on them
#   experiments/claims/run.sh --table      rewrite README.md's table from claims.csv
# The binary is $BITLAB_BINARY, else build/bitlab. Exit status as check.py / table.py.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  "")          exec /usr/bin/python3 "$here/check.py" ;;
  --train)     exec nice -n 10 /usr/bin/python3 "$here/check.py" --train ;;
  --self-test) exec /usr/bin/python3 "$here/check.py" --self-test ;;
  --table)     exec /usr/bin/python3 "$here/table.py" ;;
  *) echo "run.sh: error: argument '$1': must be one of --train, --self-test, --table (or none)" >&2
     exit 2 ;;
esac
