#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz_experiment, fuzz_sweep, fuzz_cost,
# fuzz_checkpoint) with
# clang++-14, AddressSanitizer and UBSan, in the sanitizer build
# (tests/sanitize.sh --build-only: build-asan/, BITLAB_ASAN_BUILD_DIR to
# change), and the seed corpus (tests/fuzz/make_seeds.py, with the
# instrumented bitlab for the checkpoint seeds and their run folder) in
# build-asan/fuzz/seeds/. tests/fuzz/run.sh runs them.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang++-14 >/dev/null; then
  echo "fuzz/build.sh: clang++-14 not found (apt-get install clang-14): libFuzzer needs clang" >&2
  exit 1
fi
tests/sanitize.sh --build-only
BUILD_DIR="${BITLAB_ASAN_BUILD_DIR:-build-asan}"
/usr/bin/python3 tests/fuzz/make_seeds.py "$BUILD_DIR/fuzz/seeds" --bitlab "$BUILD_DIR/bitlab"
