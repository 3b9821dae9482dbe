"""report.html: the readiness report as one self-contained HTML5 page.

Same sections and figures as report.md (the cells come from render_md.py),
plus three charts drawn here as inline SVG: latency by part, compile time by
size, and the op census. No scripts, fonts or files outside the page; every
string from the report is escaped.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from .render_md import (DASH, STATUS_ORDER, Items, Table, adaptation_table, bucketing_items,
                        budget_items, census_ops_table, census_syncs_table, census_totals_line,
                        correctness_table, fail_warning, fmt_ms, fmt_s, machine_items,
                        num, results_wrong, size_table, speed_table, text,
                        tool_items, verdict_line, workload_items)

WIDTH = 760
LABEL_W = 200  # left margin for category labels
STATUS_COLOURS = {"native": "#2f855a", "fallback": "#dd6b20", "unsupported": "#c53030",
                  "custom": "#6b46c1", "host": "#718096"}
PART_COLOURS = ("#2b6cb0", "#dd6b20", "#2f855a", "#6b46c1", "#b7791f", "#319795", "#97266d")
GOOD = {"pass", "done", "native", "reference"}
BAD = {"fail", "error", "crashed", "unsupported"}
WARN = {"fallback", "budget", "interrupted", "incomplete", "not-run"}

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a202c;
 max-width:1180px;margin:1.5em auto;padding:0 1em}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #cbd5e0;padding-bottom:.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
th,td{border:1px solid #cbd5e0;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#edf2f7}td.n{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#22543d;background:#f0fff4}.bad{color:#742a2a;background:#fff5f5}
.warn{color:#7b341e;background:#fffaf0}
.verdict{font-size:1.15em;font-weight:600}
.alert{border:2px solid #c53030;background:#fff5f5;color:#742a2a;padding:.6em .8em;font-weight:600}
dl{display:grid;grid-template-columns:max-content auto;gap:.15em 1em}dt{font-weight:600}dd{margin:0}
.scroll{overflow-x:auto}svg{display:block;margin:.6em 0;max-width:100%;height:auto}
svg text{font:12px system-ui,sans-serif;fill:#1a202c}
"""


# --- page pieces -------------------------------------------------------------

def _cell_class(cell: str) -> str:
    word = cell.split(" ")[0]
    if word in GOOD:
        return ' class="ok"'
    if word in BAD or cell.startswith(f"{DASH} (results"):
        return ' class="bad"'
    if word in WARN:
        return ' class="warn"'
    numeric = cell[:1].isdigit() or (cell[:1] == "-" and cell[1:2].isdigit())
    return ' class="n"' if numeric else ""


def html_table(table: Table) -> str:
    head, rows = table
    if not rows:
        return "<p>None.</p>"
    out = ['<div class="scroll"><table><thead><tr>']
    out += [f"<th>{escape(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td{_cell_class(c)}>{escape(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def html_items(items: Items) -> str:
    body = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in items)
    return f"<dl>{body}</dl>"


# --- SVG helpers -------------------------------------------------------------

