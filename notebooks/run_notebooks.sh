#!/bin/bash
# Executes the notebooks headless, as CI does, and prints each one's wall time.
#
#   notebooks/run_notebooks.sh [--smoke] [NOTEBOOK.ipynb ...]     (default: all four)
#
# CTest runs each notebook as an entry of its own (notebooks_warmup_sweep, ...), so that the
# two cores are shared with the other entries while a notebook waits on its kernel.
#
# --smoke: the notebooks' smoke size (BITLAB_NOTEBOOK_SMOKE=1: the same cells on a quarter to a
# fifth of the steps; every cell and figure still runs, the curves say little). CTest's
# `notebooks` entry runs this; the full runs stay one command away (no flag).
#
# Environment:
#   BITLAB_BINARY     the bitlab executable (default: <repo>/build/bitlab, found by the notebooks)
#   BITLAB_JOBS       runs at once inside the notebooks' sweeps (default: the machine's cores)
#   NOTEBOOKS_OUT     keep the executed notebooks and the sweeps' results in this folder;
#                     default: a temporary folder, removed at exit. Nothing is written into the
#                     repository either way.
#   NOTEBOOK_TIMEOUT  per-cell timeout in seconds (default 300)
#   BITLAB_AXIS_SEEDS seeds of compression_sweep.ipynb's compression axis (Fashion-MNIST, 11 arms);
#                     default here 1: one seed, 11 runs (about 2 min on 2 cores), to keep the test
#                     suite short; 1,2,3 runs the experiment's three seeds (33 runs, about 5 min)
#   BITLAB_PYTHONPATH the folder holding the Python package bitlab/ (default: python/ beside the
#                     binary). your_model.ipynb needs it and python3-torch; run by default, it is
#                     skipped (not failed) when `import bitlab.torch` does not work
#
# Each notebook writes its figures as PNG and PDF to $BITLAB_FIGURES (here: <out>/figures, so
# that a test run writes nothing into the repository; run interactively, a notebook writes
# them to notebooks/figures/). A notebook that ran but wrote no figure counts as failed.
#
# Uses Debian's Jupyter (/usr/bin/jupyter, kernel "python3" = /usr/bin/python3), never the
# python3 on PATH. Exit status: 0 every notebook ran; 1 one or more failed (the tail of its log
# is printed); 2 Jupyter/nbconvert or a notebook is missing; 77 every notebook named was skipped.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jupyter=/usr/bin/jupyter
timeout="${NOTEBOOK_TIMEOUT:-300}"

if [ ! -x "$jupyter" ] || ! /usr/bin/python3 -c "import nbconvert, ipykernel, pandas, matplotlib" 2>/dev/null; then
  echo "run_notebooks.sh: needs Debian's Jupyter for /usr/bin/python3:" \
       "apt-get install jupyter-nbconvert python3-ipykernel python3-pandas python3-matplotlib" >&2
  exit 2
fi

if [ "${1:-}" = "--smoke" ]; then
  export BITLAB_NOTEBOOK_SMOKE=1
  shift
fi

if [ $# -gt 0 ]; then
  notebooks=("$@")
else
  notebooks=(warmup_sweep.ipynb compression_sweep.ipynb speedup_vs_bandwidth.ipynb your_model.ipynb)
fi
# your_model.ipynb trains PyTorch models through bitlab.torch: only where that imports, named
# or not (CTest runs each notebook as an entry of its own).
pydir="${BITLAB_PYTHONPATH:-$(dirname "${BITLAB_BINARY:-$here/../build/bitlab}")/python}"
kept=()
for nb in "${notebooks[@]}"; do
  if [ "$(basename "$nb" .ipynb)" = your_model ] &&
     ! PYTHONPATH="$pydir${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -c "import bitlab.torch" 2>/dev/null; then
    printf '%-28s skipped (no bitlab.torch in %s, or no python3-torch)\n' your_model "$pydir"
  else
    kept+=("$nb")
  fi
done
if [ ${#kept[@]} -eq 0 ]; then
  exit 77   # nothing left to run: CTest reports the entry as skipped (SKIP_RETURN_CODE 77)
fi
notebooks=("${kept[@]}")

if [ -n "${NOTEBOOKS_OUT:-}" ]; then
  out="$NOTEBOOKS_OUT"
  mkdir -p "$out"
else
  out="$(mktemp -d "${TMPDIR:-/tmp}/bitlab-notebooks.XXXXXX")"
  trap 'rm -rf "$out"' EXIT
fi
export BITLAB_RESULTS="$out/results"
export BITLAB_AXIS_SEEDS="${BITLAB_AXIS_SEEDS-1}"
export BITLAB_FIGURES="$out/figures"
export PYDEVD_DISABLE_FILE_VALIDATION=1   # quiets ipykernel's debugger note about frozen modules

seconds_since() {  # seconds since a `date +%s%N` stamp, to 0.1 s
  local ms=$(( ($(date +%s%N) - $1) / 1000000 ))
  printf '%d.%d' $((ms / 1000)) $(((ms % 1000) / 100))
}

failed=()
total_start=$(date +%s%N)
for nb in "${notebooks[@]}"; do
  path="$nb"
  [ -f "$path" ] || path="$here/$nb"
  if [ ! -f "$path" ]; then
    echo "run_notebooks.sh: no notebook $nb" >&2
    exit 2
  fi
  name="$(basename "$path" .ipynb)"
  log="$out/$name.log"
  start=$(date +%s%N)
  # nbconvert runs the kernel in the notebook's own folder, so the notebooks find the repo.
  "$jupyter" nbconvert --to notebook --execute \
      --ExecutePreprocessor.timeout="$timeout" --ExecutePreprocessor.kernel_name=python3 \
      --output-dir "$out" "$path" >"$log" 2>&1
  rc=$?
  secs=$(seconds_since "$start")
  if [ $rc -eq 0 ] && ! ls "$BITLAB_FIGURES/$name"-*.png "$BITLAB_FIGURES/$name"-*.pdf >/dev/null 2>&1; then
    echo "no figure files $BITLAB_FIGURES/$name-*.png/.pdf written" >>"$log"
    rc=1
  fi
  if [ $rc -eq 0 ]; then
    printf '%-28s ok      %6.1f s\n' "$name" "$secs"
  else
    printf '%-28s FAILED  %6.1f s (exit %d)\n' "$name" "$secs" "$rc"
    tail -n 40 "$log" | sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^/    /'
    failed+=("$name")
  fi
done
printf '%-28s         %6.1f s\n' "total" "$(seconds_since "$total_start")"
[ -n "${NOTEBOOKS_OUT:-}" ] && echo "executed notebooks, results and figures: $out"

if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
exit 0
