"""Tables, JSON and the chart of a harness run.

The Markdown leads with ratios: each mode's steps/s relative to CPU PyTorch
eager measured in the same run (above 1 is faster than CPU eager). Absolute
medians, their spread, first-step and warm-up times, compilations, fallbacks,
host syncs, memory and GFLOP/s follow.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

BASELINE = "cpu_eager"


def _cell(results: list[dict], workload: str, mode: str) -> Optional[dict]:
    for r in results:
        if r["workload"] == workload and r["mode"] == mode:
            return r
    return None


def fmt_time(s: Optional[float]) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "n/a"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} µs"


def fmt_num(v: Optional[float], digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def speedup(results: list[dict], workload: str, mode: str) -> Optional[float]:
    base, cell = _cell(results, workload, BASELINE), _cell(results, workload, mode)
    if not base or not cell or base.get("status") != "ok" or cell.get("status") != "ok":
        return None
    return base["step_s"] / cell["step_s"]


def status_text(cell: Optional[dict]) -> Optional[str]:
    if cell is None:
        return "—"
    if cell["status"] == "ok":
        return None
    word = {"wrong": "WRONG", "error": "error", "unavailable": "n/a"}[cell["status"]]
    return f"{word}¹" if cell["status"] != "unavailable" else "n/a¹"


def matmul_peak(results: list[dict]) -> Optional[float]:
    values = [r["gflops"] for r in results
              if r["workload"] == "matmul" and r["status"] == "ok" and r.get("gflops")]
    return max(values) if values else None


def _mode_table(title: str, results: list[dict], workloads: list[dict], modes: list[str],
                text) -> list[str]:
    """A workloads x modes table of `text(cell)` for the cells that ran."""
    lines = [f"## {title}", "", "| workload | " + " | ".join(modes) + " |",
             "| --- | " + " | ".join("---:" for _ in modes) + " |"]
    for w in workloads:
        row = []
        for m in modes:
            c = _cell(results, w["name"], m)
            row.append(text(c) if c and c["status"] == "ok" else "—")
        lines.append(f"| {w['name']} | " + " | ".join(row) + " |")
    return lines + [""]


def markdown(run: dict[str, Any]) -> str:
    results = run["results"]
    workloads = run["workloads"]
    modes = run["modes"]
    lines = [f"# {run['title']}", "",
             f"{run['date']}, {run['machine']['cpu_model']}, {run['machine']['cores']} cores, "
             f"{run['machine'].get('memory_gib')} GiB; torch {run['versions']['torch']}; plugin "
             f"{run['machine'].get('plugin')} (PJRT C API {run['machine'].get('pjrt_api_version')})"
             f"{'; quick run' if run.get('quick') else ''}.", ""]
    device_modes = [m for m in modes if m.startswith("tpu")]
    if device_modes:
        lines += ["## Summary: torch-pjrt's fastest mode per workload", "",
                  "| workload | best mode | vs CPU eager | vs inductor (CPU) | vs JAX jit (same plugin) "
                  "| vs torchax (best) | first step (vs JAX jit's) | warm-up |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for w in workloads:
            cells = [c for m in device_modes
                     if (c := _cell(results, w["name"], m)) and c["status"] == "ok"]
            if not cells:
                lines.append(f"| {w['name']} | none ran | — | — | — | — | — | — |")
                continue
            best = min(cells, key=lambda c: c["step_s"])

            def versus(mode_names: list[str]) -> str:
                others = [c for m in mode_names
                          if (c := _cell(results, w["name"], m)) and c["status"] == "ok"]
                if not others:
                    return "n/a"
                return f"{min(o['step_s'] for o in others) / best['step_s']:.2f}x"

            jax = _cell(results, w["name"], "jax_jit")
            first = fmt_time(best["first_step_s"])
            if jax and jax["status"] == "ok":
                first += f" ({best['first_step_s'] / jax['first_step_s']:.1f}x)"
            lines.append(f"| {w['name']} | {best['mode']} | {versus([BASELINE])} | "
                         f"{versus(['cpu_inductor'])} | {versus(['jax_jit'])} | "
                         f"{versus(['torchax_eager', 'torchax_jit'])} | "
                         f"{first} | {fmt_time(best['warmup_s'])} |")
        lines += ["", "Ratios are the other mode's step time over the best mode's: above 1x "
                  "torch-pjrt is faster; n/a: that baseline did not run (see the notes).", ""]
    lines += ["## Steps/s relative to CPU PyTorch eager (higher is faster)", "",
              "| workload | " + " | ".join(modes) + " |",
              "| --- | " + " | ".join("---:" for _ in modes) + " |"]
    notes: list[str] = []
    for w in workloads:
        row = []
        for m in modes:
            cell = _cell(results, w["name"], m)
            text = status_text(cell)
            if text is None:
                s = speedup(results, w["name"], m)
                text = f"{s:.2f}x" if s is not None else "n/a"
            elif cell is not None:
                notes.append(f"{w['name']} / {m}: {cell['detail']}")
            row.append(text)
        lines.append(f"| {w['name']} | " + " | ".join(row) + " |")
    lines.append("")
    lines += _mode_table(
        "Median step time (spread = (max - min) / median over the repeats)", results, workloads,
        modes, lambda c: f"{fmt_time(c['step_s'])} ±{c['step_spread'] * 100:.0f}%")
    lines += _mode_table(
        "First step (compilation included) / warm-up after it", results, workloads, modes,
        lambda c: f"{fmt_time(c['first_step_s'])} / {fmt_time(c['warmup_s'])}")
    if run.get("warm_start"):
        lines += _mode_table(
            "Warm start: first step in a second process that finds the first one's caches / "
            "its share of the cold first step", results, workloads, modes,
            lambda c: (f"{fmt_time(c['warm_first_step_s'])} / "
                       f"{100 * c['warm_first_step_s'] / c['first_step_s']:.0f}%"
                       if c.get("warm_first_step_s") is not None else "n/a"))
    lines += ["## Compilations, programs per step, CPU fallbacks, host syncs per step, peak memory",
              "", "compiles: torch-pjrt programs in the first step / after warm-up; Dynamo graphs: "
              "captured in the whole cell (any backend); after step 2: programs and Dynamo graphs "
              "per 100 steps from step 3 on; peak memory: host RSS MiB / device MiB.", "",
              "| workload | mode | compiles | Dynamo graphs | after step 2 /100 steps | programs/step "
              "| device busy / idle between programs, ms/step | fallbacks | syncs/step | peak RSS "
              "| peak device |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for w in workloads:
        for m in modes:
            c = _cell(results, w["name"], m)
            if not c or c["status"] != "ok":
                continue
            timeline = (f"{fmt_num(c['device_busy_ms_per_step'])} / "
                        f"{fmt_num(c['device_idle_ms_per_step'])}"
                        if c.get("device_busy_ms_per_step") is not None else "n/a")
            later = c.get("compilations_after_step2")
            per100 = (f"{100 * later / c['steps_after_step2']:.1f} ({later} in "
                      f"{c['steps_after_step2']})" if later is not None and c.get("steps_after_step2")
                      else "n/a")
            lines.append(f"| {w['name']} | {m} | {c['compilations_first_step']} / "
                         f"{c['compilations_after_warmup']} | {fmt_num(c.get('dynamo_graphs'))} | "
                         f"{per100} | "
                         f"{fmt_num(c.get('programs_per_step'))} | {timeline} | {c['fallbacks']} | "
                         f"{fmt_num(c['host_syncs_per_step'])} | {fmt_num(c['peak_host_rss_mib'])} | "
                         f"{fmt_num(c['peak_device_mib'])} |")
    lines.append("")
    peak = matmul_peak(results)
    lines += ["## Achieved GFLOP/s (FLOPs counted by torch's FlopCounterMode) and fraction of "
              f"the matmul peak measured in this run ({fmt_num(peak)} GFLOP/s)", "",
              "| workload | " + " | ".join(modes) + " |",
              "| --- | " + " | ".join("---:" for _ in modes) + " |"]
    for w in workloads:
        row = []
        for m in modes:
            c = _cell(results, w["name"], m)
            if c and c["status"] == "ok" and c.get("gflops"):
                frac = f" ({c['gflops'] / peak * 100:.0f}%)" if peak else ""
                row.append(f"{fmt_num(c['gflops'])}{frac}")
            else:
                row.append("—")
        lines.append(f"| {w['name']} | " + " | ".join(row) + " |")
    lines.append("")
    lines += ["Workloads: " + "; ".join(f"{w['name']}: {w['description']}" for w in workloads) + ".",
              "", "Modes: " + "; ".join(f"{m}: {run['mode_descriptions'].get(m, m)}" for m in modes)
              + "."]
    if notes:
        lines += ["", "¹ " + "  \n¹ ".join(_group_notes(notes))]
    return "\n".join(lines) + "\n"


def _group_notes(notes: list[str]) -> list[str]:
    """One line per distinct reason, listing the cells it applies to."""
    by_reason: dict[str, list[str]] = {}
    for note in notes:
        cell, reason = note.split(": ", 1)
        by_reason.setdefault(reason, []).append(cell)
    out = []
    for reason, cells in by_reason.items():
        modes = sorted({c.split(" / ")[1] for c in cells})
        workloads = sorted({c.split(" / ")[0] for c in cells})
        where = (f"{', '.join(modes)} (every workload listed)" if len(cells) == len(modes) * len(workloads)
                 and len(workloads) > 1 else ", ".join(cells))
        out.append(f"{where}: {reason}")
    return out


def write(run: dict[str, Any], out_dir: Path, stem: str, plot: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md"]
    paths[0].write_text(json.dumps(run, indent=2) + "\n")
    paths[1].write_text(markdown(run))
    if plot:
        png = chart(run, out_dir / f"{stem}.png")
        if png:
            paths.append(png)
    return paths


def chart(run: dict[str, Any], path: Path) -> Optional[Path]:
    """A grouped bar chart of the speedups (log scale); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return None
    results, modes = run["results"], run["modes"]
    names = [w["name"] for w in run["workloads"]]
    modes = [m for m in modes if any(speedup(results, n, m) for n in names)]
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(names) + 2), 4))
    width = 0.8 / max(len(modes), 1)
    for i, m in enumerate(modes):
        values = [speedup(results, n, m) or 0 for n in names]
        xs = [k + (i - (len(modes) - 1) / 2) * width for k in range(len(names))]
        ax.bar(xs, values, width, label=m)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_ylabel("steps/s relative to CPU eager (log)")
    ax.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(
        [0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10, 20, 50, 100]))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title(f"{run['title']} ({run['machine']['cpu_model']}, {run['machine']['cores']} cores)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