def _ticks(top: float) -> list[float]:
    """About five round axis ticks from 0 to at least `top`."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _svg(uid: str, height: int, title: str, desc: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" '
            f'height="{height}" viewBox="0 0 {WIDTH} {height}" '
            f'aria-labelledby="{uid}-t {uid}-d"><title id="{uid}-t">{escape(title)}</title>'
            f'<desc id="{uid}-d">{escape(desc)}</desc>'
            f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-weight="bold">'
            f'{escape(title)}</text>' + "".join(body) + "</svg>")


def _no_data(uid: str, title: str, why: str) -> str:
    return _svg(uid, 60, title, why, [f'<text x="{WIDTH / 2}" y="44" text-anchor="middle">'
                                      f'{escape(why)}</text>'])


def _short(label: str, limit: int = 30) -> str:
    return label if len(label) <= limit else label[:limit - 1] + "…"


def _x_axis(x0: float, x1: float, top: float, y: float, ticks: list[float],
            label: str) -> list[str]:
    """Grid lines from `top` down to the axis at `y`, tick labels, axis label."""
    span = ticks[-1] or 1
    out = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#4a5568"/>']
    for t in ticks:
        x = x0 + (x1 - x0) * t / span
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y}" stroke="#e2e8f0"/>')
        out.append(f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{num(t)}</text>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y + 32}" text-anchor="middle">'
               f'{escape(label)}</text>')
    return out


def _hbars(uid: str, title: str, axis: str, bars: list[tuple[str, float, float | None, str, str]],
           desc: str, legend: list[tuple[str, str]]) -> str:
    """Horizontal bars: (label, value, tick or None, colour, note after the bar)."""
    row, top_y = 24, 34
    x0, x1 = LABEL_W, WIDTH - 110
    ticks = _ticks(max(max(v, t or 0) for _, v, t, _, _ in bars))
    scale = (x1 - x0) / (ticks[-1] or 1)
    axis_y = top_y + row * len(bars) + 4
    body = _x_axis(x0, x1, top_y - 4, axis_y, ticks, axis)
    for i, (label, value, tick, colour, note) in enumerate(bars):
        y = top_y + i * row
        body.append(f'<text x="{x0 - 6}" y="{y + 15}" text-anchor="end">{escape(_short(label))}'
                    f'<title>{escape(label)}</title></text>')
        body.append(f'<rect x="{x0}" y="{y + 3}" width="{max(value * scale, 1):.1f}" height="16" '
                    f'fill="{colour}"/>')
        end = x0 + value * scale
        if tick is not None:
            tx = x0 + tick * scale
            body.append(f'<line x1="{tx:.1f}" y1="{y}" x2="{tx:.1f}" y2="{y + 22}" '
                        f'stroke="#1a202c" stroke-width="2"/>')
            end = max(end, tx)
        body.append(f'<text x="{end + 5:.1f}" y="{y + 15}">{escape(note)}</text>')
    height = axis_y + 42
    for j, (name, colour) in enumerate(legend):
        lx = x0 + j * 150
        body.append(f'<rect x="{lx}" y="{height}" width="12" height="12" fill="{colour}"/>'
                    f'<text x="{lx + 16}" y="{height + 11}">{escape(name)}</text>')
    return _svg(uid, height + (22 if legend else 4), title, desc, body)


# --- the three charts --------------------------------------------------------

def latency_chart(report: dict[str, Any]) -> str:
    title = "Step latency by part: p50 bar, p95 tick"
    bars, desc = [], []
    for part in report.get("parts") or []:
        speed = part.get("speed") or {}
        p50, p95 = speed.get("p50_s"), speed.get("p95_s")
        if p50 is None:
            continue
        wrong = results_wrong(part)
        colour = "#a0aec0" if part.get("role") == "reference" else "#c53030" if wrong else "#2b6cb0"
        note = f"{fmt_ms(p50)} ms" + (f" ({wrong})" if wrong else "")
        name = text(part.get("name"))
        bars.append((name, p50 * 1e3, None if p95 is None else p95 * 1e3, colour, note))
        desc.append(f"{name}: p50 {fmt_ms(p50)} ms, p95 {fmt_ms(p95)} ms"
                    + (f" ({wrong})" if wrong else ""))
    if not bars:
        return _no_data("lat", title, "No part has speed figures.")
    legend = [("reference", "#a0aec0"), ("target, results ok", "#2b6cb0"),
              ("target, not ok", "#c53030")]
    return _hbars("lat", title, "step latency (ms)", bars, "; ".join(desc) + ".", legend)


def compile_chart(report: dict[str, Any]) -> str:
    title = "Compile time by size and part"
    parts = [p for p in report.get("parts") or [] if p.get("sizes")]
    sizes: list[str] = []
    values: dict[tuple[int, str], tuple[float, bool]] = {}  # (part, size) -> (s, from first step)
    for i, part in enumerate(parts):
        for s in part["sizes"]:
            size = str(s.get("size"))
            if size not in sizes:
                sizes.append(size)
            v, approx = s.get("compile_s"), False
            if v is None:
                v, approx = s.get("first_step_s"), True
            if v is not None:
                values[(i, size)] = (float(v), approx)
    if not values:
        return _no_data("cmp", title, "No size has a compile or first-step time.")
    x0, x1, y0, y1 = 70, WIDTH - 20, 34, 254
    ticks = _ticks(max(v for v, _ in values.values()))
    scale = (y1 - y0) / (ticks[-1] or 1)
    body = [f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#4a5568"/>']
    for t in ticks:
        y = y1 - t * scale
        body.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#e2e8f0"/>'
                    f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{num(t)}</text>')
    body.append(f'<text x="16" y="{(y0 + y1) / 2}" text-anchor="middle" '
                f'transform="rotate(-90 16 {(y0 + y1) / 2})">compile time (s)</text>')
    group = (x1 - x0) / len(sizes)
    bar = min(40.0, group * 0.8 / max(len(parts), 1))
    desc = []
    for g, size in enumerate(sizes):
        gx = x0 + g * group + (group - bar * len(parts)) / 2
        body.append(f'<text x="{x0 + (g + 0.5) * group:.1f}" y="{y1 + 15}" '
                    f'text-anchor="middle">{escape(_short(size, 14))}</text>')
        for i, part in enumerate(parts):
            if (i, size) not in values:
                continue
            v, approx = values[(i, size)]
            h = max(v * scale, 1)
            colour = PART_COLOURS[i % len(PART_COLOURS)]
            style = ' fill-opacity="0.45" stroke-dasharray="3 2"' if approx else ""
            body.append(f'<rect x="{gx + i * bar:.1f}" y="{y1 - h:.1f}" width="{bar - 2:.1f}" '
                        f'height="{h:.1f}" fill="{colour}" stroke="{colour}"{style}>'
                        f'<title>{escape(text(part.get("name")))} {escape(size)}: {fmt_s(v)} s'
                        f'{" (first step)" if approx else ""}</title></rect>')
            desc.append(f"{text(part.get('name'))} at {size}: {fmt_s(v)} s"
                        + (" (first step, compile time unknown)" if approx else ""))
    body.append(f'<text x="{(x0 + x1) / 2}" y="{y1 + 32}" text-anchor="middle">'
                f'size (batch × length)</text>')
    ly = y1 + 48
    for i, part in enumerate(parts):
        lx = x0 + i * 170
        body.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" '
                    f'fill="{PART_COLOURS[i % len(PART_COLOURS)]}"/><text x="{lx + 16}" '
                    f'y="{ly + 11}">{escape(_short(text(part.get("name")), 22))}</text>')
    body.append(f'<text x="{x0}" y="{ly + 30}">Faded, dashed bar: first step time, where the '
                f'compile time is unknown.</text>')
    return _svg("cmp", ly + 40, title, "; ".join(desc) + ".", body)


def census_chart(census: dict[str, Any] | None) -> str:
    title = "Op census: totals by status, and the 15 most called ops"
    if not census:
        return _no_data("ops", title, "No op census was taken.")
    totals = census.get("totals") or {}
    counts = [(k, int(totals.get(k) or 0)) for k in STATUS_ORDER]
    whole = sum(n for _, n in counts)
    x0, x1 = LABEL_W, WIDTH - 110
    body = [f'<text x="{x0 - 6}" y="49" text-anchor="end">all ops</text>']
    x = float(x0)
    for k, n in counts:
        w = (x1 - x0) * n / whole if whole else 0
        if w > 0:
            body.append(f'<rect x="{x:.1f}" y="36" width="{w:.1f}" height="18" '
                        f'fill="{STATUS_COLOURS[k]}"><title>{k}: {n}</title></rect>')
        x += w
    for j, (k, n) in enumerate(counts):
        lx = 60 + j * 130
        body.append(f'<rect x="{lx}" y="62" width="12" height="12" fill="{STATUS_COLOURS[k]}"/>'
                    f'<text x="{lx + 16}" y="73">{k} {n}</text>')
    desc = ["Totals: " + ", ".join(f"{k} {n}" for k, n in counts)]
    top = sorted(census.get("ops") or [], key=lambda o: -(o.get("count") or 0))[:15]
    if not top:
        return _svg("ops", 90, title, desc[0] + ".", body)
    row, top_y = 20, 100
    body.append(f'<text x="{WIDTH / 2}" y="{top_y - 6}" text-anchor="middle">'
                f'top {len(top)} ops by count</text>')
    ticks = _ticks(max(o.get("count") or 0 for o in top))
    scale = (x1 - x0) / (ticks[-1] or 1)
    axis_y = top_y + row * len(top) + 4
    body += _x_axis(x0, x1, top_y, axis_y, ticks, "calls in the census step (count)")
    for i, op in enumerate(top):
        y = top_y + i * row
        name, n, status = text(op.get("op")), op.get("count") or 0, str(op.get("status"))
        colour = STATUS_COLOURS.get(status, "#a0aec0")
        body.append(f'<text x="{x0 - 6}" y="{y + 14}" text-anchor="end">{escape(_short(name))}'
                    f'<title>{escape(name)}</title></text>'
                    f'<rect x="{x0}" y="{y + 3}" width="{max(n * scale, 1):.1f}" height="14" '
                    f'fill="{colour}"/><text x="{x0 + n * scale + 5:.1f}" y="{y + 14}">'
                    f'{n} {escape(status)}</text>')
        desc.append(f"{name} {n} ({status})")
    return _svg("ops", axis_y + 40, title, "; ".join(desc) + ".", body)


# --- the page ----------------------------------------------------------------

def render_html(report: dict[str, Any]) -> str:
    """The whole report.html text."""
    name = text((report.get("workload") or {}).get("name"))
    verdict = report.get("verdict") or {}
    status = text(verdict.get("status"))
    cls = {"pass": "ok", "fail": "bad"}.get(status, "warn")
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>Readiness: {escape(name)}</title>", f"<style>{CSS}</style>", "</head>",
           "<body>", f"<h1>Readiness: {escape(name)}</h1>",
           f'<p class="verdict {cls}">{escape(verdict_line(report))}</p>',
           "<h2>Verdict</h2>", f'<p><strong>Status:</strong> <span class="{cls}">'
           f"{escape(status)}</span></p>",
           "".join(f"<p>{escape(line)}</p>" for line in text(verdict.get("summary")).splitlines())]
    warning = fail_warning(report)
    if warning:
        out.append(f'<p class="alert" role="alert">{escape(warning)}</p>')
    out += ["<h2>Workload</h2>", html_items(workload_items(report)),
            "<h2>Correctness</h2>", html_table(correctness_table(report)),
            "<h2>Speed and cost</h2>", latency_chart(report), html_table(speed_table(report)),
            f"<p><strong>Prices:</strong> {escape(text(report.get('price_assumption')))}</p>",
            "<h2>Op census</h2>"]
    census = report.get("census")
    if census:
        out += [f"<p>{escape(census_totals_line(census))}</p>", census_chart(census),
                "<h3>Ops</h3>", html_table(census_ops_table(census)),
                "<h3>Host syncs</h3>", html_table(census_syncs_table(census))]
    else:
        out += [f"<p>{DASH} (no census was taken)</p>", census_chart(None)]
    out += ["<h2>Sizes</h2>", compile_chart(report)]
    sized = [p for p in report.get("parts") or [] if p.get("sizes")]
    for part in sized:
        out += [f"<h3>{escape(text(part.get('name')))}</h3>", html_table(size_table(part))]
    if not sized:
        out.append(f"<p>{DASH} (no part ran the size sweep)</p>")
    if report.get("bucketing"):
        out += ["<h2>Bucketing</h2>", html_items(bucketing_items(report["bucketing"]))]
    out += ["<h2>Adaptation effort</h2>", html_table(adaptation_table(report)),
            "<h2>Budget and spend</h2>", html_items(budget_items(report)),
            "<h2>Machine</h2>", html_items(machine_items(report)),
            "<h2>Tool</h2>", html_items(tool_items(report)),
            f"<footer><p>{escape(text(report.get('schema')))}</p></footer>",
            "</body>", "</html>", ""]
    return "\n".join(out)
