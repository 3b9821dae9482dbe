"""The report: the parts' records turned into report.json (schema.json),
then report.md and report.html.

Speed figures come only from the timing phase (steps timed one by one, each
to the device's completion); the ratio against the reference is the
reference's p50 over the part's, and is left out for a part whose results are
not correct. Costs are wall time times the hourly price the user gave.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
from pathlib import Path
from typing import Optional

import torch

from . import adaptation, correctness
from .measure import median, percentile
from .protocol import Size, Workload
from .runner import Plan, PartRun

SCHEMA = "torch-pjrt-readiness/1"


def _num(value) -> Optional[float]:
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _speed(workload: Workload, record: dict, size: Size, ref_p50: Optional[float], correct: bool) -> dict:
    timing = record.get("timing") or {}
    quality = record.get("quality") or {}
    times = timing.get("step_s") or []
    p50, p95 = median(times), percentile(times, 95)
    first = (quality.get("step_s") or [None])[0]
    return {
        "startup_s": _num(record.get("startup_s")), "build_s": _num(record.get("build_s")),
        "first_step_s": _num(first),
        "compile_s": _num(quality.get("compile_s")) if record.get("device") != "cpu" else None,
        "p50_s": _num(p50), "p95_s": _num(p95), "steps_timed": len(times),
        "throughput": _num(workload.tasks(size) / p50) if p50 else None,
        "tokens_per_s": _num(workload.tokens(size) / p50) if p50 else None,
        "ratio_vs_reference": _num(ref_p50 / p50) if (p50 and ref_p50 and correct) else None,
        "peak_device_mib": _num(record.get("peak_device_mib")),
        "peak_host_mib": _num(record.get("peak_host_mib")),
        "programs_per_step": _num(timing.get("programs_per_step")) if record.get("device") != "cpu" else None,
        "host_syncs_per_step": _num(timing.get("host_syncs_per_step")) if record.get("device") != "cpu" else None,
        "compilations_after_warmup": (timing.get("compilations_after_warmup")
                                      if timing and record.get("device") != "cpu" else None),
    }


def _cost(workload: Workload, record: dict, speed: dict, corr: dict, price: Optional[float],
          size: Size, usable: bool) -> dict:
    out = {"price_per_hour": price, "time_per_correct_task_s": None, "per_correct_task_usd": None,
           "time_to_target_s": None, "target_reached_step": None, "cost_to_target_usd": None}
    if not usable:
        return out
    per_usd = (price / 3600.0) if price is not None else None
    if workload.kind == "infer" and speed["p50_s"]:
        fraction = 1.0
        if corr.get("samples"):
            fraction = corr["samples_ok"] / corr["samples"]
        if fraction > 0:
            t = speed["p50_s"] / (workload.tasks(size) * fraction)
            out["time_per_correct_task_s"] = t
            out["per_correct_task_usd"] = t * per_usd if per_usd is not None else None
    quality = record.get("quality") or {}
    k = quality.get("target_reached_step")
    if workload.kind == "train" and k is not None:
        steps = quality["step_s"][: k + 1]
        t = (record.get("startup_s") or 0.0) + (record.get("build_s") or 0.0) + sum(steps)
        out.update(time_to_target_s=t, target_reached_step=k + 1,
                   cost_to_target_usd=t * per_usd if per_usd is not None else None)
    return out


def _sizes(record: dict) -> list[dict]:
    quality = record.get("quality")
    out = []
    if quality:
        rest = quality["step_s"][1:]
        out.append({"size": quality["size"], "status": "done", "detail": "the quality run",
                    "first_step_s": _num(quality["step_s"][0]), "step_s": _num(median(rest)),
                    "compilations": quality.get("compilations") if record["device"] != "cpu" else None,
                    "compile_s": _num(quality.get("compile_s")) if record["device"] != "cpu" else None,
                    "recompile_reasons": quality.get("recompile_reasons", {}),
                    "peak_device_mib": _num(record.get("peak_device_mib"))})
    for entry in record.get("sizes", []):
        on_device = record["device"] != "cpu"
        out.append({"size": entry["size"], "status": entry["status"], "detail": entry.get("detail", ""),
                    "first_step_s": _num(entry.get("first_step_s")), "step_s": _num(entry.get("step_s")),
                    "compilations": entry.get("compilations") if on_device else None,
                    "compile_s": _num(entry.get("compile_s")) if on_device else None,
                    "recompile_reasons": entry.get("recompile_reasons", {}) or {},
                    "peak_device_mib": _num(entry.get("peak_device_mib"))})
    return out


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def bucketing(sizes: list[dict]) -> tuple[Optional[dict], Optional[float]]:
    """What padding to power-of-two buckets would have saved on the sizes
    this part ran: (the entry, compilations per new size)."""
    done = [s for s in sizes if s["status"] == "done" and s["compilations"] is not None]
    if len(done) < 2:
        return None, None
    parsed = [Size.parse(s["size"]) for s in done]
    new = done[1:]  # the first size pays for everything built once
    per_size = sum(s["compilations"] for s in new) / len(new)
    seconds = sum(s["compile_s"] or 0.0 for s in new) / len(new)
    buckets = {Size(_pow2(s.batch), _pow2(s.length)) for s in parsed}
    saved = max(0, len(set(parsed)) - len(buckets))
    real = sum(s.batch * s.length for s in parsed)
    padded = sum(_pow2(s.batch) * _pow2(s.length) for s in parsed)
    note = ("An estimate: each bucket is assumed to compile what one new size compiled here, once. "
            "Padding is correct only where the padded positions are masked (attention masks, "
            "ignored labels).")
    if saved == 0:
        note = "The sizes already fall in distinct power-of-two buckets: bucketing them saves nothing. " + note
    return {"distinct_sizes": len(set(parsed)), "distinct_buckets": len(buckets),
            "buckets": {"batch": sorted({b.batch for b in buckets}),
                        "length": sorted({b.length for b in buckets})},
            "compilations_saved": saved * per_size, "compile_s_saved": saved * seconds,
            "padding_overhead": (padded - real) / real if real else 0.0, "note": note}, per_size


def _verdict(parts: list[dict], stopped: Optional[str]) -> dict:
    targets = [p for p in parts if p["role"] == "target"]
    failed = [p for p in targets if p["correctness"]["status"] in ("fail", "error")]
    passed = [p for p in targets if p["correctness"]["status"] == "pass"]
    if failed:
        names = ", ".join(f"{p['name']} ({p['correctness']['status']})" for p in failed)
        return {"status": "fail", "summary": f"Not acceptable on the target: {names}. "
                "Speed and cost figures of these parts are not wins."}
    if len(passed) == len(targets) and targets:
        return {"status": "pass", "summary": f"Every target mode ({', '.join(p['mode'] for p in targets)}) "
                "matches the reference within the stated tolerances."}
    missing = ", ".join(f"{p['name']} ({p['correctness']['status']})" for p in targets if p not in passed)
    why = {"budget": " The budget ran out.", "interrupted": " The run was interrupted."}.get(stopped or "", "")
    return {"status": "incomplete", "summary": f"Not every target mode could be judged: {missing}.{why}"}


def _machine(parts: list[PartRun]) -> dict:
    info = {p.role: p.record.get("device_info") for p in parts if p.record.get("device_info")}
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory = None
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count() or 0,
            "memory_gib": _num(memory), "target": info.get("target", "—"),
            "reference": info.get("reference", "—")}


def build(plan: Plan, parts: list[PartRun], stopped: Optional[str], used_s: float) -> dict:
    import torch_pjrt

    workload = plan.workload
    size = plan.sizes[0]
    reference = next((p for p in parts if p.role == "reference" and p.device == "cpu"), parts[0])
    ref_times = (reference.record.get("timing") or {}).get("step_s") or []
    ref_p50 = median(ref_times)
    out_parts, census, params = [], None, None
    for p in parts:
        rec = p.record
        if p.role == "reference":
            corr = correctness.reference_entry(rec)
        else:
            corr = correctness.judge(workload, p.status, rec, reference.record)
        correct = corr["status"] in ("pass", "reference")
        speed = _speed(workload, rec, size, None if p is reference else ref_p50, corr["status"] == "pass")
        price = plan.prices.get(p.device)
        out_parts.append({
            "name": p.name, "device": p.device, "mode": p.mode, "role": p.role, "status": p.status,
            "detail": p.detail, "correctness": corr, "speed": speed,
            "cost": _cost(workload, rec, speed, corr, price, size, correct),
            "sizes": _sizes(rec) if rec else [], "compile": rec.get("compile"),
        })
        if census is None and rec.get("census"):
            census = rec["census"]
        params = params or rec.get("parameters")
    target_parts = [p for p in out_parts if p["role"] == "target"]
    sweep = max(target_parts, key=lambda p: len([s for s in p["sizes"] if s["status"] == "done"]),
                default=None)
    buckets, per_size = bucketing(sweep["sizes"]) if sweep else (None, None)
    peak = max((p["speed"]["peak_device_mib"] or 0 for p in target_parts), default=0) or None
    effort = (adaptation.from_correctness(out_parts) + adaptation.from_census(census)
              + adaptation.from_sizes(buckets, per_size) + adaptation.from_compile(target_parts)
              + adaptation.distribution(workload.kind, params, peak, plan.device_memory_gib))
    by_device: dict[str, float] = {}
    for p in parts:
        by_device[p.device] = by_device.get(p.device, 0.0) + p.wall_s
    priced = [d for d in by_device if d in plan.prices]
    return scrub({
        "schema": SCHEMA,
        "tool": {"torch_pjrt": getattr(torch_pjrt, "__version__", "dev"), "torch": torch.__version__,
                 "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "command": plan.command},
        "machine": _machine(parts),
        "workload": {"name": workload.name, "description": workload.description, "kind": workload.kind,
                     "source": workload.source, "steps": (reference.record.get("quality") or {}).get("steps", 0),
                     "sizes": [str(s) for s in plan.sizes], "metric": workload.metric_name,
                     "target": workload.target, "higher_is_better": workload.higher_is_better,
                     "rtol": workload.rtol, "atol": workload.atol,
                     "metric_tolerance": workload.metric_tolerance, "parameters": params},
        "budget": {"seconds": plan.budget_s, "used_s": used_s, "stopped": stopped},
        "prices": dict(plan.prices),
        "price_assumption": _price_assumption(plan, out_parts),
        "verdict": _verdict(out_parts, stopped),
        "parts": out_parts,
        "census": census,
        "bucketing": buckets,
        "adaptation": effort,
        "spend": {"wall_s": sum(by_device.values()), "by_device": by_device,
                  "usd": (sum(by_device[d] * plan.prices[d] / 3600 for d in priced) if priced else None)},
    })


def _prefixes() -> list[tuple[str, str]]:
    """Machine directories a report should not carry (Dynamo's reasons and
    tracebacks name files by absolute path), longest first."""
    import site
    import sysconfig

    import torch_pjrt

    dirs = [(d.rstrip("/") + "/", "") for d in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]]
    dirs.append((os.path.dirname(os.path.dirname(torch_pjrt.__file__)) + "/", ""))
    dirs.append((sysconfig.get_paths()["stdlib"].rstrip("/") + "/", ""))
    home = os.path.expanduser("~")
    if home not in ("/", "~"):
        dirs.append((home.rstrip("/") + "/", "~/"))
    return sorted(set(dirs), key=lambda pair: -len(pair[0]))


def scrub(value, prefixes: Optional[list] = None):
    """`value` with the machine's directories cut out of every string."""
    prefixes = _prefixes() if prefixes is None else prefixes
    if isinstance(value, str):
        for prefix, replacement in prefixes:
            value = value.replace(prefix, replacement)
        return value
    if isinstance(value, dict):
        return {scrub(k, prefixes): scrub(v, prefixes) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, prefixes) for v in value]
    return value


