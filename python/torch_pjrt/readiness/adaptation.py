"""The adaptation effort: what a team must change for the workload to run
well on the target, read off what the run measured.

Each entry names one thing (an op, a line of the user's code, a set of
shapes, a compiled graph, the model's size) with why (the measurement) and a
rough effort: small (a setting or a line), medium (a rewrite of a few lines
or an op lowering), large (a kernel, a design change, a wrong result to
chase).
"""

from __future__ import annotations

from typing import Optional


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def from_correctness(parts: list[dict]) -> list[dict]:
    out = []
    for part in parts:
        c = part["correctness"]
        if c["status"] in ("fail", "error"):
            out.append({"kind": "op", "item": f"{part['name']}: results differ from the reference"
                        if c["status"] == "fail" else f"{part['name']}: the run fails",
                        "why": c["first_mismatch"] or part["detail"] or c["status"],
                        "effort": "large"})
    return out


def from_census(census: Optional[dict]) -> list[dict]:
    if not census:
        return []
    out = []
    for op in census["ops"]:
        if op["status"] == "unsupported":
            error = census.get("errors", {}).get(op["op"], "")
            out.append({"kind": "op", "item": op["op"],
                        "why": f"raises on the device ({error}); lower it, or replace the call",
                        "effort": "large"})
        elif op["status"] == "fallback":
            inner = ", ".join(op["fallback_ops"])
            kind = "kernel" if not op["op"].startswith("aten::") else "op"
            out.append({"kind": kind, "item": op["op"] + (f" (runs {inner} on the CPU)"
                                                          if inner and inner != op["op"] else ""),
                        "why": f"{op['count']} call(s) per step fall back to the CPU, {_ms(op['fallback_s'])} "
                               "in the census step with copies both ways; lower it "
                               "(csrc/ops), or bring a kernel in with torch_pjrt.jax_op / stablehlo_op",
                        "effort": "medium"})
    for sync in census["syncs"]:
        out.append({"kind": "sync", "item": sync["site"] + (f" (from {sync['origin']})" if sync["origin"] else ""),
                    "why": f"{sync['count']} host sync(s) per step through {sync['op']}: the host waits "
                           "for the device; keep the value on the device, or read it every N steps",
                    "effort": "small"})
    return out


def from_sizes(bucketing: Optional[dict], new_size_compilations: Optional[float]) -> list[dict]:
    if not bucketing or not new_size_compilations:
        return []
    b = bucketing
    why = f"each new input size compiled {new_size_compilations:.3g} program(s) ({b['distinct_sizes']} sizes run); "
    if b["distinct_buckets"] < b["distinct_sizes"]:
        why += (f"padding batch to {b['buckets']['batch']} and length to {b['buckets']['length']} "
                f"(torch_pjrt.bucketing.pad_batch) leaves {b['distinct_buckets']} shapes, "
                f"about {b['compile_s_saved']:.3g} s of compilation saved")
    else:
        why += ("they are already in distinct power-of-two buckets; in production keep the set of "
                "sizes a step sees small (pad to a few buckets)")
    return [{"kind": "shapes", "item": f"{b['distinct_sizes']} input sizes", "why": why, "effort": "small"}]


def from_compile(parts: list[dict]) -> list[dict]:
    out = []
    for part in parts:
        info = part.get("compile")
        if not info:
            continue
        if info["eager_ops"]:
            ops = ", ".join(f"{k} x{v}" for k, v in sorted(info["eager_ops"].items()))
            out.append({"kind": "compile", "item": f"{part['name']}: ops outside the compiled program",
                        "why": f"no lowering, so they run eagerly between programs: {ops}",
                        "effort": "medium"})
        if info["graph_breaks"]:
            out.append({"kind": "compile", "item": f"{part['name']}: {info['graph_breaks']} graph break(s)",
                        "why": "Dynamo split the step; torch._dynamo.explain(step) names where",
                        "effort": "medium"})
        after = part["speed"].get("compilations_after_warmup")
        if after:
            out.append({"kind": "compile", "item": f"{part['name']}: recompiles after warm-up",
                        "why": f"{after} compilation(s) during the timed steps; a Python value "
                               "changing each step is being specialized", "effort": "medium"})
    return out


def distribution(kind: str, parameters: Optional[int], peak_device_mib: Optional[float],
                 device_memory_gib: Optional[float]) -> list[dict]:
    if not parameters:
        return []
    per_param = 16 if kind == "train" else 4  # fp32 weights (+ grads and AdamW's two moments)
    state_mib = parameters * per_param / 2**20
    what = "weights, gradients and AdamW state" if kind == "train" else "weights"
    why = f"{parameters:,} parameters: {state_mib:.3g} MiB of fp32 {what}"
    if peak_device_mib:
        why += f"; peak device memory measured {peak_device_mib:.3g} MiB"
    if device_memory_gib and peak_device_mib and peak_device_mib > device_memory_gib * 1024 * 0.9:
        return [{"kind": "distribution", "item": "shard the model",
                 "why": why + f", more than 90% of the {device_memory_gib:g} GiB given per device: "
                              "shard parameters and state with FSDP2 (fully_shard) over the devices",
                 "effort": "medium"}]
    fits = f" (within the {device_memory_gib:g} GiB given per device)" if device_memory_gib else ""
    return [{"kind": "distribution", "item": "data parallel",
             "why": why + fits + ": one device holds it; scale out with DDP or FSDP2 "
                                 "(docs/DISTRIBUTED.md) when throughput needs it",
             "effort": "small"}]
