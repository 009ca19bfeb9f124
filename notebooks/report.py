#!/usr/bin/python3
"""One self-contained report.html for a run, a sweep or a results tree (behind
`bitlab report`).

Usage: report.py [--out FILE] [--baseline RUN|PATH=VALUE[,PATH=VALUE...]]... [--title T]
                 [--metric M] DIR

The page embeds plotly.js (Debian's python3-plotly: only its scatter and bar traces,
gzipped, plotly_bundle()) and all the data, so it opens from disk with no server and no
network. It holds, top to bottom: the warnings of the sweep and of its runs (sweep.json,
each summary.json's "warnings", sweep.csv's `warnings` column); a table of settings (runs
equal but for the seed) and a sortable table of runs, each labelled by its swept values
(plot.group_runs; the full name on hover), with, given a baseline, the speed-up (baseline's
mean simulated time over the run's; bytes where the runs have no time model) and the gap on
--metric (final value minus the baseline's mean; for a setting, the mean over its seeds with
their standard deviation and range); --metric against steps, bytes and simulated time, one
colour per setting (mean line, min-max band over seeds), down-sampled for display only
(lttb(), MAX_POINTS per curve: metrics.csv keeps every step); per-phase steps, bytes and
time; bytes by collective from each run's comm_log.csv. The curves open on a y range without
the settings that blew up (double-click for all of it).

Every string from the runs (folder names, config values, statuses, metric and phase names,
comm_log.csv's ops, the title) is escaped for where it lands: esc() for HTML text and
attribute values, plotly_text() for the text plotly draws (it reads a few HTML tags and
entities), script_json() for the figures' JSON, which sits in <script type=
"application/json"> data blocks that never run. The page's Content-Security-Policy allows
only its own three inline scripts (plotly.js among them, run from its unpacked text), by
their SHA-256 hashes (content_security_policy()):
nothing else on the page can run, even if something slipped through the escaping, and it
works from file:// because the policy is in the page itself.

Once drawn, the page writes what it shows into <div id="bitlab-checks">: data-traces (the
traces plotted), data-rows (the runs table's rows), data-errors (JavaScript errors caught),
data-csp (scripts or other content the policy blocked), data-plotly (plotly.js's version),
data-width and data-offscreen (the speed-up and gap headers lying outside the window's
width) and data-expected-traces / data-expected-rows (what this script put in), which the
`report` test suite reads from headless Chromium.

Exit status (bitlab_files.py): 0 done; 2 bad input (no runs, an unknown baseline, --out a
folder, a run's file that is not UTF-8 text, valid csv or JSON, a summary.json field of the
wrong type) or plotly missing, with one line `bitlab: error: <file>: <what>`; 4 the page
cannot be written (naming it and the system's reason); 1 a bug.
"""

import argparse
import base64
import gzip
import hashlib
import html
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bitlab_files import (InputError, check_out_folder, read_csv_dicts,  # noqa: E402
                          read_json_object, run_main, short_json, write_stdout,
                          write_text_atomic)
from plot import (BLOWUP_FACTOR, Run, find_runs, group_curve, group_runs,  # noqa: E402
                  read_number)
from runs import human_bytes, human_duration, run_record, sim_time_text  # noqa: E402

PLOTLY_MISSING = ("plotly is not installed for /usr/bin/python3: install the Debian package "
                  "python3-plotly (apt-get install python3-plotly)")
FIGURE_HEIGHT = 420  # pixels
LOSS_AXES = [("step", "step"), ("bytes_sent_cum", "bytes sent per worker"),
             ("sim_time_s", "simulated time (s)")]
# Points drawn per curve at most: a 50-run sweep of 3000 steps stays well under 2 MB
# (tests/test_report.cpp measures it). Display only: metrics.csv keeps every step.
MAX_POINTS = 300
BAND_POINTS = 150  # the min-max band: a shape, drawn from half as many points
DIGITS = 5  # significant digits of the drawn values (display only)


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


def select_baseline(specs, runs, records):
    """Indices of the baseline runs: a run folder (relative to DIR or as given), or the runs
    matching every PATH=VALUE pair given (--baseline repeated, or pairs joined by commas:
    optimizer.name=adam,bias_correction=false)."""
    if not specs:
        return []
    if len(specs) == 1:  # a run folder first (sweep folder names hold '=' too)
        norm = os.path.normpath(specs[0])
        hits = [i for i, rec in enumerate(records)
                if os.path.normpath(rec["run"]) == norm or
                os.path.realpath(rec["path"]) == os.path.realpath(specs[0])]
        if hits:
            return hits
    pairs = baseline_pairs(specs)
    hits = [i for i, r in enumerate(runs) if all(matches(r, path, value) for path, value in pairs)]
    if not hits:
        raise InputError("--baseline %s: matches none of the %d runs (give a run folder below "
                         "DIR, e.g. %s, or PATH=VALUE pairs, e.g. optimizer.name=adam,"
                         "optimizer.bias_correction=false)"
                         % (",".join(specs), len(runs), records[0]["run"]))
    return hits


