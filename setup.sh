#!/usr/bin/env bash
# bitlab set-up: the single entry point.
#   ./setup.sh          install what is missing (Debian packages), build the
#                       tool in Release (the bitlab binary and the Python
#                       package; no tests, no CUDA), run experiments/quickstart.json
#   ./setup.sh test     the same, then build the tests and benchmarks and run
#                       the whole test suite (CTest)
#   ./setup.sh path     only make the built tool reachable: `bitlab` on PATH
#                       (a link in $BITLAB_BIN_DIR, default /usr/local/bin) and
#                       `import bitlab` (done by the two above too)
#   ./setup.sh cuda     install what is missing, then validate the CUDA kernels
#                       on this machine's GPU (tests/cuda/run.sh: build with
#                       -DBITLAB_CUDA=ON, the `cuda` suite, compute-sanitizer,
#                       the kernel benchmark); needs nvcc and an sm_90 GPU
# Both are idempotent and work from any clean clone.
set -euo pipefail
cd "$(dirname "$0")"

MODE="${1:-quickstart}"
BUILD_DIR="${BITLAB_BUILD_DIR:-build}"
JOBS="$(nproc 2>/dev/null || echo 2)"

# Debian packages the build and tests need (bookworm names).
PACKAGES=(build-essential cmake ninja-build git libeigen3-dev libomp-dev libcli11-dev
          nlohmann-json3-dev doctest-dev
          # the MPI backend (bitlab run --backend mpi; optional at build time)
          libopenmpi-dev openmpi-bin
          # bitlab plot and the notebooks (run with Debian's /usr/bin/python3)
          python3-matplotlib python3-pandas jupyter-nbconvert python3-ipykernel
          # bitlab report (plotly.js embedded in the page) and its headless-browser test
          python3-plotly chromium
          # real data sets (problems/datasets.cpp): Fashion-MNIST, scikit-learn's CSVs, gzip
          dataset-fashion-mnist python3-sklearn zlib1g-dev
          # the transformer problem's text corpus (/usr/share/games/fortunes/)
          fortunes fortunes-min
          # the Python package `bitlab` (pybind11 over the core), its PyTorch
          # bridge and their tests (docs/python.md)
          pybind11-dev python3-dev python3-torch python3-pytest python3-hypothesis
          # an optimized BLAS that Debian's torch picks up through libblas.so.3
          # (the reference BLAS it gets otherwise is ~6x slower on the bridge's
          # models); the OpenMP build shares bitlab's OpenMP runtime, so no
          # second thread pool competes with it (docs/building.md)
          libopenblas0-openmp)

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "setup: installing ${missing[*]}" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
      echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Makes Debian's /usr/bin/python3 find the package in $BUILD_DIR/python (a
# .pth file in its site folder naming this checkout's build), so that
# `import bitlab` works with no further step. Without the rights to write
# there, says the one line that does the same per shell.
install_python_path() {
  local pkg
  pkg="$(cd "$BUILD_DIR" && pwd)/python"
  [ -d "$pkg/bitlab" ] || return 0
  local site
  site="$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" || return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo="sudo -n"; fi
  if { $sudo mkdir -p "$site" && echo "$pkg" | $sudo tee "$site/bitlab.pth" >/dev/null; } 2>/dev/null; then
    return 0
  fi
  echo "setup: cannot write $site/bitlab.pth; use: export PYTHONPATH=$pkg" >&2
}

# A build folder configured for another source tree (a copied checkout that
# kept its build/) would build that other tree: CMake keeps the source path it
# was configured with (CMakeCache.txt's CMAKE_HOME_DIRECTORY). Stop and say so,
# before anything is installed or built; the folder is not removed, since it
# may be the other checkout's own (BITLAB_BUILD_DIR naming it).
check_build_dir() {
  local cache="$BUILD_DIR/CMakeCache.txt" home here
  [ -f "$cache" ] || return 0
  home="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache" | head -n 1)"
  here="$(pwd -P)"
  if [ -n "$home" ] && [ "$(cd "$home" 2>/dev/null && pwd -P || echo "$home")" = "$here" ]; then
    return 0
  fi
  echo "setup: $BUILD_DIR/ was configured for the source tree ${home:-(none recorded)}, not this one ($here): building there would compile that tree's code." >&2
  echo "setup: remove it (rm -rf $BUILD_DIR) or give another folder (BITLAB_BUILD_DIR=build-here ./setup.sh), then run ./setup.sh again" >&2
  exit 2
}

