#!/usr/bin/env bash
# The benchmarks' smoke run (the CTest entry `bench_smoke`): every benchmark
# in tests/bench/ runs once with tiny sizes and must exit 0 and print the
# line that carries its figures. Nothing is timed or compared: speed is for
# the benchmarks themselves, run on demand (docs/building.md). This catches
# a benchmark that no longer runs (bench_real threw for a day once Adam
# began to stream its gradients' mean, and nothing noticed).
#
#   tests/bench/smoke.sh BUILD_DIR
set -u
build="${1:?usage: smoke.sh BUILD_DIR}"
failed=0
check() {  # check NAME EXPECTED-TEXT ARGS...
  local name=$1 expect=$2
  shift 2
  local out
  out=$("$build/$name" "$@" 2>&1)
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL $name $*: exit $rc"; echo "$out" | tail -5; failed=1
  elif ! grep -qF -- "$expect" <<<"$out"; then
    echo "FAIL $name $*: no line with \"$expect\""; echo "$out" | tail -5; failed=1
  elif ! grep -qE -- "#wrong 0 of [1-9]" <<<"$out" || grep -qE -- "#wrong [1-9]" <<<"$out"; then
    echo "FAIL $name $*: its result check"; grep -- "#wrong" <<<"$out"; failed=1
  else
    echo "ok   $name $*"
  fi
}
check bench_step "onebit_adam / adam step" --workers 2 --log2-dim 12 --repeats 1
check bench_normals "fill_normal sse2" --repeats 1
check bench_onebit "GB/s" --workers 2 --log2-dim 12 --repeats 1
check bench_workers "result: ok" --workers 4 --log2-dim 10 --optimizer adam
check bench_workers "result: ok" --workers 4 --log2-dim 10 --optimizer onebit_adam
check bench_real "of peak" --workers 2 --batch 4 --repeats 1
check bench_transformer "whole step" --repeats 1
# The Python bridge's benchmark, when the package was built (BITLAB_PYTHON).
if [ -d "$build/python/bitlab" ]; then
  out=$(PYTHONPATH="$build/python" /usr/bin/python3 "$(dirname "$0")/bench_bridge.py" --tiny 2>&1)
  if [ $? -ne 0 ] || ! grep -qF "bridge overhead" <<<"$out" || ! grep -qE "#wrong 0 of [1-9]" <<<"$out"; then
    echo "FAIL bench_bridge.py --tiny"; echo "$out" | tail -5; failed=1
  else
    echo "ok   bench_bridge.py --tiny"
  fi
fi
exit $failed
