#!/usr/bin/python3
"""Tests of report.py's display-only down-sampling (lttb) and label shortening
(hypothesis). Run by the `report` test suite (tests/test_report.cpp), or alone:
/usr/bin/python3 notebooks/test_report_curves.py (exit 0: all held)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hypothesis import given, settings, strategies as st  # noqa: E402

from report import lttb, shorten  # noqa: E402

FINITE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


class Lttb(unittest.TestCase):
    @settings(max_examples=300, deadline=None, database=None)
    @given(st.lists(FINITE, min_size=1, max_size=400), st.integers(min_value=3, max_value=50))
    def test_indices(self, ys, n):
        xs = list(range(len(ys)))
        keep = lttb(xs, ys, n)
        self.assertEqual(keep, sorted(set(keep)))  # increasing, each point once
        self.assertEqual(keep[0], 0)
        self.assertEqual(keep[-1], len(ys) - 1)  # the last step is always drawn
        self.assertLessEqual(len(keep), max(n, 1) if len(ys) > n else len(ys))
        if len(ys) <= n:
            self.assertEqual(keep, xs)

    @settings(max_examples=100, deadline=None, database=None)
    @given(st.integers(min_value=1, max_value=998), st.integers(min_value=20, max_value=300))
    def test_a_spike_survives(self, at, n):
        # A stride of 1000 points down to n would miss a one-point spike; lttb keeps it.
        ys = [1.0] * 1000
        ys[at] = 50.0
        keep = lttb(list(range(1000)), ys, n)
        self.assertIn(at, keep)


class Shorten(unittest.TestCase):
    @settings(max_examples=300, deadline=None, database=None)
    @given(st.text(max_size=200), st.integers(min_value=5, max_value=80))
    def test_both_ends_kept(self, text, limit):
        out = shorten(text, limit)
        if len(text) <= limit:
            self.assertEqual(out, text)
            return
        self.assertEqual(len(out), limit)
        head, tail = out.split("…", 1) if "…" not in text else (None, None)
        if head is not None:
            self.assertTrue(text.startswith(head) and text.endswith(tail))
            self.assertGreater(len(tail), 0)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-q"])
