#!/usr/bin/python3
"""One self-contained report.html for a run, a sweep or a results tree (behind
`bitlab report`).

Usage: report.py [--out FILE] [--baseline RUN|PATH=VALUE] [--title T] [--metric M] DIR

The page embeds plotly.js (Debian's python3-plotly) and all the data, so it opens from
disk with no server and no network. It holds: a sortable runs table (click a header) with
each run's folder, optimizer, the values that differ between runs, status, final metrics,
bytes sent per worker, simulated time and, given a baseline, the speed-up (baseline's
simulated time over the run's; bytes where the runs have no time model) and the loss gap
(final train_loss minus the baseline's); loss against steps, bytes and simulated time (one
trace per run: hover for values, click the legend to hide a run, buttons for log axes);
per-phase steps, bytes and time; bytes by collective from each run's comm_log.csv. The loss
plots open on a y range without the runs that blew up (double-click for all of it).

Every string from the runs (folder names, config values, statuses, metric and phase names,
comm_log.csv's ops, the title) is escaped for where it lands: esc() for HTML text and
attribute values, plotly_text() for the text plotly draws (it reads a few HTML tags and
entities), script_json() for the figures' JSON, which sits in <script type=
"application/json"> data blocks that never run. The page's Content-Security-Policy allows
only its own three inline scripts, by their SHA-256 hashes (content_security_policy()):
nothing else on the page can run, even if something slipped through the escaping, and it
works from file:// because the policy is in the page itself.

Once loaded, the page writes what it shows into <div id="bitlab-checks">: data-traces (the
traces plotted), data-rows (the table's rows), data-errors (JavaScript errors caught),
data-csp (scripts or other content the policy blocked), data-plotly (plotly.js's version)
and data-expected-traces / data-expected-rows (what this script put in), which the `report`
test suite reads from headless Chromium.

Exit status (bitlab_files.py): 0 done; 2 bad input (no runs, an unknown baseline, --out a
folder, a run's file that is not UTF-8 text, valid csv or JSON, a summary.json field of the
wrong type) or plotly missing, with one line `bitlab: error: <file>: <what>`; 4 the page
cannot be written (naming it and the system's reason); 1 a bug.
"""

import argparse
import base64
import hashlib
import html
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bitlab_files import (InputError, check_out_folder, read_csv_dicts,  # noqa: E402
                          run_main, write_stdout, write_text_atomic)
from plot import BLOWUP_FACTOR, Run, find_runs, format_value, group_runs  # noqa: E402
from runs import human_bytes, human_duration, run_record  # noqa: E402

PLOTLY_MISSING = ("plotly is not installed for /usr/bin/python3: install the Debian package "
                  "python3-plotly (apt-get install python3-plotly)")
FIGURE_HEIGHT = 420  # pixels
LOSS_AXES = [("step", "step"), ("bytes_sent_cum", "bytes sent per worker"),
             ("sim_time_s", "simulated time (s)")]


# ---------------------------------------------------------------- escaping


def esc(value):
    """HTML text or a quoted attribute value: & < > " ' as character references."""
    return html.escape(str(value), quote=True)


def plotly_text(value):
    """A string plotly draws (trace names, categories, axis titles): plotly reads <b>, <br>,
    <a href> ... and entities in them, so & < > become entities, which it shows as the
    characters."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def script_json(text):
    """JSON text made safe inside <script type="application/json">: < > & (which JSON holds
    only inside strings) and the line separators U+2028/9 as \\u escapes, so that no
    </script>, <!-- or <script can end or change the data block; JSON.parse gives back the
    same value."""
    for char in "&<>\u2028\u2029":
        text = text.replace(char, "\\u%04x" % ord(char))
    return text


def sort_value(raw):
    """A table cell's raw value as JSON for data-sort (NaN and infinities as null)."""
    if isinstance(raw, float) and not math.isfinite(raw):
        return "null"
    return json.dumps(raw)


