#!/usr/bin/env bash
# Validates the CUDA kernels on a GPU machine (sm_90: H100 or H200) in one
# command, from the repository root or anywhere:
#
#   tests/cuda/run.sh            (or ./setup.sh cuda, which installs packages first)
#
# 1. configures build-cuda/ (BITLAB_CUDA_BUILD_DIR to change) with
#    -DBITLAB_CUDA=ON, builds bitlab_tests and bench_kernels;
# 2. runs the doctest suite `cuda` with BITLAB_REQUIRE_GPU=1 (a missing GPU
#    is then a failure, not a skip);
# 3. runs the GPU cases again under compute-sanitizer: memcheck (out of
#    bounds, misaligned, uninitialised reads via initcheck) and racecheck
#    (the shared-memory block sums);
# 4. runs the benchmark (build/bench_kernels): effective bandwidth per kernel.
# Exit status: 0 only when every step passed; a missing compute-sanitizer is a
# failure too (the validation would be incomplete).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR="${BITLAB_CUDA_BUILD_DIR:-build-cuda}"
JOBS="$(nproc 2>/dev/null || echo 2)"
gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBITLAB_CUDA=ON >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target bitlab_tests bench_kernels

echo "== cuda suite" >&2
BITLAB_REQUIRE_GPU=1 "$BUILD_DIR/bitlab_tests" --test-suite=cuda

sanitizer="$(command -v compute-sanitizer || true)"
if [ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
fi
status=0
if [ -z "$sanitizer" ]; then
  echo "run.sh: compute-sanitizer not found (PATH, /usr/local/cuda/bin): sanitizer step NOT run" >&2
  status=1
else
  # The kernel-level cases (the training run repeats the same kernels 200
  # times and would only make the sanitizer slow).
  cases='1-bit allreduce kernels*,every numbered variant*,elementwise kernels*,BinSGDM binarization*,LoCo*'
  for tool in memcheck initcheck racecheck; do
    echo "== compute-sanitizer --tool $tool" >&2
    BITLAB_REQUIRE_GPU=1 "$sanitizer" --tool "$tool" --error-exitcode 1 \
      "$BUILD_DIR/bitlab_tests" --test-suite=cuda --test-case="$cases"
  done
fi

echo "== benchmark" >&2
"$BUILD_DIR/bench_kernels"
exit "$status"