def baseline_pairs(specs):
    """[(path, value)] from the --baseline values; a piece without '=' is bad input."""
    pairs = []
    for spec in specs:
        pieces = spec.split(",")
        # "a=[1,2]" holds commas of its own: split only where every piece is a pair
        if not all("=" in p for p in pieces):
            pieces = [spec]
        for piece in pieces:
            if "=" not in piece:
                raise InputError("--baseline %s: not a run folder below DIR nor PATH=VALUE"
                                 % spec)
            path, text = piece.split("=", 1)
            try:
                value = json.loads(text)
            except ValueError:
                value = text
            pairs.append((path.strip(), value))
    return pairs


def matches(run, path, value):
    """The run's config (or its value as the sweep file wrote it: "15%") has path = value;
    path may be a config path's last parts (bias_correction)."""
    for source in (run.config, run.written):
        if any(source.get(p) == value for p in source if p == path or p.endswith("." + path)):
            return True
    return False


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def spread(xs):
    """(mean, sample standard deviation or None, min, max) of the values that are there."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd, min(xs), max(xs)


def final_value(run, record, metric):
    """The run's final `metric`: summary.json's final value, else the last finite value of
    that metrics.csv column (an unfinished run, or a column summary.json leaves out)."""
    v = record["final"].get(metric)
    if v is not None or metric not in run.columns:
        return v
    col = run.columns.index(metric)
    for row in reversed(run.rows):
        v = read_number(row[col]) if col < len(row) else None
        if v is not None:
            return v
    return None


class Setting:
    """One group of runs equal but for the seed, with what the tables show of it."""

    def __init__(self, number, group, runs, values, records, base):
        self.number, self.label = number, group.label
        self.runs = group.members
        self.indices = [k for k, r in enumerate(runs) if any(r is m for m in self.runs)]
        indices = self.indices
        times = [records[i]["sim_time_s"] for i in indices]
        sent = [records[i]["bytes_sent_per_worker"] for i in indices]
        self.time, self.bytes = mean(times), mean(sent)
        self.value = spread([values[i] for i in indices])
        self.gaps = [gap(values[i], base["value"]) for i in indices]
        self.gap = spread(self.gaps)
        self.speedup = speedup(base, self.time, self.bytes)


def gap(value, base_value):
    """value - base_value, with a difference below 1e-12 of the baseline's value (the
    rounding of a mean of the same numbers: the baseline's own gap) written as 0."""
    if value is None or base_value is None:
        return None
    d = value - base_value
    return 0.0 if abs(d) <= 1e-12 * abs(base_value) else d


def speedup(base, time_s, sent):
    """The baseline's mean simulated time over this one's (bytes without a time model)."""
    if base["time"] and time_s:
        return base["time"] / time_s
    if base["bytes"] and sent:
        return base["bytes"] / sent
    return None


LEGEND_CHARS = 40  # a legend entry's text at most: the plot keeps its width; hover: all of it
LABEL_CHARS = 44  # a table's label cell at most (the page's CSS also caps its width)
NOTE_CHARS = 40  # a label inside a sentence (warnings, the baseline note) at most


def shorten(text, limit):
    """text cut to `limit` characters with an ellipsis in the middle, which keeps both
    ends (labels often differ only at the end: "..., lr=0.01"); the full text goes on
    hover."""
    if len(text) <= limit:
        return text
    tail = (limit - 1) * 2 // 5
    return text[:limit - 1 - tail] + "…" + text[len(text) - tail:]


def number(v, fmt):
    return "" if v is None else fmt % v


def gap_text(gap):
    """'+0.0123 ± 0.004 [+0.008, +0.017]': mean gap, sd over seeds, per-seed range."""
    m, sd, lo, hi = gap
    if m is None:
        return ""
    if sd is None:
        return "%+.4g" % m
    return "%+.4g ± %.2g [%+.4g, %+.4g]" % (m, sd, lo, hi)


def label_cell(short, full):
    """The short label shown (cut with an ellipsis by the page's CSS), the full one on
    hover (title) and as the sort key."""
    return ("<td class='label' title='%s' data-sort='%s'>%s</td>"
            % (esc(full), esc(sort_value(short)), esc(shorten(short, LABEL_CHARS))))


