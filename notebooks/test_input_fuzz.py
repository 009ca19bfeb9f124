#!/usr/bin/python3
"""Property tests of the input readers of plot.py, runs.py and report.py (hypothesis):
whatever a run or sweep folder holds, each tool ends with exit status 0 or 2 and one
`bitlab: error: <file>: ...` line, never 1 ("internal error") or a traceback
(docs/results.md, exit statuses of plot, runs and report). Run by the `report` test suite
(tests/test_report.cpp), or alone:

    BITLAB_BINARY=build/bitlab /usr/bin/python3 notebooks/test_input_fuzz.py

A real two-run sweep (written once by `bitlab sweep`, BITLAB_BINARY or build/bitlab) is
the template; each example damages one of its files (random bytes, random text, a byte
flipped, inserted or cut, a JSON field or the whole document replaced by a random JSON
value, a csv cell replaced or a row cut) and runs the tools in this process on the copy.
A failing input is printed by hypothesis; one worth keeping becomes a case of the plot or
report suite.
"""

import contextlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import bitlab_files  # noqa: E402
import runs as runs_tool  # noqa: E402

EXPERIMENT = {"name": "fuzztpl", "steps": 6, "eval_every": 3,
              "problem": {"name": "logistic", "dim": 5, "samples": 64},
              "cluster": {"workers": 2, "batch_size": 4},
              "optimizer": {"name": "onebit_adam", "lr": 0.05, "freeze_step": 2},
              "network": {"preset": "ethernet_10g_a100x8"}}
SWEEP = {"name": "fuzztpl", "base": "exp.json", "grid": {"optimizer.lr": [0.05, 0.01]},
         "seeds": [1]}
# The files a damaged example may touch: each run's, and the sweep's.
RUN_FILES = ["metrics.csv", "comm_log.csv", "summary.json", "config.json", "manifest.json"]
SWEEP_FILES = ["sweep.csv", "sweep.json"]


def bitlab_binary():
    given_path = os.environ.get("BITLAB_BINARY")
    if given_path:
        return given_path
    built = HERE.parent / "build" / "bitlab"
    return str(built) if built.exists() else None


def make_template(folder):
    """A real sweep of two runs in folder/sweep (None when no bitlab binary is found)."""
    binary = bitlab_binary()
    if binary is None:
        return None
    (folder / "exp.json").write_text(json.dumps(EXPERIMENT))
    (folder / "sweep.json").write_text(json.dumps(SWEEP))
    subprocess.run([binary, "sweep", str(folder / "sweep.json"), "--quiet", "--jobs", "1",
                    "--out", str(folder / "sweep")], check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    return folder / "sweep"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) |
    st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=10)


def json_leaves(value, path=()):
    """Every (path, value) of a JSON document, objects and arrays included."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from json_leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_leaves(v, path + (i,))


def replaced(doc, path, new):
    if not path:
        return new
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return doc


@st.composite
def damage(draw, original, name):
    """New bytes for a file that held `original`."""
    kind = draw(st.sampled_from(["bytes", "text", "flip", "insert", "cut", "structured"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "text":
        return draw(st.text(max_size=200)).encode("utf-8", "surrogatepass")
    if kind in ("flip", "insert", "cut") and original:
        at = draw(st.integers(0, len(original) - 1))
        byte = bytes([draw(st.integers(0, 255))])
        if kind == "flip":
            return original[:at] + byte + original[at + 1:]
        if kind == "insert":
            return original[:at] + byte + original[at:]
        return original[:at]
    text = original.decode("utf-8")
    if name.endswith(".json"):
        doc = json.loads(text)
        paths = [p for p, _ in json_leaves(doc)]
        path = draw(st.sampled_from(paths))
        return json.dumps(replaced(doc, path, draw(JSON_VALUES))).encode()
    rows = [line.split(",") for line in text.splitlines()]
    r = draw(st.integers(0, len(rows) - 1))
    c = draw(st.integers(0, len(rows[r]) - 1))
    if draw(st.booleans()):
        rows[r] = rows[r][:c]  # a row cut short
    else:
        rows[r][c] = draw(st.text(alphabet=st.characters(blacklist_categories=["Cs"]),
                                  max_size=12) | st.sampled_from(["nan", "inf", "-1", "1e400",
                                                                  "", "x", "9" * 30]))
    return ("\n".join(",".join(row) for row in rows) + "\n").encode("utf-8")


def run_tool(tool_main, argv):
    """(exit status, stderr) of a tool's main through bitlab_files.run_main, here."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = bitlab_files.run_main(tool_main, argv)
    return status, err.getvalue()


class DamagedFolders(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = pathlib.Path(tempfile.mkdtemp(prefix="bitlab-input-fuzz-"))
        cls.template = make_template(cls.scratch)
        if cls.template is None:
            raise unittest.SkipTest("no bitlab binary (set BITLAB_BINARY or build build/bitlab)")
        cls.run_dirs = sorted(p.name for p in cls.template.iterdir() if p.is_dir())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def damaged_copy(self, data):
        """A copy of the template with one file damaged; (folder, the file's path)."""
        work = pathlib.Path(tempfile.mkdtemp(dir=self.scratch))
        tree = work / "sweep"
        shutil.copytree(self.template, tree)
        name = data.draw(st.sampled_from(RUN_FILES + SWEEP_FILES), label="file")
        where = tree if name in SWEEP_FILES else tree / data.draw(
            st.sampled_from(self.run_dirs), label="run")
        original = (where / name).read_bytes()
        (where / name).write_bytes(data.draw(damage(original, name), label="content"))
        return work, tree

    def check(self, status, err, tool):
        self.assertIn(status, (0, 2), "%s: exit %d: %s" % (tool, status, err))
        self.assertNotIn("internal error", err, tool)
        self.assertNotIn("Traceback", err, tool)
        if status == 2:  # notes may come first; the error is the last line
            self.assertTrue(err.strip().splitlines()[-1].startswith("bitlab: error: "), err)

    @settings(max_examples=int(os.environ.get("BITLAB_FUZZ_EXAMPLES", "150")), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def test_runs_reads_any_folder(self, data):
        work, tree = self.damaged_copy(data)
        for fmt in ([], ["--json"], ["--csv"]):
            self.check(*run_tool(runs_tool.main, [str(tree)] + fmt), "runs")
        shutil.rmtree(work)

    @settings(max_examples=int(os.environ.get("BITLAB_FUZZ_EXAMPLES", "150")) // 3,
              deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                    HealthCheck.data_too_large])
    @given(st.data())
    def test_report_reads_any_folder(self, data):
        try:
            import plotly  # noqa: F401
            import report as report_tool
        except ImportError:
            self.skipTest("plotly is not importable (Debian package python3-plotly)")
        work, tree = self.damaged_copy(data)
        self.check(*run_tool(report_tool.main, [str(tree), "--out", str(work / "r.html")]),
                   "report")
        shutil.rmtree(work)

    @settings(max_examples=int(os.environ.get("BITLAB_FUZZ_EXAMPLES", "150")) // 6,
              deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                    HealthCheck.data_too_large])
    @given(st.data())
    def test_plot_reads_any_folder(self, data):
        try:
            import matplotlib  # noqa: F401
            import plot as plot_tool
        except ImportError:
            self.skipTest("matplotlib is not importable (Debian package python3-matplotlib)")
        work, tree = self.damaged_copy(data)
        # PNG only would be quicker, but the tool always writes all three formats.
        self.check(*run_tool(plot_tool.main, [str(tree), "--out", str(work / "fig")]), "plot")
        shutil.rmtree(work)


if __name__ == "__main__":
    unittest.main()
