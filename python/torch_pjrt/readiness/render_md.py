"""report.md: the readiness report (report.json, see schema.json) as Markdown.

The section contents are built here as plain-text cells (tables and
key/value lists, numbers already formatted, "—" for unknowns) so that the
HTML page (render_html.py) shows exactly the same figures; this file then
joins them into Markdown.
"""

from __future__ import annotations

import math
from typing import Any

DASH = "—"
# Sort order of op statuses in the census: what blocks the port first.
STATUS_ORDER = ("unsupported", "fallback", "custom", "native", "host")

Table = tuple[list[str], list[list[str]]]
Items = list[tuple[str, str]]


# --- formatting --------------------------------------------------------------

def sig(x: Any, digits: int) -> str:
    """`x` to `digits` significant figures, positional unless tiny or huge."""
    if x is None or isinstance(x, bool):
        return DASH
    if not isinstance(x, (int, float)):
        return str(x) or DASH
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) < 1e-4 or abs(x) >= 1e9:
        return f"{x:.{digits - 1}e}"
    decimals = digits - 1 - math.floor(math.log10(abs(x)))
    x = round(x, decimals)
    if x == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(x)))  # 9.996 -> 10.0
    return f"{x:.{max(decimals, 0)}f}"


def num(x: Any, digits: int = 3) -> str:
    """A plain number to `digits` significant figures, trailing zeros dropped."""
    out = sig(x, digits)
    if "." in out and "e" not in out:
        out = out.rstrip("0").rstrip(".")
    return out


def fmt_s(x: Any) -> str:
    """Seconds, 3 significant figures."""
    return sig(x, 3)


def fmt_ms(seconds: Any) -> str:
    """Seconds shown as milliseconds, 3 significant figures."""
    return DASH if not isinstance(seconds, (int, float)) else sig(seconds * 1e3, 3)


def fmt_usd(x: Any) -> str:
    """US dollars, 4 significant figures."""
    return sig(x, 4)


def fmt_int(x: Any) -> str:
    return DASH if x is None else f"{x:,}" if isinstance(x, int) else num(x)


def text(x: Any) -> str:
    """A string field; None and "" are unknown."""
    return DASH if x is None or x == "" else str(x)


def counts_text(counts: dict[str, Any] | None) -> str:
    """{"key": n, ...} as "key: n, key: n"."""
    return ", ".join(f"{k}: {v}" for k, v in (counts or {}).items()) or DASH


def _get(d: Any, key: str) -> Any:
    return d.get(key) if isinstance(d, dict) else None


# --- what both renderers show ------------------------------------------------

def results_wrong(part: dict[str, Any]) -> str | None:
    """Why this part's speed must not be read as a win, or None if it may."""
    status = _get(part.get("correctness"), "status")
    if status in ("pass", "reference"):
        return None
    return "results wrong" if status == "fail" else "not verified"


def verdict_line(report: dict[str, Any]) -> str:
    verdict = report.get("verdict") or {}
    status = text(verdict.get("status")).upper()
    summary = text(verdict.get("summary")).splitlines() or [DASH]
    return f"{status}: {summary[0]}"


def fail_warning(report: dict[str, Any]) -> str | None:
    if _get(report.get("verdict"), "status") != "fail":
        return None
    return ("Warning: the verdict is FAIL. Some results differ from the reference, so the "
            "speed and cost figures below are not wins.")


def workload_items(report: dict[str, Any]) -> Items:
    w = report.get("workload") or {}
    arrow = {True: " (higher is better)", False: " (lower is better)"}.get(
        w.get("higher_is_better"), "")
    tolerances = (f"rtol {num(w.get('rtol'))}, atol {num(w.get('atol'))}, "
                  f"metric ±{num(w.get('metric_tolerance'))}")
    return [
        ("Description", text(w.get("description"))),
        ("Kind", text(w.get("kind"))),
        ("Source", text(w.get("source"))),
        ("Steps", fmt_int(w.get("steps"))),
        ("Sizes", ", ".join(w.get("sizes") or []) or DASH),
        ("Metric", text(w.get("metric")) + arrow),
        ("Target", num(w.get("target"), 4)),
        ("Tolerances", tolerances),
        ("Parameters", fmt_int(w.get("parameters"))),
    ]