def html_table(table_id, head, rows, classes):
    """head: [(key, text)]; rows: [[(raw, text) or html cell]]; the key names the column
    for the page's layout check (data-key)."""
    out = ["<table id='%s' class='sortable'><thead><tr>" % table_id]
    out += ["<th data-col='%d' data-key='%s'>%s</th>" % (i, esc(k), esc(h))
            for i, (k, h) in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for cells, cls in zip(rows, classes):
        out.append("<tr%s>" % (" class='%s'" % cls if cls else "") + "".join(
            c if isinstance(c, str) else
            "<td data-sort='%s'>%s</td>" % (esc(sort_value(c[0])), esc(c[1]))
            for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def column_names(records, base):
    """What the speed-up and simulated-time columns measure: with no compute model the
    simulated time is communication only ("comm-only speed-up"); with no time model the
    speed-up is the bytes' ratio."""
    timed = [r for r in records if r["sim_time_s"] is not None]
    comm_only = bool(timed) and all(r.get("communication_only") for r in timed)
    if base["time"]:
        speed = "comm-only speed-up" if comm_only else "speed-up"
    else:
        speed = "speed-up in bytes (no time model)"
    return {"speedup": speed,
            "time": "simulated time (comm only)" if comm_only else "simulated time",
            "twin": "comm-only speed-up vs twin" if comm_only else "speed-up vs twin"}


def settings_table(settings, metric, baseline, names):
    """One row per setting: its seeds' mean final metric and, given a baseline, the gap
    with its spread over seeds and the speed-up."""
    head = [("label", "setting"), ("runs", "runs")]
    if baseline:
        head += [("speedup", names["speedup"]), ("gap", metric + " gap ± sd [range]")]
    head += [("value", metric + " (mean ± sd)"), ("bytes", "bytes / worker"),
             ("time", names["time"])]
    rows = []
    for st in settings:
        m, sd = st.value[0], st.value[1]
        cells = [label_cell(st.label, st.label), (len(st.indices), str(len(st.indices)))]
        if baseline:
            cells += [(st.speedup, number(st.speedup, "%.2f×")), (st.gap[0], gap_text(st.gap))]
        cells += [(m, "" if m is None else "%.4g" % m + ("" if sd is None else " ± %.2g" % sd)),
                  (st.bytes, "" if st.bytes is None else human_bytes(st.bytes)),
                  (st.time, "" if st.time is None else human_duration(st.time))]
        rows.append(cells)
    classes = ["baseline" if set(st.indices) & set(baseline) else "" for st in settings]
    return html_table("settings", head, rows, classes)


def runs_table(records, short, values, base, metric, baseline, names):
    """One row per run: its short label (the full folder on hover), then the speed-up and
    the gap on `metric` next to it (so that no long name pushes them off the screen), then
    the rest."""
    metrics = []
    for rec in records:
        for k in rec["final"]:
            if k not in metrics:
                metrics.append(k)
    head = [("label", "run")]
    if baseline:
        head += [("speedup", names["speedup"]), ("gap", metric + " gap")]
    head += [("optimizer", "optimizer"), ("seed", "seed"), ("status", "status"),
             ("steps", "steps")] + [("metric", m) for m in metrics] + [
        ("bytes", "bytes / worker"), ("time", names["time"])]
    twins = any(rec.get("twin") for rec in records)
    if twins:  # runs with "baseline": "twin": their gaps to their own twin
        head += [("twin", names["twin"]), ("twin", "bytes vs twin"),
                 ("twin", "loss gap vs twin")]
    rows = []
    for k, rec in enumerate(records):
        cells = [label_cell(short[k], rec["run"])]
        if baseline:
            speed = speedup(base, rec["sim_time_s"], rec["bytes_sent_per_worker"])
            g = gap(values[k], base["value"])
            cells += [(speed, number(speed, "%.2f×")), (g, number(g, "%+.4g"))]
        cells += [(rec["optimizer"], rec["optimizer"]), (rec["seed"], rec["seed"]),
                  (rec["status"], rec["status"]), (rec["steps"], rec["steps"])]
        cells += [(rec["final"].get(m), number(rec["final"].get(m), "%.4g")) for m in metrics]
        cells += [(rec["bytes_sent_per_worker"], human_bytes(rec["bytes_sent_per_worker"])),
                  (rec["sim_time_s"], sim_time_text(rec))]
        if twins:
            twin = rec.get("twin") or {}
            speed, ratio = twin.get("speedup"), twin.get("bytes_ratio")
            twin_gap = (twin.get("gap") or {}).get("train_loss")
            cells += [(speed, number(speed, "%.2f×")), (ratio, number(ratio, "%.3g")),
                      (twin_gap, number(twin_gap, "%+.4g"))]
        rows.append(cells)
    classes = ["baseline" if k in baseline else "" for k in range(len(records))]
    return html_table("runs", head, rows, classes), len(rows)


# ---------------------------------------------------------------- curves


def lttb(xs, ys, n):
    """Indices of at most n points of (xs, ys) by largest-triangle-three-buckets
    (Steinarsson 2013, "Downsampling time series for visual representation", ch. 4.2):
    the first and last points, and from each of n - 2 buckets the point that spans the
    largest triangle with the point kept before it and the next bucket's mean. Peaks and
    dips survive, unlike a stride."""
    m = len(xs)
    if m <= n or n < 3:
        return list(range(m))
    keep, a = [0], 0
    # Bucket bounds in integers: (b + 1)(m - 2)/(n - 2) in floats can fall just
    # short of m - 2 and drop the last bucket's final point.
    def edge(b):
        return b * (m - 2) // (n - 2) + 1

    for b in range(n - 2):
        lo, hi = edge(b), edge(b + 1)
        nlo, nhi = hi, min(edge(b + 2), m)
        if nlo >= nhi:  # the last bucket: the last point stands for the next one
            nlo, nhi = m - 1, m
        cx = sum(xs[nlo:nhi]) / (nhi - nlo)
        cy = sum(ys[nlo:nhi]) / (nhi - nlo)
        best, best_area = lo, -1.0
        for i in range(lo, min(hi, m - 1)):
            area = abs((xs[a] - cx) * (ys[i] - ys[a]) - (xs[a] - xs[i]) * (cy - ys[a]))
            if area > best_area:
                best, best_area = i, area
        keep.append(best)
        a = best
    keep.append(m - 1)
    return keep


def rounded(vs):
    """Values as drawn: DIGITS significant digits; whole numbers (steps, bytes) exact and
    without a ".0"."""
    return [int(v) if float(v).is_integer() and abs(v) < 1e15 else float("%.*g" % (DIGITS, v))
            for v in vs]


def palette(n):
    """One colour per setting: plotly's D3 (10), Dark24, then Alphabet (26), cycled."""
    import plotly.colors as pc
    colours = (pc.qualitative.D3 if n <= 10 else pc.qualitative.Dark24 if n <= 24
               else pc.qualitative.Alphabet)
    return [colours[k % len(colours)] for k in range(n)]


def rgba(colour, alpha):
    colour = colour.lstrip("#")
    return "rgba(%d,%d,%d,%g)" % (int(colour[0:2], 16), int(colour[2:4], 16),
                                  int(colour[4:6], 16), alpha)


def loss_figure(go, settings, x, title, metric):
    """One colour per setting: a line for the mean over its seeds and, with two seeds or
    more, a band from their minimum to their maximum (plot.group_curve), down-sampled to
    MAX_POINTS (lttb on the mean). The initial y range leaves out settings that blew up
    (past plot.BLOWUP_FACTOR times the median first value, as `bitlab plot` does);
    double-click the plot for the whole range."""
    curves = []
    for st in settings:
        if all(x in r.columns and metric in r.columns for r in st.runs):
            xs, mid, lo, hi = group_curve(st.runs, x, metric)
            if xs:
                curves.append((st, xs, mid, lo, hi))
    if not curves:
        return None
    firsts = sorted(abs(c[2][0]) for c in curves)
    limit = BLOWUP_FACTOR * firsts[len(firsts) // 2]
    fig, kept, total = go.Figure(), [], 0
    for st, xs, mid, lo, hi in curves:
        band = [[a[i] for i in lttb(xs, mid, BAND_POINTS)] for a in (xs, lo, hi)]
        keep = lttb(xs, mid, MAX_POINTS)
        xs, mid, lo, hi = ([a[i] for i in keep] for a in (xs, mid, lo, hi))
        blew_up = limit > 0 and max(abs(y) for y in hi + lo) > limit
        total += len(mid)
        if not blew_up:
            kept.extend(lo + hi)
        group = "s%d" % st.number
        if len(st.runs) > 1:
            fig.add_trace(go.Scatter(x=rounded(band[0]), y=rounded(band[1]), mode="lines",
                                     line_width=0, legendgroup=group, showlegend=False,
                                     hoverinfo="skip"))
            fig.add_trace(go.Scatter(x=rounded(band[0]), y=rounded(band[2]), mode="lines",
                                     line_width=0,
                                     fill="tonexty", fillcolor=rgba(st.colour, 0.2),
                                     legendgroup=group, showlegend=False, hoverinfo="skip"))
        name = shorten(st.label, LEGEND_CHARS) + (" (blew up)" if blew_up else "")
        fig.add_trace(go.Scatter(x=rounded(xs), y=rounded(mid), mode="lines",
                                 name=plotly_text(name), meta=plotly_text(st.label),
                                 legendgroup=group, line=dict(color=st.colour, width=1.5),
                                 hovertemplate="%{meta}<br>%{x:.4g}, %{y:.4g}<extra></extra>"))
    if kept and len(kept) < 2 * total:
        lo, hi = min(kept), max(kept)
        pad = 0.05 * (hi - lo) or 0.05 * abs(hi) or 1.0
        fig.update_yaxes(range=[lo - pad, hi + pad])
    axis_buttons = [dict(label=lab, method="relayout", args=[{"xaxis.type": xt,
                                                              "yaxis.type": yt}])
                    for lab, xt, yt in (("linear", "linear", "linear"),
                                        ("log y", "linear", "log"),
                                        ("log x", "log", "linear"),
                                        ("log x, log y", "log", "log"))]
    fig.update_layout(xaxis_title=title, yaxis_title=plotly_text(metric), height=FIGURE_HEIGHT,
                      margin=dict(t=50, r=10), hovermode="closest",
                      legend=dict(font=dict(size=11)),
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


# ---------------------------------------------------------------- plotly.js, smaller


def plotly_bundle(full):
    """plotly.js with only what the page draws (scatter and bar traces), for a page under
    2 MB: Debian ships plotly.js 2.x unminified (8.7 MB), most of it trace types the page
    never uses (3-D, maps, WebGL). The bundle is browserify's: {id: [function(_dereq_,
    module, exports){...}, {"./path": id, ...}], ...}, entry lib/index.js registering every
    trace type. The entry is rewritten to register bar only (scatter is in the core, as in
    plotly's own partial bundles, e.g. plotly-basic) and only the modules it reaches
    through the dependency maps are kept. Returns (text, how); the full text where the
    bundle is not laid out as expected (checked by rebuilding the whole of it exactly)."""
    head = re.compile(r"(?:\(\{|\},\{([^{}]*)\}\],)(\d+):\[function\(_dereq_,module,exports\)\{")
    marks = list(head.finditer(full))
    tail = re.search(r"\]\},\{\},\[(\d+)\]\)\(\1\)(?!.*\]\},\{\},\[)", full, re.S)
    if not marks or not tail:
        return full, "whole (its layout was not recognised)"
    end, entry = tail.start(), int(tail.group(1))
    modules = {}
    for k, m in enumerate(marks):
        if k + 1 < len(marks):
            modules[int(m.group(2))] = (full[m.end():marks[k + 1].start()], marks[k + 1].group(1))
        else:
            cut = full.rfind("},{", 0, end)
            modules[int(m.group(2))] = (full[m.end():cut], full[cut + 3:end - 1])
    prefix, suffix = full[:marks[0].start()], full[end + 1:]

    def build(mods):
        return prefix + "({" + ",".join("%d:[function(_dereq_,module,exports){%s},{%s}]"
                                        % (k, body, deps) for k, (body, deps)
                                        in sorted(mods.items())) + suffix
    try:
        deps = json.loads("{" + modules[entry][1] + "}")
        if build(modules) != full or "./core" not in deps or "./bar" not in deps:
            return full, "whole (its layout was not recognised)"
    except (KeyError, ValueError):
        return full, "whole (its layout was not recognised)"
    modules[entry] = ("\n'use strict';\nvar Plotly = _dereq_('./core');\n"
                      "Plotly.register([_dereq_('./bar')]);\nmodule.exports = Plotly;\n",
                      '"./bar":%d,"./core":%d' % (deps["./bar"], deps["./core"]))
    kept, todo = {}, [entry]
    while todo:
        k = todo.pop()
        if k not in kept:
            kept[k] = modules[k]
            todo.extend(json.loads("{" + modules[k][1] + "}").values())
    return build(kept), "scatter and bar only"


def packed(js):
    """plotly.js gzipped and in base64, for the page's loader (BODY_JS) to unpack with the
    browser's DecompressionStream; the same text each time (mtime 0)."""
    return base64.b64encode(gzip.compress(js.encode("utf-8"), 9, mtime=0)).decode("ascii")


# ---------------------------------------------------------------- warnings


def run_warnings(run, sweep_rows):
    """A run's warnings: summary.json's "warnings" (a list of strings) and its row's
    `warnings` column in sweep.csv (messages joined by " | "), each once."""
    out = []
    found = run.summary.get("warnings")
    if found is not None:
        if not isinstance(found, list) or not all(isinstance(w, str) for w in found):
            raise InputError("%s: warnings = %s: must be an array of strings"
                             % (os.path.join(run.path, "summary.json"), short_json(found)))
        out += found
    row = sweep_rows.get(os.path.realpath(run.path)) or {}
    out += [w.strip() for w in (row.get("warnings") or "").split(" | ") if w.strip()]
    return list(dict.fromkeys(out))


def sweep_rows_by_run(d):
    """DIR/sweep.csv's rows by their run folder's real path ({} without a sweep.csv)."""
    path = os.path.join(d, "sweep.csv")
    if not os.path.isfile(path):
        return {}
    rows = read_csv_dicts(path)[0]
    return {os.path.realpath(os.path.join(d, r["dir"])): r for r in rows if r.get("dir")}


def sweep_warnings(d):
    """DIR/sweep.json's "warnings" (what `bitlab sweep` found in the sweep file)."""
    path = os.path.join(d, "sweep.json")
    if not os.path.isfile(path):
        return []
    found = read_json_object(path).get("warnings") or []
    if not isinstance(found, list) or not all(isinstance(w, str) for w in found):
        raise InputError("%s: warnings = %s: must be an array of strings"
                         % (path, short_json(found)))
    return found


NUMBER_RE = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def group_warnings(messages):
    """[(text, where)] with messages equal but for their numbers as one, each number that
    differs shown as its range ("29.1–36.4 % of the coordinates"), `where` the union of
    theirs (None: the sweep file), in first-seen order; as bitlab sweep's summary groups
    them (sim/lab/sweep_csv.cpp, group_warnings)."""
    kinds = {}
    for text, where in messages:
        key = NUMBER_RE.sub("\x01", text)
        kind = kinds.setdefault(key, {"numbers": [], "where": None, "text": text})
        kind["numbers"].append(NUMBER_RE.findall(text))
        if where is not None:
            kind["where"] = (kind["where"] or []) + [k for k in where
                                                      if k not in (kind["where"] or [])]
    out = []
    for key, kind in kinds.items():
        parts = key.split("\x01")
        text = parts[0]
        for k, part in enumerate(parts[1:]):
            values = [ns[k] for ns in kind["numbers"]]
            low, high = min(values, key=float), max(values, key=float)
            text += (low if float(low) == float(high) else low + "\u2013" + high) + part
        out.append((text, kind["where"]))
    return out


def warnings_html(sweep, per_run, short):
    """The page's first section: each kind of message once (numbers that differ between
    runs as their range), with the runs it came from (all of them, or the first few by
    their short labels and the rest on hover)."""
    messages = [(w, None) for w in dict.fromkeys(sweep)]
    by_text = {}
    for k, ws in enumerate(per_run):
        for w in ws:
            if w not in sweep:
                by_text.setdefault(w, []).append(k)
    messages += list(by_text.items())
    if not messages:
        return ""
    items = []
    for w, ks in group_warnings(messages):
        if ks is None:
            where = "the sweep file"
        elif len(ks) == len(short):
            where = "all %d runs" % len(ks)
        else:
            names = [short[k] for k in sorted(ks)]
            where = "%d run%s: %s" % (len(ks), "" if len(ks) == 1 else "s", ", ".join(
                shorten(n, NOTE_CHARS) for n in names[:3]) + (", …" if len(names) > 3 else ""))
            where = "<span title='%s'>%s</span>" % (esc("\n".join(names)), esc(where))
            items.append("<li>%s <span class='note'>(%s)</span></li>" % (esc(w), where))
            continue
        items.append("<li>%s <span class='note'>(%s)</span></li>" % (esc(w), esc(where)))
    return ("<div id='warnings' class='warnings'><h2>Warnings (%d)</h2><ul>%s</ul></div>"
            % (len(items), "".join(items)))


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

# Unpacks plotly.js (gzip, base64) and runs it as an inline script, which the policy lets
# run by its hash; draws the figures; sorts the tables; then writes what it shows into
# #bitlab-checks, with the speed-up and gap columns whose headers lie outside the window
# (data-offscreen), for tests/test_report.cpp.
BODY_JS = """
(function () {
  document.querySelectorAll("table.sortable").forEach(function (t) {
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
  });
  function unpack() {
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser has no DecompressionStream (Chrome 80, " +
                                      "Firefox 113, Safari 16.4 or later have it)"));
    }
    var bin = atob(document.getElementById("bitlab-plotly").textContent);
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (text) {
      var s = document.createElement("script");
      s.textContent = text;
      document.head.appendChild(s);
      document.head.removeChild(s);
    });
  }
  function draw() {
    document.querySelectorAll("script.bitlab-figure").forEach(function (s) {
      var fig = JSON.parse(s.textContent);
      Plotly.newPlot(document.getElementById(s.dataset.div), fig.data, fig.layout,
                     {displaylogo: false, responsive: true});
    });
  }
  function report() {
    var traces = 0, width = document.documentElement.clientWidth, off = [];
    document.querySelectorAll(".js-plotly-plot").forEach(function (d) {
      traces += (d.data || []).length;
    });
    document.querySelectorAll("th[data-key=speedup], th[data-key=gap]").forEach(function (th) {
      var r = th.getBoundingClientRect();
      if (r.left < 0 || r.right > width) off.push(th.closest("table").id + ": " + th.textContent);
    });
    var c = document.getElementById("bitlab-checks");
    c.dataset.traces = traces;
    c.dataset.rows = document.getElementById("runs").tBodies[0].rows.length;
    c.dataset.width = width;
    c.dataset.offscreen = JSON.stringify(off);
    c.dataset.errors = JSON.stringify(window.bitlabErrors);
    c.dataset.csp = JSON.stringify(window.bitlabBlocked);
    c.dataset.plotly = typeof Plotly === "undefined" ? "missing" : Plotly.version;
  }
  unpack().then(draw).catch(function (e) {
    window.bitlabErrors.push(String(e && e.message || e));
    var p = document.getElementById("bitlab-noplots");
    p.textContent = "The figures cannot be drawn: " + String(e && e.message || e);
    p.hidden = false;
  }).then(report);
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
td.label, th:first-child {{ text-align: left; }}
td.label {{ max-width: 32em; overflow: hidden; text-overflow: ellipsis; }}
tr.baseline {{ background: #fff6d8; }}
.note, .warnings {{ overflow-wrap: anywhere; }}
.note {{ color: #555; font-size: 13px; }}
.scroll {{ overflow-x: auto; max-height: 32em; }}
.warnings {{ background: #fff4e5; border-left: 4px solid #e08a00; padding: 0.2em 1em; }}
.warnings h2 {{ font-size: 1.1em; }}
.warnings li {{ margin: 0.3em 0; }}
#bitlab-noplots {{ color: #a00; }}
</style>
</head><body>
<h1>{title}</h1>
<p class="note">{summary}</p>
{warnings}
<p id="bitlab-noplots" hidden></p>
<h2>Settings</h2>
<p class="note">One row per setting (runs equal but for the seed). {baseline_note}</p>
<div class="scroll">
{settings}
</div>
<h2>Runs</h2>
<p class="note">Click a column to sort; hover a run for its folder.</p>
<div class="scroll">
{table}
</div>
<p class="note">{curves_note}</p>
{figures}
<div id="bitlab-checks" data-expected-traces="{traces}" data-expected-rows="{rows}"></div>
<script type="application/octet-stream" id="bitlab-plotly">{plotly_packed}</script>
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


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="report.py", description=__doc__.split("\n")[0])
    parser.add_argument("dir", metavar="DIR")
    parser.add_argument("--out", help="the page (default DIR/report.html)")
    parser.add_argument("--baseline", action="append", default=[],
                        help="a run folder below DIR, or PATH=VALUE pairs the baseline runs "
                             "all match (repeat it, or join pairs with commas)")
    parser.add_argument("--title")
    parser.add_argument("--metric", default="train_loss",
                        help="metrics.csv column of the curves and the gap (default "
                             "train_loss; e.g. train_loss_full, eval_loss)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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
    sweep_rows = sweep_rows_by_run(args.dir)
    per_run_warnings = [run_warnings(r, sweep_rows) for r in runs]
    found_sweep_warnings = sweep_warnings(args.dir)
    try:
        import plotly.graph_objects as go
        import plotly.io
        import plotly.offline
    except ImportError:
        raise InputError(PLOTLY_MISSING) from None

    values = [final_value(r, rec, metric) for r, rec in zip(runs, records)]
    base = {"time": mean([records[i]["sim_time_s"] for i in baseline]),
            "bytes": mean([records[i]["bytes_sent_per_worker"] for i in baseline]),
            "value": mean([values[i] for i in baseline])}
    groups = group_runs(runs, sweep_columns)[0]
    settings = [Setting(k, g, runs, values, records, base) for k, g in enumerate(groups)]
    for st, colour in zip(settings, palette(len(settings))):
        st.colour = colour
        st.label = strip_seeds(st.label)
    short = [""] * len(runs)
    for st in settings:
        for i in st.indices:
            short[i] = st.label + ("" if len(st.indices) == 1 else
                                   " · seed %s" % records[i]["seed"])
    names = column_names(records, base)
    table_html, nrows = runs_table(records, short, values, base, metric, baseline, names)
    figures, traces = make_figures(go, settings, records, runs, short, metric,
                                   names["time"])
    parts = [FIGURE.format(heading=esc(heading), div="bitlab-figure-%d" % k,
                           height=FIGURE_HEIGHT,
                           spec=script_json(plotly.io.to_json(fig, validate=False)))
             for k, (heading, fig) in enumerate(figures)]
    plotlyjs, how = plotly_bundle(plotly.offline.get_plotlyjs())
    title = args.title or default_title(args.dir)
    page = PAGE.format(
        title=esc(title), summary=summary_text(records, args.dir),
        warnings=warnings_html(found_sweep_warnings, per_run_warnings, short),
        settings=settings_table(settings, metric, baseline, names), table=table_html,
        curves_note=esc(curves_note(settings, metric)), figures="\n".join(parts),
        traces=traces, rows=nrows,
        baseline_note=esc(baseline_note(short, baseline, metric, names["speedup"])),
        head_js=HEAD_JS, body_js=BODY_JS, plotly_packed=packed(plotlyjs),
        csp=esc(content_security_policy([HEAD_JS, plotlyjs, BODY_JS])))
    write_text_atomic(out, page)
    print("report: %d runs, %d settings, %d traces, %.2f MB (plotly.js %s)"
          % (len(records), len(settings), traces, len(page.encode("utf-8")) / 1e6, how),
          file=sys.stderr)
    write_stdout(out + "\n")
    return 0


def strip_seeds(label):
    return re.sub(r" \(\d+ seeds\)$", "", label)


def make_figures(go, settings, records, runs, short, metric, time_name):
    figures = []
    for x, title in LOSS_AXES:
        if x == "sim_time_s":
            title = time_name + " (s)"
        fig = loss_figure(go, settings, x, title, metric)
        if fig is not None:
            figures.append(("%s against %s" % (metric, title), fig))
    # Bars by run: "k. label" (numbered, so that labels cut alike stay apart), cut short.
    names = [plotly_text("%d. %s" % (k + 1, shorten(s, LEGEND_CHARS)))
             for k, s in enumerate(short)]
    for name, fig in (("Per phase: steps, bytes and communication time",
                       phase_figure(go, records, names, runs)),
                      ("Bytes sent by collective (comm_log.csv: op, algorithm, dtype)",
                       comm_figure(go, runs, names))):
        if fig is not None:
            figures.append((name, fig))
    return figures, sum(len(fig.data) for _, fig in figures)


def summary_text(records, d):
    statuses = {}
    for rec in records:
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
    return esc("%d runs (%s) under %s." % (len(records), ", ".join(
        "%d %s" % (n, s) for s, n in sorted(statuses.items())), os.path.abspath(d)))


def baseline_note(short, baseline, metric, speed_name):
    if not baseline:
        return ("No baseline marked (bitlab report --baseline RUN, or PATH=VALUE pairs: "
                "--baseline optimizer.name=adam,optimizer.bias_correction=false).")
    return ("Baseline (highlighted): %s. " % ", ".join(
                shorten(t, NOTE_CHARS) for t in
                dict.fromkeys(short[i].split(" · seed ")[0] for i in baseline)) +
            speed_name[0].upper() + speed_name[1:] + ": the baseline's mean simulated time "
            "(bytes where the runs have no time model; communication only where they have no "
            "compute model) over the setting's or run's. %s gap: final %s "
            "minus the baseline's mean final %s (final: summary.json's, else the last value "
            "in metrics.csv); for a setting, the mean over its seeds ± their sample standard "
            "deviation [lowest, highest seed]." % (metric, metric, metric))


def curves_note(settings, metric):
    seeds = sorted({len(st.runs) for st in settings})
    lines = ("one run per setting: its %s" % metric if seeds == [1] else
             "line: the mean %s over its seeds (%s), band: their minimum to maximum"
             % (metric, "/".join(str(n) for n in seeds)))
    return ("Curves: one colour per setting; %s. Drawn from at most %d points per line and "
            "%d per band (largest-triangle-three-buckets on the mean, first and last step "
            "kept; values to %d significant digits): each run's metrics.csv holds every step "
            "exactly." % (lines, MAX_POINTS, BAND_POINTS, DIGITS))


def default_title(d):
    try:
        with open(os.path.join(d, "sweep.json")) as f:
            return "bitlab report: " + str(json.load(f)["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return "bitlab report: " + os.path.basename(os.path.abspath(d))


if __name__ == "__main__":
    sys.exit(run_main(main))
