"""Unit tests of the claims tools (figure.py, gap.py, check.py, table.py) on hand-made inputs.
Run: /usr/bin/python3 -m pytest -q -p no:cacheprovider experiments/claims/test_tools.py
(CTest: claims_tools). Needs no bitlab binary."""
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402
import figure  # noqa: E402
import gap  # noqa: E402
import table  # noqa: E402

REPORT = {"speedup": {"vs_adam_fp16": 3.5},
          "optimizer": {"total_s": 10.0, "total_sent_bytes_per_worker": 400.0,
                        "phases": [{"name": "warmup", "steps": 15, "messages_per_worker": 30},
                                   {"name": "local", "steps": 80, "messages_per_worker": 0},
                                   {"name": "sync", "steps": 5, "messages_per_worker": 60,
                                    "step_s": 0.25}]}}


def run_figure(capsys, tmp_path, expr, **reports):
    args = [expr]
    for name, rep in reports.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(rep))
        args.append(f"{name}={path}")
    status = figure.main(args)
    out = capsys.readouterr()
    return status, out.out.strip(), out.err


def test_figure_paths_phases_and_helpers(capsys, tmp_path):
    assert run_figure(capsys, tmp_path, "x.speedup.vs_adam_fp16", x=REPORT)[1] == "3.5"
    assert run_figure(capsys, tmp_path, "speedup.vs_adam_fp16", x=REPORT)[1] == "3.5"  # bare path
    assert run_figure(capsys, tmp_path, "x.optimizer.phases.sync.step_s", x=REPORT)[1] == "0.25"
    # rounds: steps of the phases that send anything = 15 + 5 (the local phase sends nothing)
    assert run_figure(capsys, tmp_path, "rounds(x)", x=REPORT)[1] == "20"
    half = json.loads(json.dumps(REPORT))
    half["optimizer"]["total_sent_bytes_per_worker"] = 100.0
    assert run_figure(capsys, tmp_path, "100 * (1 - volume(z) / volume(o))", z=half, o=REPORT)[1] == "75"


@pytest.mark.parametrize("expr, message", [
    ("__import__('os')", "not allowed"),
    ("x.speedup.nope", "no field or phase 'nope'"),
    ("x.optimizer.phases", "not a number"),
    ("y.speedup", "x: no field or phase 'y'"),  # a bare path walks x
    ("1 / (x.optimizer.total_s - 10)", "divides by zero"),
    ("x.speedup.", "invalid syntax"),
])
def test_figure_rejects_bad_expressions_with_exit_2(capsys, tmp_path, expr, message):
    status, out, err = run_figure(capsys, tmp_path, expr, x=REPORT)
    assert status == 2 and out == "" and message in err


def test_figure_names_a_missing_report(capsys, tmp_path):
    status, out, err = run_figure(capsys, tmp_path, "y.speedup", z=REPORT)
    assert status == 2 and "no report named 'y' (given: z)" in err


def test_gap_interval_by_hand():
    # gaps 1..5 %: mean 3, sd sqrt(2.5), half-width t(0.975, 4) = 2.776 x sd / sqrt(5)
    base = {str(s): 1.0 for s in range(1, 6)}
    arm = {str(s): 1.0 + s / 100 for s in range(1, 6)}
    seeds, gaps, mean, lower, upper = gap.gap_interval(arm, base)
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert seeds == ["1", "2", "3", "4", "5"]
    assert mean == pytest.approx(3.0) and lower == pytest.approx(3 - half)
    assert upper == pytest.approx(3 + half)  # 4.963
    assert gap.verdict(lower, upper, 5.0) == "reproduced"
    assert gap.verdict(lower, upper, 4.9) == "partly"   # the interval straddles 4.9
    assert gap.verdict(lower, upper, 1.0) == "refuted"  # 1.037 > 1: wholly above


def test_gap_needs_five_paired_seeds():
    four = {str(s): 1.0 for s in range(1, 5)}
    with pytest.raises(gap.GapError, match="at least 5"):
        gap.gap_interval(four, four)


def test_check_tolerance_is_one_percent():
    assert check.agrees(1.0099, 1.0) and check.agrees(-5.05, -5.0)
    assert not check.agrees(1.011, 1.0) and not check.agrees(0.989, 1.0)


def test_check_reads_only_exact_columns_and_known_verdicts(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text(",".join(check.COLUMNS) + "\nP,c,2x,1.9x,partly,r,bitlab cost a.json\n")
    rows = check.read_table(str(good))
    assert check.kind(rows[0]) == "cost" and check.recorded(rows[0]) == 1.9
    for text, message in [("paper,claim\nP,c\n", "must be exactly"),
                          (good.read_text().replace("partly", "maybe"), "verdict = 'maybe'"),
                          (good.read_text().replace("bitlab cost a.json", ""), "command is empty"),
                          (good.read_text().replace("1.9x", "about two"), "must start with a number")]:
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(check.TableError, match=message):
            check.read_table(str(bad))


def test_table_escapes_pipes_and_html():
    row = dict(zip(check.COLUMNS, ["P", "a | b <i>", "2x", "1x", "refuted", "S <= 2 & x",
                                   "bitlab cost a.json --json | python3 f.py x"]))
    text = table.render([row])
    assert "a \\| b &lt;i&gt;" in text and "S &lt;= 2 &amp; x" in text
    assert "```sh\nbitlab cost a.json --json | python3 f.py x\n```" in text  # fenced: unescaped
    assert "### row 1" in text and "1 refuted" in text