def correctness_table(report: dict[str, Any]) -> Table:
    head = ["Part", "Role", "Status", "Steps compared", "Max error", "Metric vs reference",
            "Samples ok", "First mismatch / detail"]
    rows = []
    for part in report.get("parts") or []:
        c = part.get("correctness") or {}
        metric = f"{num(c.get('metric'), 4)} vs {num(c.get('reference_metric'), 4)}"
        if c.get("metric") is None and c.get("reference_metric") is None:
            metric = DASH
        samples = (DASH if c.get("samples") is None
                   else f"{text(c.get('samples_ok'))}/{c['samples']}")
        notes = [s for s in (c.get("first_mismatch"), part.get("detail")) if s]
        rows.append([text(part.get("name")), text(part.get("role")), text(c.get("status")),
                     fmt_int(c.get("steps_compared")), sig(c.get("max_error"), 3), metric, samples,
                     "; ".join(notes) or DASH])
    return head, rows


def _ratio(part: dict[str, Any]) -> str:
    wrong = results_wrong(part)
    if wrong is not None:
        return f"{DASH} ({wrong})"
    ratio = _get(part.get("speed"), "ratio_vs_reference")
    return DASH if ratio is None else f"{sig(ratio, 3)}×"


def speed_table(report: dict[str, Any]) -> Table:
    head = ["Part", "First step s", "Compile s", "p50 ms", "p95 ms", "Samples/s", "Tokens/s",
            "vs reference", "Peak device MiB", "Peak host MiB", "Programs/step",
            "Host syncs/step", "USD per correct task", "Time to target s", "USD to target"]
    rows = []
    for part in report.get("parts") or []:
        s, c = part.get("speed") or {}, part.get("cost") or {}
        rows.append([
            text(part.get("name")), fmt_s(s.get("first_step_s")), fmt_s(s.get("compile_s")),
            fmt_ms(s.get("p50_s")), fmt_ms(s.get("p95_s")), num(s.get("throughput")),
            num(s.get("tokens_per_s")), _ratio(part), num(s.get("peak_device_mib"), 4),
            num(s.get("peak_host_mib"), 4), num(s.get("programs_per_step")),
            num(s.get("host_syncs_per_step")), fmt_usd(c.get("per_correct_task_usd")),
            fmt_s(c.get("time_to_target_s")), fmt_usd(c.get("cost_to_target_usd"))])
    return head, rows


def census_totals_line(census: dict[str, Any]) -> str:
    t = census.get("totals") or {}
    kinds = ", ".join(f"{k} {fmt_int(t.get(k))}" for k in STATUS_ORDER)
    return (f"Census of {text(census.get('part'))} over a {fmt_s(census.get('step_s'))} s step: "
            f"{kinds}; {fmt_s(t.get('fallback_s'))} s in CPU fallbacks.")


def sorted_ops(census: dict[str, Any]) -> list[dict[str, Any]]:
    """Ops, unsupported first, then fallback, custom, native, host; by count."""
    def key(op: dict[str, Any]) -> tuple[int, int, str]:
        status = op.get("status")
        rank = STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)
        return rank, -(op.get("count") or 0), str(op.get("op"))
    return sorted(census.get("ops") or [], key=key)


def census_ops_table(census: dict[str, Any]) -> Table:
    head = ["Op", "Count", "Status", "Fallback ops", "Fallback ms"]
    rows = [[text(op.get("op")), fmt_int(op.get("count")), text(op.get("status")),
             ", ".join(op.get("fallback_ops") or []) or DASH,
             fmt_ms(op.get("fallback_s")) if op.get("status") == "fallback" or op.get("fallback_s")
             else DASH]
            for op in sorted_ops(census)]
    return head, rows


def census_syncs_table(census: dict[str, Any]) -> Table:
    head = ["Site", "Origin", "Op", "Count"]
    rows = [[text(s.get("site")), text(s.get("origin")), text(s.get("op")), fmt_int(s.get("count"))]
            for s in census.get("syncs") or []]
    return head, rows


def size_table(part: dict[str, Any]) -> Table:
    head = ["Size", "Status", "First step s", "Step ms", "Compilations", "Compile s",
            "Recompile reasons", "Peak device MiB"]
    rows = []
    for s in part.get("sizes") or []:
        status = text(s.get("status")) + (f" ({s['detail']})" if s.get("detail") else "")
        rows.append([text(s.get("size")), status, fmt_s(s.get("first_step_s")),
                     fmt_ms(s.get("step_s")), fmt_int(s.get("compilations")),
                     fmt_s(s.get("compile_s")), counts_text(s.get("recompile_reasons")),
                     num(s.get("peak_device_mib"), 4)])
    return head, rows


def bucketing_items(b: dict[str, Any]) -> Items:
    buckets = b.get("buckets") or {}
    overhead = b.get("padding_overhead")
    return [
        ("Distinct sizes", fmt_int(b.get("distinct_sizes"))),
        ("Distinct buckets", fmt_int(b.get("distinct_buckets"))),
        ("Batch buckets", ", ".join(map(str, buckets.get("batch") or [])) or DASH),
        ("Length buckets", ", ".join(map(str, buckets.get("length") or [])) or DASH),
        ("Compilations saved", num(b.get("compilations_saved"))),
        ("Compile s saved", fmt_s(b.get("compile_s_saved"))),
        ("Padding overhead", DASH if overhead is None else f"{num(overhead * 100)}%"),
        ("Note", text(b.get("note"))),
    ]


