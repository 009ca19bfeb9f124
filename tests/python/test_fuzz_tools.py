"""The fuzzing tools themselves (tests/fuzz/): a mutation never crashes the tool."""

import pathlib
import random
import struct
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "fuzz"))
import mutate  # noqa: E402


def archive(count):
    """An unsealed archive with one entry "x" of u8 type 20 (4-byte values) and `count`."""
    return struct.pack("<H", 1) + b"x" + bytes([20]) + struct.pack("<Q", count) + bytes(8)


class AlwaysLast(random.Random):
    """An rng that makes mutate_checkpoint nudge a count upwards, every time."""

    def choice(self, seq):
        return seq[0] if seq and seq[0] in (1, 2, 3) and len(seq) == 5 else seq[-1]

    def randrange(self, *args):
        return 0


def test_a_count_of_two_to_the_64_minus_one_plus_one_wraps_not_crashes():
    # (struct.error once a mutation set a count to 2^64 - 1 and a later one added 1)
    body = mutate.mutate_checkpoint(AlwaysLast(), archive(2**64 - 1))
    (count,) = struct.unpack_from("<Q", body, 1 + 2 + 1 + 1)
    assert count == 0


def test_many_random_mutations_never_raise():
    rng = random.Random(46)
    for count in (0, 1, 2, 2**64 - 1):
        body = archive(count)
        for _ in range(300):
            body = mutate.mutate_checkpoint(rng, body)[1:] or archive(count)
