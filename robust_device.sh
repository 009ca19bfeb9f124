#!/usr/bin/env bash
# One-shot on the device machine: build the ASan+libFuzzer harnesses with 16 cores, run each briefly.
set -u
cd "$(dirname "$0")"
echo "== probe"; nproc
for t in clang++-14 cmake ninja python3; do command -v $t >/dev/null || { echo "missing $t"; MISSING=1; }; done
for h in /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp /usr/include/eigen3/Eigen/Dense /usr/include/doctest/doctest.h; do [ -e $h ] || { echo "missing $h"; MISSING=1; }; done
ls /usr/lib/llvm-14/lib/libomp* 2>/dev/null | head -2
[ -n "${MISSING:-}" ] && exit 3
B=build-asan
S="-fsanitize=address,undefined -fsanitize=fuzzer-no-link"
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DBITLAB_CUDA=OFF -DBITLAB_PYTHON=OFF -DCMAKE_CXX_COMPILER=clang++-14 -DBITLAB_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="$S -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > $OUT/cmake.log 2>&1 || { tail -30 $OUT/cmake.log; exit 4; }
echo "== build $(date +%T)"
timeout 330 ninja -C $B -j16 bitlab fuzz_experiment fuzz_sweep fuzz_cost fuzz_checkpoint > $OUT/build.log 2>&1; rc=$?
grep -E "error|FAILED" $OUT/build.log | head -20; echo "build rc $rc $(date +%T)"
[ -x $B/bitlab ] || exit 5
ASAN_OPTIONS=detect_leaks=0 python3 tests/fuzz/make_seeds.py $B/fuzz/seeds --bitlab $B/bitlab || exit 6
export BITLAB_FUZZ_CHECKPOINT_RUN=$PWD/$B/fuzz/seeds/checkpoint-run
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
T=${FUZZ_S:-150}
for k in experiment sweep cost checkpoint; do
  [ -x $B/fuzz_$k ] || { echo "no fuzz_$k"; continue; }
  mkdir -p $B/fuzz/corpus/$k $OUT/findings/$k
  dirs="$B/fuzz/corpus/$k $B/fuzz/seeds/$k"; [ -d tests/fuzz/regression/$k ] && dirs="$dirs tests/fuzz/regression/$k"
  $B/fuzz_$k $dirs -dict=tests/fuzz/bitlab.dict -max_total_time=$T -max_len=16384 -timeout=30 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
    -fork=3 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -print_final_stats=1 -artifact_prefix=$OUT/findings/$k/ > $OUT/fuzz_$k.log 2>&1 &
done
wait
for k in experiment sweep cost checkpoint; do echo "== $k"; tail -4 $OUT/fuzz_$k.log; ls $OUT/findings/$k | head; done
