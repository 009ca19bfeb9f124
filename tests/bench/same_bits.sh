#!/usr/bin/env bash
# Proves that a change kept behaviour: runs every experiment file and sweep
# under experiments/ with two bitlab binaries and compares every metrics.csv
# and comm_log.csv byte for byte (docs/building.md, "A change that keeps
# behaviour"; the CONTRIBUTING rule: metrics.csv and comm_log.csv identical
# before and after).
#
#   tests/bench/same_bits.sh BASE_BINARY NEW_BINARY [OUT_DIR]
#   SAME_BITS_SWEEPS=0 tests/bench/same_bits.sh ...   experiment files only (the
#       sweeps' base files are experiments too; the sweeps vary their options)
#
# Sweeps are the files named sweep*.json (run with --jobs 2); every other
# .json under experiments/ is run as an experiment, except files that are no
# experiment (DeepSpeed configs, claims' model specs, specs/): a file the
# base binary refuses (exit 2) is listed as skipped, not compared. wall_s,
# the only column that is not deterministic, is dropped before comparing.
# Prints one line per file and a closing line "N passed, N failed". Exit 1
# when any file differs or the new binary fails where the base did not.
set -u
base="$(realpath "$1")"
new="$(realpath "$2")"
out="${3:-$(mktemp -d "${TMPDIR:-/tmp}/same-bits.XXXXXX")}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
passed=0 failed=0 skipped=0

# metrics.csv without its wall_s column (wall time is measured, not computed).
strip_wall() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "wall_s") w = i }
           { s = ""; for (i = 1; i <= NF; i++) if (i != w) s = s (s == "" && i == 1 ? "" : ",") $i; print s }' "$1"
}

compare_trees() {  # compare_trees DIR_A DIR_B -> prints the first difference, returns 1
  local a="$1" b="$2" f rel files=0
  while IFS= read -r f; do
    rel="${f#$a/}"
    files=$((files + 1))
    if [ ! -f "$b/$rel" ]; then echo "missing in new: $rel"; return 1; fi
    case "$rel" in
      *metrics.csv) cmp -s <(strip_wall "$f") <(strip_wall "$b/$rel") || { echo "differs: $rel"; return 1; } ;;
      *) cmp -s "$f" "$b/$rel" || { echo "differs: $rel"; return 1; } ;;
    esac
  done < <(find "$a" \( -name metrics.csv -o -name comm_log.csv \) | sort)
  [ "$files" -gt 0 ] || { echo "no metrics.csv"; return 1; }
  echo "$files files"
}

while IFS= read -r file; do
  rel="${file#$root/}"
  tag="$(echo "$rel" | tr '/' '_' | sed 's/\.json$//')"
  case "$(basename "$file")" in
    sweep*.json)
      if [ "${SAME_BITS_SWEEPS:-1}" = 0 ]; then
        printf 'skip %-60s (a sweep: SAME_BITS_SWEEPS=0)\n' "$rel"
        skipped=$((skipped + 1))
        continue
      fi
      cmd=(sweep "$file" --jobs 2 --quiet) ;;
    *) cmd=(run "$file" --quiet) ;;
  esac
  (cd "$(dirname "$file")" && "$base" "${cmd[@]}" --out "$out/base/$tag" >/dev/null 2>"$out/$tag.base.err")
  rb=$?
  if [ $rb -eq 2 ]; then
    printf 'skip %-60s (not an experiment: %s)\n' "$rel" "$(head -c 100 "$out/$tag.base.err" | tr '\n' ' ')"
    skipped=$((skipped + 1))
    continue
  fi
  (cd "$(dirname "$file")" && "$new" "${cmd[@]}" --out "$out/new/$tag" >/dev/null 2>"$out/$tag.new.err")
  rn=$?
  if [ $rb -ne $rn ]; then
    printf 'FAIL %-60s exit %d before, %d after\n' "$rel" $rb $rn
    failed=$((failed + 1))
    continue
  fi
  if msg="$(compare_trees "$out/base/$tag" "$out/new/$tag")"; then
    printf 'ok   %-60s %s identical (exit %d)\n' "$rel" "$msg" $rb
    passed=$((passed + 1))
  else
    printf 'FAIL %-60s %s\n' "$rel" "$msg"
    failed=$((failed + 1))
  fi
done < <(find "$root/experiments" -name '*.json' -not -path '*/specs/*' | sort)
echo "same_bits: $skipped skipped (not experiments, or sweeps left out); results in $out"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
