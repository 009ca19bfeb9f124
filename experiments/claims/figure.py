#!/usr/bin/env python3
"""Print one figure computed from `bitlab cost --json` reports: the last step of every cost row
in claims.csv.

    bitlab cost SPEC --json | python3 experiments/claims/figure.py 'speedup.vs_adam_fp16'
    python3 experiments/claims/figure.py 'a.optimizer.total_s / b.optimizer.total_s' \
        a=<(bitlab cost A --json) b=<(bitlab cost B --json)

EXPR is an arithmetic expression over the reports. A report read from stdin is `x`; NAME=FILE
binds NAME. Dotted paths walk the JSON (`x.speedup.vs_adam_fp16`; a bare path like
`speedup.vs_adam_fp16` means `x.…`), a list of phases is indexed by phase name
(`x.optimizer.phases.compressed.step_s`), and three helpers read a whole schedule:
  rounds(r)  steps that send anything (the papers' "communication rounds")
  volume(r)  bytes sent per worker over the run
  time(r)    the run's total time in seconds
The figure prints with 4 significant digits, the precision claims.csv records.
Exit status 2 on a bad expression, a missing field or an unreadable report, naming it.
"""
import ast
import json
import operator
import sys

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}


class FigureError(Exception):
    pass


def _walk(node, key, where):
    """One step of a dotted path: a dict key, or a phase name in a list of named dicts."""
    if isinstance(node, dict) and key in node:
        return node[key]
    if isinstance(node, list):
        for item in node:
            if isinstance(item, dict) and item.get("name") == key:
                return item
    raise FigureError(f"{where}: no field or phase '{key}'")


def _phases(report):
    return _walk(_walk(report, "optimizer", "report"), "phases", "report.optimizer")


def _rounds(report):
    return sum(p["steps"] for p in _phases(report) if p["messages_per_worker"] > 0)


def _volume(report):
    return _walk(report, "optimizer", "report")["total_sent_bytes_per_worker"]


def _time(report):
    return _walk(report, "optimizer", "report")["total_s"]


_HELPERS = {"rounds": _rounds, "volume": _volume, "time": _time}


def _path(node):
    """The dotted path an Attribute/Name chain spells, as a list of keys."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise FigureError("expression: only names, dotted paths, numbers, + - * / and "
                          "rounds()/volume()/time() are allowed")
    parts.append(node.id)
    return parts[::-1]


def _evaluate(node, reports):
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, reports)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left, reports),
                                      _evaluate(node.right, reports))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, reports)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in _HELPERS and len(node.args) == 1:
        return float(_HELPERS[node.func.id](_resolve(_path(node.args[0]), reports)))
    if isinstance(node, (ast.Attribute, ast.Name)):
        value = _resolve(_path(node), reports)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FigureError(f"expression: '{ast.unparse(node)}' is not a number")
        return float(value)
    raise FigureError(f"expression: '{ast.unparse(node)}' is not allowed")


def _resolve(parts, reports):
    if parts[0] not in reports:
        if "x" not in reports:
            raise FigureError(f"expression: no report named '{parts[0]}' "
                              f"(given: {', '.join(sorted(reports)) or 'none'})")
        parts = ["x"] + parts
    node, where = reports[parts[0]], parts[0]
    for key in parts[1:]:
        node = _walk(node, key, where)
        where += "." + key
    return node


def _load(name, path):
    try:
        with (sys.stdin if path == "-" else open(path)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise FigureError(f"report {name}={path}: cannot read a JSON cost report ({e})")


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    try:
        reports = {}
        for arg in argv[1:]:
            name, sep, path = arg.partition("=")
            if not sep or not name.isidentifier():
                raise FigureError(f"argument '{arg}': must be NAME=FILE")
            reports[name] = _load(name, path)
        if not reports:
            reports["x"] = _load("x", "-")
        try:
            tree = ast.parse(argv[0], mode="eval")
        except SyntaxError as e:
            raise FigureError(f"expression '{argv[0]}': {e.msg}")
        value = _evaluate(tree, reports)
    except FigureError as e:
        print(f"figure.py: error: {e}", file=sys.stderr)
        return 2
    except ZeroDivisionError:
        print(f"figure.py: error: expression '{argv[0]}' divides by zero", file=sys.stderr)
        return 2
    print(f"{value:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