def adaptation_table(report: dict[str, Any]) -> Table:
    head = ["Kind", "Item", "Why", "Effort"]
    rows = [[text(a.get(k)) for k in ("kind", "item", "why", "effort")]
            for a in report.get("adaptation") or []]
    return head, rows


def budget_items(report: dict[str, Any]) -> Items:
    b, spend = report.get("budget") or {}, report.get("spend") or {}
    by_device = ", ".join(f"{k}: {fmt_s(v)} s" for k, v in (spend.get("by_device") or {}).items())
    return [
        ("Budget s", fmt_s(b.get("seconds"))),
        ("Used s", fmt_s(b.get("used_s"))),
        ("Stopped by", text(b.get("stopped"))),
        ("Spend wall s", fmt_s(spend.get("wall_s"))),
        ("Spend by device", by_device or DASH),
        ("Spend USD", fmt_usd(spend.get("usd"))),
    ]


def machine_items(report: dict[str, Any]) -> Items:
    m = report.get("machine") or {}
    return [("CPU", text(m.get("cpu"))), ("Cores", fmt_int(m.get("cores"))),
            ("Memory GiB", num(m.get("memory_gib"))), ("Target", text(m.get("target"))),
            ("Reference", text(m.get("reference")))]


def tool_items(report: dict[str, Any]) -> Items:
    t = report.get("tool") or {}
    return [("torch-pjrt", text(t.get("torch_pjrt"))), ("torch", text(t.get("torch"))),
            ("Command", text(t.get("command"))), ("Created", text(t.get("created")))]


# --- Markdown ----------------------------------------------------------------

def md_text(value: str) -> str:
    """Report text for Markdown: one line, no raw HTML (`<` and `\\` escaped)."""
    return " ".join(str(value).split()).replace("\\", "\\\\").replace("<", "\\<") or DASH


def md_cell(value: str) -> str:
    """A table cell: `md_text` with `|` escaped too."""
    return md_text(value).replace("|", "\\|")


def md_table(table: Table) -> list[str]:
    head, rows = table
    if not rows:
        return ["None."]
    lines = ["| " + " | ".join(md_cell(h) for h in head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return lines


def md_items(items: Items) -> list[str]:
    return [f"- **{name}:** {md_text(value)}" for name, value in items]


def render_markdown(report: dict[str, Any]) -> str:
    """The whole report.md text."""
    name = text(_get(report.get("workload"), "name"))
    verdict = report.get("verdict") or {}
    summary = [md_text(line) for line in text(verdict.get("summary")).splitlines()]
    out = [f"# Readiness: {md_text(name)}", "", f"**{md_text(verdict_line(report))}**", "",
           "## Verdict", "", f"**Status:** {md_text(text(verdict.get('status')))}", "",
           "\n\n".join(summary), ""]
    warning = fail_warning(report)
    if warning:
        out += [f"> **{warning}**", ""]
    out += ["## Workload", "", *md_items(workload_items(report)), ""]
    out += ["## Correctness", "", *md_table(correctness_table(report)), ""]
    out += ["## Speed and cost", "", *md_table(speed_table(report)), "",
            f"Prices: {md_text(text(report.get('price_assumption')))}", ""]
    census = report.get("census")
    out += ["## Op census", ""]
    if census:
        out += [md_text(census_totals_line(census)), "",
                "### Ops", "", *md_table(census_ops_table(census)), "",
                "### Host syncs", "", *md_table(census_syncs_table(census)), ""]
    else:
        out += [f"{DASH} (no census was taken)", ""]
    out += ["## Sizes", ""]
    sized = [p for p in report.get("parts") or [] if p.get("sizes")]
    for part in sized:
        out += [f"### {md_text(text(part.get('name')))}", "", *md_table(size_table(part)), ""]
    if not sized:
        out += [f"{DASH} (no part ran the size sweep)", ""]
    if report.get("bucketing"):
        out += ["## Bucketing", "", *md_items(bucketing_items(report["bucketing"])), ""]
    out += ["## Adaptation effort", "", *md_table(adaptation_table(report)), ""]
    out += ["## Budget and spend", "", *md_items(budget_items(report)), ""]
    out += ["## Machine", "", *md_items(machine_items(report)), ""]
    out += ["## Tool", "", *md_items(tool_items(report)), ""]
    return "\n".join(out)
