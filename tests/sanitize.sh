#!/usr/bin/env bash
# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer,
# from the repository root or anywhere:
#
#   tests/sanitize.sh               build build-asan/ and run every CTest entry
#   tests/sanitize.sh -R cli        only the entries ctest -R selects
#   tests/sanitize.sh --build-only  build only (tests/fuzz/build.sh uses this)
#
# 1. configures build-asan/ (BITLAB_ASAN_BUILD_DIR to change) with clang++-14
#    when it is installed (else the default compiler): Release flags plus
#    -fsanitize=address,undefined, any undefined behaviour fatal
#    (-fno-sanitize-recover), CUDA off (the GPU kernels have their own
#    checker: tests/cuda/run.sh). With clang the code is also instrumented for
#    libFuzzer (-fsanitize=fuzzer-no-link: coverage counters only) and the
#    harnesses of tests/fuzz/ are built there too, so one build serves both;
# 2. builds bitlab and bitlab_tests (and the fuzzers), not the benchmarks;
# 3. runs CTest there; every bitlab the tests start is the instrumented one,
#    so a finding in a child process fails its test too.
#
# Leaks are checked (LeakSanitizer) with one suppression file,
# tests/sanitize.supp: Open MPI's own allocations that MPI_Finalize never
# frees and LLVM OpenMP's thread-team structures (third-party, not ours).
# Nothing of bitlab is suppressed.
# Exit status: CTest's (0 only when every entry passed). docs/building.md
# says how long it takes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

BUILD_DIR="${BITLAB_ASAN_BUILD_DIR:-build-asan}"
JOBS="${BITLAB_JOBS:-$(nproc 2>/dev/null || echo 2)}"
BUILD_ONLY=0
if [ "${1:-}" = "--build-only" ]; then BUILD_ONLY=1; shift; fi

SANITIZE="-fsanitize=address,undefined"
# The instrumented binary is 3-5x slower: the notebooks' sweeps get more time
# (per cell, and for the CTest entry).
config=(-DCMAKE_BUILD_TYPE=Release -DBITLAB_CUDA=OFF -DBITLAB_NOTEBOOKS_TIMEOUT=3600)
targets=(bitlab bitlab_tests)
# The benchmarks too: the bench_smoke entry runs each once (tests/bench/smoke.sh).
for src in "$ROOT"/tests/bench/bench_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
if command -v clang++-14 >/dev/null; then
  SANITIZE="$SANITIZE -fsanitize=fuzzer-no-link"
  config+=(-DCMAKE_CXX_COMPILER=clang++-14 -DBITLAB_FUZZ=ON)
  targets+=(fuzz_experiment fuzz_sweep fuzz_cost fuzz_checkpoint)
fi
gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S . -B "$BUILD_DIR" "${gen[@]}" "${config[@]}" \
  -DCMAKE_CXX_FLAGS="$SANITIZE -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
if [ "$BUILD_ONLY" = 1 ]; then exit 0; fi

# fast_unwind_on_malloc=0: Debian's Open MPI libraries have no frame pointers,
# so the fast unwinder records one frame ("<unknown module>") for their
# allocations and no suppression can match; the full unwinder names them.
# detect_leaks: on (the default on Linux, said for the reader);
# abort_on_error=0: a finding ends the process with exit 1 (a failed test),
# not SIGABRT's core dump; print_suppressions=0: no list of what matched.
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export NOTEBOOK_TIMEOUT="${NOTEBOOK_TIMEOUT:-1800}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitize.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 1800 "$@"
