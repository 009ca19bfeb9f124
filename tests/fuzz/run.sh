#!/usr/bin/env bash
# Runs one libFuzzer harness built by tests/fuzz/build.sh:
#
#   tests/fuzz/run.sh experiment|sweep|cost|checkpoint [SECONDS]   (default 600)
#
# The working corpus is build-asan/fuzz/corpus/KIND (seeded from
# build-asan/fuzz/seeds/KIND, kept between runs, never committed); findings go
# to build-asan/fuzz/findings/KIND/ (crash-*, leak-*, oom-*, timeout-*), the
# log to build-asan/fuzz/KIND.log, whose last lines are libFuzzer's final
# statistics (stat::number_of_executed_units: the executions). One process
# (-jobs=1 would add nothing but a second log): the machine has 2 cores.
# A finding is fixed in the code, minimised
#   build-asan/fuzz_KIND -minimize_crash=1 -runs=20000 FINDING
# and its smallest form copied to tests/fuzz/regression/KIND/ (replay.py
# replays it in CTest). Exit status: libFuzzer's (0: no finding).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIND="${1:?usage: tests/fuzz/run.sh experiment|sweep|cost|checkpoint [SECONDS]}"
SECONDS_TOTAL="${2:-600}"
BUILD_DIR="${BITLAB_ASAN_BUILD_DIR:-build-asan}"
FUZZER="$BUILD_DIR/fuzz_$KIND"
[ -x "$FUZZER" ] || { echo "run.sh: $FUZZER not built (tests/fuzz/build.sh)" >&2; exit 1; }
CORPUS="$BUILD_DIR/fuzz/corpus/$KIND"
FINDINGS="$BUILD_DIR/fuzz/findings/$KIND"
mkdir -p "$CORPUS" "$FINDINGS"
# A fuzz input is one file's text: longer ones only slow the search down.
# rss/malloc limits: an input that makes reading or validating a file
# allocate more than 2 GB is reported (oom-*) as a finding.
export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
LOG="$BUILD_DIR/fuzz/$KIND.log"
# fuzz_checkpoint resumes each input in a copy of this run (build.sh made it
# with the seeds, whose byte counts match its csvs).
export BITLAB_FUZZ_CHECKPOINT_RUN="$BUILD_DIR/fuzz/seeds/checkpoint-run"
status=0
# The regression inputs join the corpus (a kind with none has no folder in git).
dirs=("$CORPUS" "$BUILD_DIR/fuzz/seeds/$KIND")
[ -d "tests/fuzz/regression/$KIND" ] && dirs+=("tests/fuzz/regression/$KIND")
"$FUZZER" "${dirs[@]}" \
  -dict=tests/fuzz/bitlab.dict -max_total_time="$SECONDS_TOTAL" -max_len=16384 \
  -timeout=30 -rss_limit_mb=3072 -malloc_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$FINDINGS/" >"$LOG" 2>&1 || status=$?
tail -n 25 "$LOG"
ls "$FINDINGS"
exit "$status"