# Builds the targets named (none: everything the build folder configures).
build() {
  local gen=()
  if command -v ninja >/dev/null; then gen=(-G Ninja); fi
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    # BITLAB_PYTHON=ON: the set-up installs pybind11-dev and python3-dev, so a
    # package that cannot be built is an error here, not a silent skip.
    # BITLAB_CUDA=OFF: the CUDA kernels are built by `./setup.sh cuda` only
    # (tests/cuda/run.sh, its own build folder), not for every user with nvcc.
    cmake -S . -B "$BUILD_DIR" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBITLAB_PYTHON=ON \
      -DBITLAB_CUDA=OFF >/dev/null
  fi
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
  install_python_path
  install_cli_path
}

# Puts the CLI where a shell finds it: a symlink $BITLAB_BIN_DIR/bitlab (default
# /usr/local/bin, on every user's PATH) to this checkout's build/bitlab, so
# that `bitlab ...` runs as the documents write it. Without the rights to
# write there, says the one line that does the same per shell.
install_cli_path() {
  local bin dir="${BITLAB_BIN_DIR:-/usr/local/bin}"
  bin="$(cd "$BUILD_DIR" && pwd)/bitlab"
  [ -x "$bin" ] || return 0
  if [ "$(readlink -f "$dir/bitlab" 2>/dev/null)" = "$(readlink -f "$bin")" ]; then
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then sudo="sudo -n"; fi
  if [ -e "$dir/bitlab" ] && [ ! -L "$dir/bitlab" ]; then
    echo "setup: $dir/bitlab is not a link set-up made: left as it is; use: export PATH=\"$(dirname "$bin"):\$PATH\"" >&2
    return 0
  fi
  if { $sudo mkdir -p "$dir" && $sudo ln -sfn "$bin" "$dir/bitlab"; } 2>/dev/null; then
    echo "setup: bitlab is on PATH: $dir/bitlab -> $bin" >&2
    return 0
  fi
  echo "setup: cannot write $dir/bitlab; use: export PATH=\"$(dirname "$bin"):\$PATH\"" >&2
}

# Says which BLAS torch calls (python/bitlab/_blas.py reads the library the
# running process maps): a reference BLAS is a warning, not a failure.
report_torch_blas() {
  /usr/bin/python3 -c "import torch" 2>/dev/null || return 0
  local line
  if line="$(/usr/bin/python3 python/bitlab/_blas.py 2>&1)"; then
    echo "setup: $line" >&2
  else
    echo "setup: $line: torch's products run several times slower;" \
         "apt-get install libopenblas0-openmp (docs/building.md)" >&2
  fi
}

check_build_dir

case "$MODE" in
  quickstart|"")
    install_missing
    build bitlab _bitlab
    report_torch_blas
    echo "setup: running experiments/quickstart.json" >&2
    # stdout repeats the results folder for scripts; the summary on stderr already names it
    "$BUILD_DIR/bitlab" run experiments/quickstart.json >/dev/null
    ;;
  test)
    install_missing
    build
    report_torch_blas
    echo "setup: running experiments/quickstart.json" >&2
    "$BUILD_DIR/bitlab" run experiments/quickstart.json >/dev/null
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    ;;
  cuda)
    install_missing
    tests/cuda/run.sh
    ;;
  path)
    # Only the links: the CLI on PATH and the Python package, for a build made already.
    install_python_path
    install_cli_path
    ;;
  *)
    echo "usage: ./setup.sh [test|cuda|path]" >&2
    exit 2
    ;;
esac