def _price_assumption(plan: Plan, parts: list[dict]) -> str:
    devices = sorted({p["device"] for p in parts})
    missing = [d for d in devices if d not in plan.prices]
    given = ", ".join(f"{d} {plan.prices[d]:g} USD/hour" for d in devices if d in plan.prices)
    text = ("Cost = measured wall time x the hourly price given with --price, / 3600, for the time "
            "this machine took: " + (given or "no price was given") + ". ")
    text += ("Training cost to target counts process start-up, building the model, compilation and "
             "every step until the target is reached; inference cost per correct task divides a "
             "step's p50 by the tasks in it that match the reference. The spend counts every part "
             "run, including those stopped or failed. ")
    if missing:
        text += f"No price for {', '.join(missing)}: no cost figure there. "
    text += ("The figures describe the devices this run used; where the target is the XLA CPU "
             "plugin standing in for a TPU, they predict correctness and compilation behaviour, "
             "not TPU speed.")
    return text


def write(out: Path, report: dict) -> dict[str, Path]:
    from .render_html import render_html
    from .render_md import render_markdown

    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "md": out / "report.md", "html": out / "report.html"}
    paths["json"].write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    paths["md"].write_text(render_markdown(report), encoding="utf-8")
    paths["html"].write_text(render_html(report), encoding="utf-8")
    return paths
