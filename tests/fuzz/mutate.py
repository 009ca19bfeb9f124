#!/usr/bin/env python3
"""Structure-aware mutation fuzzing through the real binary, for a machine without
the instrumented build (tests/fuzz/build.sh): no coverage guidance, but mutations that
know the formats, so that most inputs get past the first check.

  checkpoint: the entries of a real checkpoint.bin (u16 name length, name, u8 type,
              u64 count, values) changed one or a few at a time: a count set to 0, 1,
              count +- 1, 2^32, 2^40, 2^62, 2^63, 2^64 - 1; a type code, a name byte or
              a value changed (NaN, inf, -1, 2^63 - 1 ...); an entry dropped or doubled;
              resealed (mode byte 1), so the change reaches the checks behind the seal;
  cost:       an experiment or cost file of experiments/ with one to three JSON values
              replaced (0, -1, 1e308, 2^63, "", [], {}, null, "15%", a long string) or
              keys removed, given to `bitlab cost FILE --json` (an experiment file is
              priced as it stands).

Each input goes through replay.py's replay(): exit 0 or 2, never 1, a signal, a
sanitizer report or a hang. A failure is written to OUT/KIND/ (default
build/fuzz/mutate-findings/KIND/, in the input format
replay.py and the libFuzzer harnesses read: copy it to tests/fuzz/regression/KIND/
once fixed).

Usage: mutate.py BITLAB KIND [--seconds S] [--seed N] [--out DIR]
"""
import argparse
import json
import pathlib
import random
import shutil
import struct
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_seeds  # noqa: E402
import replay  # noqa: E402

BOUNDARY_COUNTS = [0, 1, 2, 2**32, 2**40, 2**62, 2**63, 2**64 - 1]
U64_WRAP = 2**64  # a count is a u64: count + 1 past 2^64 - 1 wraps to 0, as in the reader


def nudged_counts(count):
    """The boundary counts and ``count`` +- 1, each a u64 (``count`` may already be
    2^64 - 1 or 0 after an earlier mutation: +1 wraps, -1 stays at 0)."""
    return BOUNDARY_COUNTS + [max(count - 1, 0), (count + 1) % U64_WRAP]


def entries(body):
    """(start, name_end, count_at, values_at, end) of each entry of an unsealed archive."""
    out, at = [], 0
    while at + 11 <= len(body):
        (n,) = struct.unpack_from("<H", body, at)
        type_at = at + 2 + n
        if type_at + 9 > len(body):
            break
        kind = body[type_at]
        size = 1 if kind == 1 else kind - 16 if kind < 32 else kind - 32 if kind < 48 else kind - 48
        (count,) = struct.unpack_from("<Q", body, type_at + 1)
        values_at = type_at + 9
        end = values_at + count * max(size, 1)
        out.append((at, type_at, type_at + 1, values_at, min(end, len(body)), size, count))
        at = end
    return out


def mutate_checkpoint(rng, body):
    body = bytearray(body)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        found = entries(bytes(body))
        if not found:
            break
        start, type_at, count_at, values_at, end, size, count = rng.choice(found)
        op = rng.randrange(7)
        if op == 0:
            new = rng.choice(nudged_counts(count))
            struct.pack_into("<Q", body, count_at, new)
        elif op == 1:
            body[type_at] = rng.choice([0, 1, 17, 20, 24, 33, 36, 40, 49, 52, 56, 255])
        elif op == 2 and type_at > start + 2:
            body[rng.randrange(start + 2, type_at)] ^= 1 << rng.randrange(8)
        elif op == 3 and end > values_at and size in (4, 8):
            at = values_at + size * rng.randrange(max((end - values_at) // size, 1))
            if at + size <= len(body):
                pick = rng.choice(["nan", "inf", "-inf", "neg", "max", "zero", "huge"])
                if size == 8:
                    value = {"nan": struct.pack("<d", float("nan")),
                             "inf": struct.pack("<d", float("inf")),
                             "-inf": struct.pack("<d", float("-inf")),
                             "neg": struct.pack("<q", -1), "max": struct.pack("<q", 2**63 - 1),
                             "zero": bytes(8), "huge": struct.pack("<d", 1e300)}[pick]
                else:
                    value = {"nan": struct.pack("<f", float("nan")),
                             "inf": struct.pack("<f", float("inf")),
                             "-inf": struct.pack("<f", float("-inf")),
                             "neg": struct.pack("<i", -1), "max": struct.pack("<i", 2**31 - 1),
                             "zero": bytes(4), "huge": struct.pack("<f", 3e38)}[pick]
                body[at:at + size] = value
        elif op == 4:
            del body[start:end]
        elif op == 5:
            body[end:end] = body[start:end]
        else:
            at = rng.randrange(len(body))
            body[at] = rng.randrange(256)
    return b"\1" + bytes(body)


VALUES = [0, -1, 1, 2**63, -2**63, 1e308, -1e308, 0.5, "", "15%", "101%", "x" * 300, [], {},
          None, True, [1, 2], {"name": "adam"}, "adam", "loco", 2**31, 1e-320]


def leaves(doc, path=()):
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, path + (k,))


def mutate_json(rng, doc):
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.choice([1, 1, 2, 3])):
        paths = [p for p in leaves(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        node = doc
        for key in path[:-1]:
            node = node[key]
        if rng.random() < 0.2:
            del node[path[-1]]
        else:
            node[path[-1]] = json.loads(json.dumps(rng.choice(VALUES)))  # a fresh copy
    return json.dumps(doc).encode()


def cost_sources():
    for path in sorted((HERE.parents[1] / "experiments").rglob("*.json")):
        doc = json.loads(path.read_text())
        if "base" not in doc and "grid" not in doc and "deepspeed_config" not in doc:
            yield doc


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bitlab")
    parser.add_argument("kind", choices=["checkpoint", "cost"])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="build/fuzz/mutate-findings")
    args = parser.parse_args()
    bitlab = str(pathlib.Path(args.bitlab).resolve())
    rng = random.Random(args.seed)
    tried = failed = 0
    with tempfile.TemporaryDirectory(prefix="bitlab-mutate-") as tmp:
        scratch = pathlib.Path(tmp)
        run_folder = scratch / "checkpoint-run"
        if args.kind == "checkpoint":
            checkpoint = make_seeds.make_checkpoint_run(bitlab, run_folder)
            body = checkpoint[:-make_seeds.SEAL_BYTES]
        else:
            sources = list(cost_sources())
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            if args.kind == "checkpoint":
                data = mutate_checkpoint(rng, body)
            else:
                data = mutate_json(rng, rng.choice(sources))
            case = scratch / "case"
            case.write_bytes(data)
            work = scratch / "work"
            work.mkdir(exist_ok=True)
            problem = replay.replay(bitlab, args.kind, case, work, run_folder)
            shutil.rmtree(work)
            tried += 1
            if problem is not None:
                failed += 1
                out = pathlib.Path(args.out) / args.kind
                out.mkdir(parents=True, exist_ok=True)
                (out / f"finding-{args.seed}-{tried}").write_bytes(data)
                print(f"FAIL {args.kind} #{tried}: {problem}")
    print(f"{args.kind}: {tried} inputs in {args.seconds:.0f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
