#!/usr/bin/env python3
"""Replays the fuzzers' regression inputs (tests/fuzz/regression/KIND/*) and a
sample of the seed corpus (tests/fuzz/make_seeds.py) through a real bitlab
binary, as a user's command line would give them:

  experiment: bitlab validate FILE --set A --set B   (builds the simulation too)
  sweep:      bitlab sweep FILE --merge --out EMPTY  (resolves and checks every
              run, then stops: the empty folder holds no sweep, so nothing runs)
  cost:       bitlab cost FILE --set A --json
  checkpoint: bitlab run --resume RUN, RUN a copy of a run of
              tests/fuzz/checkpoint_experiment.json stopped after its checkpoint
              at step 4, its checkpoint.bin the input (tests/fuzz/checkpoint_input.hpp:
              a mode byte, then the file as it stands or resealed here)

Each must end with exit 0 or 2 (a result, or bad input refused with a message;
for a checkpoint also 3: a resealed one may hold values that diverge), never a crash, a sanitizer report, exit 1 ("internal error") or a hang. The
input format (file, then --set values after NUL bytes) is tests/fuzz/fuzz_input.hpp's.

Usage: replay.py BITLAB [--seeds N]   (N seeds of each kind, default 6)
Prints one line per failure and "N passed, N failed"; exit 1 on any failure.
"""
import argparse
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
KINDS = ("experiment", "sweep", "cost", "checkpoint")
TIMEOUT_S = 120  # validate builds real data sets (Fashion-MNIST: seconds; more under ASan)


def command(bitlab, kind, file, sets, scratch):
    flags = [a for s in sets for a in ("--set", s)]
    if kind == "experiment":
        return [bitlab, "validate", file, *flags]
    if kind == "sweep":
        return [bitlab, "sweep", file, "--merge", "--out", str(scratch / "no-sweep"), "--quiet"]
    return [bitlab, "cost", file, *flags, "--json"]


def fnv1a64(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def checkpoint_bytes(data):
    """checkpoint_input.hpp's checkpoint_bytes: mode byte 0, as it stands; 1, resealed."""
    if not data:
        return b""
    body = data[1:]
    if data[0] & 1 == 0:
        return body
    body += struct.pack("<H", len(b"checksum")) + b"checksum" + bytes([48 + 8]) + \
        struct.pack("<Q", 1)
    return body + struct.pack("<Q", fnv1a64(body))


def resume_command(bitlab, data, scratch, checkpoint_run):
    run = scratch / "run"
    shutil.copytree(checkpoint_run, run)
    (run / "checkpoint.bin").write_bytes(checkpoint_bytes(data))
    return [bitlab, "run", "--resume", str(run), "--quiet"]


def replay(bitlab, kind, path, scratch, checkpoint_run):
    """None when the input was handled as promised, else what went wrong."""
    if kind == "checkpoint":
        argv = resume_command(bitlab, path.read_bytes(), scratch, checkpoint_run)
    else:
        parts = path.read_bytes().split(b"\0")
        file = scratch / "input.json"
        file.write_bytes(parts[0])
        sets = [p.decode("utf-8", "surrogateescape") for p in parts[1:]]
        argv = command(bitlab, kind, str(file), sets, scratch)
    try:
        r = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, cwd=scratch)
    except subprocess.TimeoutExpired:
        return f"no answer in {TIMEOUT_S} s"
    err = r.stderr.decode(errors="replace")
    # A resealed checkpoint may hold any values: NaN moments resume into a
    # diverged run (exit 3), an honest outcome.
    allowed = (0, 2, 3) if kind == "checkpoint" else (0, 2)
    if r.returncode not in allowed or "internal error" in err or "Sanitizer" in err:
        return f"exit {r.returncode}: {err.strip()[-600:]}"
    return None


def inputs(seed_count, seeds):
    """(kind, path) of every regression input, then a spread sample of seeds."""
    for kind in KINDS:
        for path in sorted((HERE / "regression" / kind).glob("*")):
            if path.is_file() and path.name != "README.md":
                yield kind, path
    for kind in KINDS:
        files = sorted((seeds / kind).glob("*"))
        step = max(1, len(files) // seed_count)
        for path in files[::step][:seed_count]:
            yield kind, path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bitlab")
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    bitlab = str(pathlib.Path(args.bitlab).resolve())
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="bitlab-replay-") as tmp:
        scratch = pathlib.Path(tmp)
        seeds = scratch / "seeds"
        # The seeds, and the run folder every checkpoint input is resumed in.
        with open(scratch / "seeds.log", "w") as log:
            subprocess.run([sys.executable, str(HERE / "make_seeds.py"), str(seeds),
                            "--bitlab", bitlab], check=True, stdout=log)
        for kind, path in inputs(args.seeds, seeds):
            work = scratch / "work"
            work.mkdir(exist_ok=True)
            problem = replay(bitlab, kind, path, work, seeds / "checkpoint-run")
            if problem is None:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {kind} {path.name}: {problem}")
            shutil.rmtree(work)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