def select_baseline(spec, runs, records):
    """Indices of the baseline runs: a folder (relative to DIR or as given) or PATH=VALUE."""
    if not spec:
        return []
    # A run folder first (sweep folder names hold '=' too), then PATH=VALUE.
    norm = os.path.normpath(spec)
    hits = [i for i, rec in enumerate(records)
            if os.path.normpath(rec["run"]) == norm or
            os.path.realpath(rec["path"]) == os.path.realpath(spec)]
    if not hits and "=" in spec:
        path, text = spec.split("=", 1)
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        hits = [i for i, r in enumerate(runs)
                if any(r.config.get(p) == value for p in r.config
                       if p == path or p.endswith("." + path))]
    if not hits:
        raise InputError("--baseline %s: matches none of the %d runs (give a run folder below "
                         "DIR, e.g. %s, or PATH=VALUE, e.g. optimizer.name=adam)"
                         % (spec, len(runs), records[0]["run"]))
    return hits


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def table(runs, records, labels, baseline):
    metrics = []
    for rec in records:
        for k in rec["final"]:
            if k not in metrics:
                metrics.append(k)
    base_time = mean([records[i]["sim_time_s"] for i in baseline])
    base_bytes = mean([records[i]["bytes_sent_per_worker"] for i in baseline])
    base_loss = mean([records[i]["final"].get("train_loss") for i in baseline])
    head = ["run", "optimizer", "varies", "seed", "status", "steps"] + metrics + [
        "bytes / worker", "simulated time"]
    if baseline:
        head += ["speed-up", "loss gap"]
    twins = any(rec.get("twin") for rec in records)
    if twins:  # runs with "baseline": "twin": their gaps to their own twin
        head += ["speed-up vs twin", "bytes vs twin", "loss gap vs twin"]
    rows = []
    for rec, label in zip(records, labels):
        cells = [(rec["run"], rec["run"]), (rec["optimizer"], rec["optimizer"]),
                 (label, label), (rec["seed"], rec["seed"]), (rec["status"], rec["status"]),
                 (rec["steps"], rec["steps"])]
        cells += [(rec["final"].get(m), "" if rec["final"].get(m) is None else
                   "%.4g" % rec["final"][m]) for m in metrics]
        cells += [(rec["bytes_sent_per_worker"], human_bytes(rec["bytes_sent_per_worker"])),
                  (rec["sim_time_s"], human_duration(rec["sim_time_s"]))]
        if baseline:
            if base_time and rec["sim_time_s"]:
                speed = base_time / rec["sim_time_s"]
            elif base_bytes and rec["bytes_sent_per_worker"]:
                speed = base_bytes / rec["bytes_sent_per_worker"]
            else:
                speed = None
            loss = rec["final"].get("train_loss")
            gap = loss - base_loss if loss is not None and base_loss is not None else None
            cells += [(speed, "" if speed is None else "%.2f×" % speed),
                      (gap, "" if gap is None else "%+.4g" % gap)]
        if twins:
            twin = rec.get("twin") or {}
            speed, ratio = twin.get("speedup"), twin.get("bytes_ratio")
            gap = (twin.get("gap") or {}).get("train_loss")
            cells += [(speed, "" if speed is None else "%.2f×" % speed),
                      (ratio, "" if ratio is None else "%.3g" % ratio),
                      (gap, "" if gap is None else "%+.4g" % gap)]
        rows.append(cells)
    out = ["<table id='runs'><thead><tr>"]
    out += ["<th data-col='%d'>%s</th>" % (i, esc(h)) for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for k, cells in enumerate(rows):
        cls = " class='baseline'" if k in baseline else ""
        out.append("<tr%s>" % cls + "".join(
            "<td data-sort='%s'>%s</td>" % (esc(sort_value(raw)), esc(text))
            for raw, text in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out), len(rows)


def loss_figure(go, runs, names, x, title, metric):
    """One trace per run (names: already plotly_text). The initial y range leaves out runs
    that blew up (past plot.BLOWUP_FACTOR times the median first value, as `bitlab plot`
    does); double-click the plot for the whole range."""
    fig = go.Figure()
    series = []
    for run, name in zip(runs, names):
        if x not in run.columns or metric not in run.columns:
            continue
        pts = [v for _, v in sorted(run.series(x, metric).items())]
        if pts:
            series.append((name, pts))
    if not series:
        return None
    firsts = sorted(abs(pts[0][1]) for _, pts in series)
    limit = BLOWUP_FACTOR * firsts[len(firsts) // 2]
    kept = []
    for name, pts in series:
        ys = [p[1] for p in pts]
        blew_up = limit > 0 and max(abs(y) for y in ys) > limit
        if not blew_up:
            kept.extend(ys)
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=ys, mode="lines",
                                 name=name + (" (blew up)" if blew_up else ""),
                                 hovertemplate="%{x:.4g}, %{y:.4g}"))
    if kept and len(kept) < sum(len(p) for _, p in series):
        lo, hi = min(kept), max(kept)
        pad = 0.05 * (hi - lo) or 0.05 * abs(hi) or 1.0
        fig.update_yaxes(range=[lo - pad, hi + pad])
    axis_buttons = [dict(label=lab, method="relayout", args=[{"xaxis.type": xt,
                                                              "yaxis.type": yt}])
                    for lab, xt, yt in (("linear", "linear", "linear"),
                                        ("log y", "linear", "log"),
                                        ("log x, log y", "log", "log"))]
    fig.update_layout(xaxis_title=title, yaxis_title=plotly_text(metric), height=FIGURE_HEIGHT,
                      margin=dict(t=50, r=10), hovermode="closest",
                      updatemenus=[dict(type="buttons", direction="right", x=0, y=1.02,
                                        xanchor="left", yanchor="bottom",
                                        buttons=axis_buttons)])
    return fig


def phase_figure(go, records, names, runs):
    quantities = [("steps", "steps"), ("bytes_sent_per_worker", "bytes / worker"),
                  ("comm_s", "communication time (s)")]
    phases = []
    for r in runs:
        for p in (r.summary.get("phases") or {}):
            if p not in phases:
                phases.append(p)
    if not phases:
        return None
    from plotly.subplots import make_subplots
    import plotly.colors
    palette = plotly.colors.qualitative.Plotly
    fig = make_subplots(rows=1, cols=3, subplot_titles=[q[1] for q in quantities])
    for k, phase in enumerate(phases):
        for c, (q, _) in enumerate(quantities):
            ys = [((r.summary.get("phases") or {}).get(phase) or {}).get(q) for r in runs]
            fig.add_trace(go.Bar(x=names, y=ys, name=plotly_text(phase), legendgroup=phase,
                                 showlegend=(c == 0), marker_color=palette[k % len(palette)],
                                 offsetgroup=k), row=1, col=c + 1)
    fig.update_layout(barmode="group", height=FIGURE_HEIGHT, margin=dict(t=40, r=10))
    fig.update_xaxes(showticklabels=len(runs) <= 12)
    return fig


def comm_figure(go, runs, names):
    by_op = []
    for r in runs:
        totals = {}
        path = os.path.join(r.path, "comm_log.csv")
        if os.path.isfile(path):
            for row in read_csv_dicts(path)[0]:
                key = "%s %s %s" % (row.get("op"), row.get("algorithm"), row.get("dtype"))
                try:
                    totals[key] = totals.get(key, 0.0) + float(row.get("sent_bytes") or 0)
                except ValueError:
                    pass
        by_op.append(totals)
    keys = sorted({k for t in by_op for k in t})
    if not keys:
        return None
    fig = go.Figure()
    for k in keys:
        fig.add_trace(go.Bar(x=names, y=[t.get(k, 0.0) for t in by_op], name=plotly_text(k)))
    fig.update_layout(barmode="stack", height=FIGURE_HEIGHT, yaxis_title="bytes sent per worker",
                      margin=dict(t=30, r=10))
    fig.update_xaxes(showticklabels=len(runs) <= 12)
    return fig


# The page's own scripts. The Content-Security-Policy allows these and plotly.js by their
# SHA-256 hashes: they must not depend on the runs (the data reaches them through the
# JSON data blocks and data-* attributes), so that nothing taken from a run folder runs.
HEAD_JS = """
window.bitlabErrors = [];
window.bitlabBlocked = [];
window.addEventListener("error", function (e) { window.bitlabErrors.push(String(e.message)); });
document.addEventListener("securitypolicyviolation", function (e) {
  window.bitlabBlocked.push(e.violatedDirective + " " + (e.blockedURI || e.sample || ""));
});
"""

BODY_JS = """
(function () {
  document.querySelectorAll("script.bitlab-figure").forEach(function (s) {
    var fig = JSON.parse(s.textContent);
    Plotly.newPlot(document.getElementById(s.dataset.div), fig.data, fig.layout,
                   {displaylogo: false, responsive: true});
  });
  var t = document.getElementById("runs");
  t.querySelectorAll("th").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = +th.dataset.col, body = t.tBodies[0], asc = th.dataset.asc !== "1";
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = JSON.parse(a.cells[col].dataset.sort), y = JSON.parse(b.cells[col].dataset.sort);
        if (x === y) return 0;
        if (x === null) return 1;
        if (y === null) return -1;
        return (x < y ? -1 : 1) * (asc ? 1 : -1);
      });
      rows.forEach(function (r) { body.appendChild(r); });
      th.dataset.asc = asc ? "1" : "0";
    });
  });
  window.addEventListener("load", function () {
    var traces = 0;
    document.querySelectorAll(".js-plotly-plot").forEach(function (d) {
      traces += (d.data || []).length;
    });
    var c = document.getElementById("bitlab-checks");
    c.dataset.traces = traces;
    c.dataset.rows = t.tBodies[0].rows.length;
    c.dataset.errors = JSON.stringify(window.bitlabErrors);
    c.dataset.csp = JSON.stringify(window.bitlabBlocked);
    c.dataset.plotly = typeof Plotly === "undefined" ? "missing" : Plotly.version;
  });
})();
"""

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{title}</title>
<script>{head_js}</script>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ padding: 3px 8px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }}
th {{ cursor: pointer; background: #f3f3f3; position: sticky; top: 0; }}
td:nth-child(-n+3), th:nth-child(-n+3) {{ text-align: left; }}
tr.baseline {{ background: #fff6d8; }}
.note {{ color: #555; font-size: 13px; }}
</style>
<script>{plotlyjs}</script>
</head><body>
<h1>{title}</h1>
<p class="note">{summary}</p>
<h2>Runs</h2>
<p class="note">Click a column to sort. {baseline_note}</p>
<div style="overflow-x: auto; max-height: 32em;">
{table}
</div>
{figures}
<div id="bitlab-checks" data-expected-traces="{traces}" data-expected-rows="{rows}"></div>
<script>{body_js}</script>
</body></html>
"""

FIGURE = """<h2>{heading}</h2>
<div id="{div}" class="plotly-graph-div" style="height:{height}px; width:100%;"></div>
<script type="application/json" class="bitlab-figure" data-div="{div}">{spec}</script>"""


def script_hash(js):
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode()


def content_security_policy(scripts):
    """Only the given inline scripts run (by hash: no 'unsafe-inline', so neither an
    injected <script> nor an onerror= attribute nor a javascript: link can); nothing loads
    from anywhere (default-src 'none'), but for plotly's inline styles and its data:/blob:
    images (the modebar's download). A <meta> policy holds for a page opened from disk."""
    return ("default-src 'none'; script-src %s; style-src 'unsafe-inline'; "
            "img-src data: blob:; font-src data:; base-uri 'none'; form-action 'none'"
            % " ".join(script_hash(js) for js in scripts))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="report.py", description=__doc__.split("\n")[0])
    parser.add_argument("dir", metavar="DIR")
    parser.add_argument("--out", help="the page (default DIR/report.html)")
    parser.add_argument("--baseline", help="a run folder below DIR, or PATH=VALUE")
    parser.add_argument("--title")
    parser.add_argument("--metric", default="train_loss",
                        help="metrics.csv column of the curves (default train_loss; e.g. "
                             "train_loss_full, eval_loss)")
    args = parser.parse_args(argv)
    paths, sweep_columns = find_runs([args.dir])
    out = args.out or os.path.join(args.dir, "report.html")
    check_out_folder("--out", out)
    runs = [Run(p) for p in paths]
    records = [run_record(r, args.dir) for r in runs]
    baseline = select_baseline(args.baseline, runs, records)
    metric = args.metric
    if not any(metric in r.columns for r in runs):
        raise InputError("--metric %r is in no run's metrics.csv; %s has: %s"
                         % (metric, os.path.join(runs[0].path, "metrics.csv"),
                            ", ".join(runs[0].columns)))
    try:
        import plotly.graph_objects as go
        import plotly.io
        import plotly.offline
    except ImportError:
        raise InputError(PLOTLY_MISSING) from None

    groups, paths_varying, short = group_runs(runs, sweep_columns)
    label_of = {}
    for g in groups:
        text = ", ".join("%s=%s" % (short[p], format_value(v)) for p, v in g.values.items())
        for m in g.members:
            label_of[id(m)] = text
    labels = [label_of.get(id(r), "") for r in runs]
    # Traces are named by what differs (and the seed), else by the run's folder.
    names = [plotly_text("%s, seed=%s" % (lab, rec["seed"]) if lab else rec["run"])
             for lab, rec in zip(labels, records)]
    table_html, nrows = table(runs, records, labels, baseline)

    figures = []
    for x, title in LOSS_AXES:
        fig = loss_figure(go, runs, names, x, title, metric)
        if fig is not None:
            figures.append(("Loss against " + title, fig))
    for name, fig in (("Per phase: steps, bytes and communication time",
                       phase_figure(go, records, names, runs)),
                      ("Bytes sent by collective (comm_log.csv: op, algorithm, dtype)",
                       comm_figure(go, runs, names))):
        if fig is not None:
            figures.append((name, fig))
    parts = [FIGURE.format(heading=esc(heading), div="bitlab-figure-%d" % k,
                           height=FIGURE_HEIGHT,
                           spec=script_json(plotly.io.to_json(fig, validate=False)))
             for k, (heading, fig) in enumerate(figures)]
    traces = sum(len(fig.data) for _, fig in figures)

    title = args.title or default_title(args.dir)
    statuses = {}
    for rec in records:
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
    summary = esc("%d runs (%s) under %s." % (len(records), ", ".join(
        "%d %s" % (n, s) for s, n in sorted(statuses.items())), os.path.abspath(args.dir)))
    baseline_note = esc("Baseline (highlighted): %s; speed-up = its simulated time (else bytes) "
                        "over the run's, loss gap = final train_loss minus its."
                        % ", ".join(records[i]["run"] for i in baseline)
                        if baseline else "No baseline marked (bitlab report --baseline RUN).")
    plotlyjs = plotly.offline.get_plotlyjs()
    page = PAGE.format(title=esc(title), summary=summary, table=table_html,
                       figures="\n".join(parts), traces=traces, rows=nrows,
                       baseline_note=baseline_note, head_js=HEAD_JS, body_js=BODY_JS,
                       plotlyjs=plotlyjs,
                       csp=esc(content_security_policy([HEAD_JS, plotlyjs, BODY_JS])))
    write_text_atomic(out, page)
    print("report: %d runs, %d traces" % (len(records), traces), file=sys.stderr)
    write_stdout(out + "\n")
    return 0


def default_title(d):
    try:
        with open(os.path.join(d, "sweep.json")) as f:
            return "bitlab report: " + str(json.load(f)["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return "bitlab report: " + os.path.basename(os.path.abspath(d))


if __name__ == "__main__":
    sys.exit(run_main(main))
