"""Times tiny Hugging Face models on CPU PyTorch and on the tpu device (strict eager).

    python benchmarks/hf_models.py

The models are those of tests/test_transformers.py: tiny Llama, GPT-2 and BERT
(2 layers, hidden size 64, vocabulary 1000, sdpa attention) built from configs,
with its inputs (token ids [2, 16] and an attention mask). In one process, for
each model, CPU PyTorch and the tpu device run the same work from the same
weights:

- forward: model(input_ids, attention_mask) under no_grad, in tokens/s
  (32 tokens a call);
- training: zero_grad, forward with labels (the ids for Llama and GPT-2, the
  classes [0, 2] for BERT), backward, AdamW(lr=1e-3).step(), dropout modules
  set to p=0, in steps/s;
- greedy generation, Llama and GPT-2 only:
  model.generate(ids[:1, :8], max_new_tokens=32, min_new_tokens=32,
  do_sample=False), in generated tokens/s, after one warm-up generate.

Forward and training: warm-up calls, then the median of interleaved batches
of N calls, N chosen so that a batch takes ~--batch-ms; a tpu batch starts and
ends with torch.tpu.synchronize(). Generation: the median of interleaved timed
generates. Ratios are tpu over CPU throughput (below 1x the tpu device is
slower). After warm-up no program may be compiled or loaded from the disk cache
and no op may fall back to CPU; the script exits with status 1 otherwise.

The compile cache lives in a temporary folder (the user's cache is neither
read nor written) and the Hub is offline. Before it starts the script waits
(--quiet-wait) for other processes to go quiet, and up to 10 s more before
each later model. Results go to
benchmarks/results/hf_models-<date>-<machine>.{json,md}, with no host name
and no absolute path.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before torch_pjrt and transformers are imported: they read these at import.
_CACHE_DIR = tempfile.TemporaryDirectory(prefix="torch_pjrt_hf_bench_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE_DIR.name
os.environ["TORCH_PJRT_EAGER"] = "strict"
os.environ["HF_HUB_OFFLINE"] = "1"

import torch
import torch_pjrt
import transformers

# benchmarks/ is not a package; running this file puts its folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime import DEFAULT_OUT, REPO, fmt, machine_facts, machine_tag
from _common import plugin_facts, system_busy_s, wait_for_quiet, write_results

sys.path.insert(0, str(REPO / "tests"))
import test_transformers as t

SCHEMA = "torch-pjrt/hf-models-bench/1"
DEVICE = torch_pjrt.settings().device_name
KINDS = ("llama", "gpt2", "bert")
GENERATES = ("llama", "gpt2")
ATTN = "sdpa"
NEW_TOKENS = 32
GEN_KWARGS: dict[str, Any] = {
    "max_new_tokens": NEW_TOKENS,
    "min_new_tokens": NEW_TOKENS,
    "do_sample": False,
}
CALIBRATION_S = 0.02  # grow N until one batch takes at least this long, then scale
COUNTERS = ("compilations", "cache_hits_disk", "executions", "host_syncs")

transformers.logging.set_verbosity_error()  # GPT-2's pad-token notice on every generate


def sync() -> None:
    torch.tpu.synchronize()


def counters() -> dict[str, int]:
    m = torch_pjrt.metrics()
    return {key: m[key] for key in COUNTERS}


def diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in before}


def make(kind: str, device: str, train: bool) -> torch.nn.Module:
    model = t.tiny(kind, ATTN)  # seeds itself: the same weights on both devices
    if train:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        model.train()
    return model.to(device)


def timed_batch(fn: Callable[[], Any], n: int, on_device: bool) -> float:
    """Seconds for n calls; a device batch counts until its work is done."""
    if on_device:
        sync()  # start from an idle device
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if on_device:
            sync()
        return time.perf_counter() - start
    finally:
        gc.enable()


def calls_per_batch(fn: Callable[[], Any], on_device: bool, target_s: float) -> int:
    n = 1
    while (elapsed := timed_batch(fn, n, on_device)) < CALIBRATION_S:
        n *= 2
    return max(1, round(target_s * n / elapsed))


def interleaved(
    fns: dict[str, Callable[[], Any]], batches: int, target_s: float | None
) -> dict[str, Any]:
    """Median seconds per call of each device's fn, batches interleaved; with
    target_s None every batch is one call. Counters are those of the tpu batches."""
    n = {
        dev: 1 if target_s is None else calls_per_batch(fn, dev != "cpu", target_s)
        for dev, fn in fns.items()
    }
    samples: dict[str, list[float]] = {dev: [] for dev in fns}
    tpu_counts = dict.fromkeys(COUNTERS, 0)
    other_s = dict.fromkeys(fns, 0.0)
    order = list(fns)
    for i in range(batches):
        for dev in order[i % 2 :] + order[: i % 2]:  # alternate which goes first
            before = counters()
            busy, own = system_busy_s(), time.process_time()
            elapsed = timed_batch(fns[dev], n[dev], dev != "cpu")
            other_s[dev] += (system_busy_s() - busy) - (time.process_time() - own)
            if dev != "cpu":
                for key, value in diff(counters(), before).items():
                    tpu_counts[key] += value
            samples[dev].append(elapsed / n[dev])
    return {
        dev: {
            "s_per_call": statistics.median(samples[dev]),
            "s_per_call_min": min(samples[dev]),
            "s_per_call_max": max(samples[dev]),
            "calls_per_batch": n[dev],
            "batches": batches,
            "other_processes_cores": round(
                max(0.0, other_s[dev]) / (sum(samples[dev]) * n[dev]), 3
            ),
            **(
                {
                    "counters_total": tpu_counts,
                    "per_call": {
                        k: round(v / (n[dev] * batches), 3) for k, v in tpu_counts.items()
                    },
                }
                if dev != "cpu"
                else {}
            ),
        }
        for dev in fns
    }


def throughput(
    timing: dict[str, Any], units_per_call: int, unit: str, digits: int = 1
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dev in ("cpu", "tpu"):
        out[dev] = {
            f"{unit}_per_s": round(units_per_call / timing[dev]["s_per_call"], digits),
            **{k: round(v, 6) if isinstance(v, float) else v for k, v in timing[dev].items()},
        }
    out["tpu_over_cpu"] = round(out["tpu"][f"{unit}_per_s"] / out["cpu"][f"{unit}_per_s"], 3)
    return out


def bench_forward(kind: str, warmup: int, batches: int, target_s: float) -> dict[str, Any]:
    ids, mask = t.inputs()
    models = {"cpu": make(kind, "cpu", False), "tpu": make(kind, DEVICE, False)}
    args = {
        "cpu": (ids, mask),
        "tpu": (ids.to(DEVICE), mask.to(DEVICE)),
    }

    def fn(dev: str) -> Callable[[], torch.Tensor]:
        model, (i, m) = models[dev], args[dev]

        def call() -> torch.Tensor:
            with torch.no_grad():
                return model(input_ids=i, attention_mask=m).logits

        return call

    fns = {dev: fn(dev) for dev in models}
    expected = fns["cpu"]()
    got = fns["tpu"]().cpu()
    max_abs_diff = (got - expected).abs().max().item()
    for _ in range(warmup - 1):
        fns["tpu"]()
        fns["cpu"]()
    sync()
    result = throughput(interleaved(fns, batches, target_s), ids.numel(), "tokens")
    result["max_abs_logit_diff_tpu_vs_cpu"] = max_abs_diff
    return result


def bench_train(kind: str, warmup: int, batches: int, target_s: float) -> dict[str, Any]:
    ids, mask = t.inputs()
    labels = ids if kind != "bert" else torch.tensor([0, 2])

    def trainer(dev: str) -> Callable[[], torch.Tensor]:
        model = make(kind, dev, True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        i, m, y = (v.to(dev) for v in (ids, mask, labels))

        def step() -> torch.Tensor:
            opt.zero_grad()
            loss = model(input_ids=i, attention_mask=m, labels=y).loss
            loss.backward()
            opt.step()
            return loss

        return step

    fns = {"cpu": trainer("cpu"), "tpu": trainer(DEVICE)}
    losses: dict[str, list[float]] = {
        dev: [fn().item() for _ in range(warmup)] for dev, fn in fns.items()
    }
    rel = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses["tpu"], losses["cpu"]))
    result = throughput(interleaved(fns, batches, target_s), 1, "steps", 2)
    result["warmup_max_rel_loss_diff_tpu_vs_cpu"] = rel
    return result


def bench_generate(kind: str, runs: int) -> dict[str, Any]:
    prompt = t.inputs()[0][:1, :8]
    models = {"cpu": make(kind, "cpu", False), "tpu": make(kind, DEVICE, False)}
    prompts = {"cpu": prompt, "tpu": prompt.to(DEVICE)}
    fns = {dev: (lambda d=dev: models[d].generate(prompts[d], **GEN_KWARGS)) for dev in models}
    expected = fns["cpu"]()
    got = fns["tpu"]().cpu()  # the warm-up generates
    sync()
    result = throughput(interleaved(fns, runs, None), NEW_TOKENS, "tokens")
    result["tokens_match_cpu"] = bool(torch.equal(got, expected))
    result["host_syncs_per_generated_token"] = round(
        result["tpu"]["per_call"]["host_syncs"] / NEW_TOKENS, 3
    )
    return result


def bench_model(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    target_s = args.batch_ms / 1e3
    m0 = torch_pjrt.metrics()
    start = time.perf_counter()
    sections: dict[str, Callable[[], dict[str, Any]]] = {
        "forward": lambda: bench_forward(kind, args.warmup, args.batches, target_s),
        "train": lambda: bench_train(kind, args.warmup, args.batches, target_s),
    }
    if kind in GENERATES:
        sections["generate"] = lambda: bench_generate(kind, args.generate_runs)
    out: dict[str, Any] = {
        "model": kind,
        "parameters": sum(p.numel() for p in t.tiny(kind, ATTN).parameters()),
    }
    for name, run in sections.items():
        try:
            out[name] = run()
        except Exception as error:  # noqa: BLE001 -- one failing section must not lose the others
            out[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
    m1 = torch_pjrt.metrics()
    out["fallback_ops"] = {
        op: n - m0["fallback_ops"].get(op, 0)
        for op, n in m1["fallback_ops"].items()
        if n != m0["fallback_ops"].get(op, 0)
    }
    out["compilations_total"] = m1["compilations"] - m0["compilations"]
    # Timed tpu work only (after warm-up): compilations and disk hits must be 0.
    out["compilations_after_warmup"] = sum(
        s["tpu"]["counters_total"][k]
        for s in out.values()
        if isinstance(s, dict) and "tpu" in s
        for k in ("compilations", "cache_hits_disk")
    )
    out["elapsed_s"] = round(time.perf_counter() - start, 1)
    return out


def ratio(section: dict[str, Any] | None) -> str:
    if section is None:
        return "—"
    if "error" in section:
        return "error"
    return f"{fmt(section['tpu_over_cpu'])}x"


def pair(section: dict[str, Any] | None, unit: str) -> str:
    if section is None or "error" in section:
        return "—"
    return f"{fmt(section['cpu'][unit])} / {fmt(section['tpu'][unit])}"


def markdown(record: dict[str, Any]) -> str:
    machine, config = record["machine"], record["config"]
    header = (
        f"# Tiny Hugging Face models, {record['date']}\n\n"
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['os']}; plugin {machine['plugin']} (PJRT C API "
        f"{machine['pjrt_api_version']}); torch {record['torch']['version']} with "
        f"{record['torch']['threads']} threads; transformers {record['transformers']}; eager "
        f"mode {record['eager']}. Models of tests/test_transformers.py ({ATTN} attention), "
        f"float32. Forward: ids [2, 16] with mask, no_grad. Training: forward with labels, "
        f"backward, AdamW(lr=1e-3), dropout off. Generation: greedy, 8-token prompt, "
        f"{NEW_TOKENS} new tokens. {config['warmup']} warm-up calls, then the median of "
        f"{config['batches']} interleaved batches of ~{config['target_batch_ms']:.0f} ms (a tpu "
        f"batch ends with torch.tpu.synchronize()); generation: median of "
        f"{config['generate_runs']} interleaved generates after one warm-up. Ratios are tpu "
        f"throughput over CPU throughput: below 1x the tpu device is slower.\n\n"
    )
    table = [
        (
            "| Model | Forward tokens/s tpu/CPU | Train steps/s tpu/CPU | Generate tokens/s tpu/CPU "
            "| Forward tokens/s CPU / tpu | Train steps/s CPU / tpu "
            "| Generate tokens/s CPU / tpu |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in record["models"]:
        f, tr, g = r.get("forward"), r.get("train"), r.get("generate")
        table.append(
            f"| {r['model']} | {ratio(f)} | {ratio(tr)} | {ratio(g)} "
            f"| {pair(f, 'tokens_per_s')} | {pair(tr, 'steps_per_s')} "
            f"| {pair(g, 'tokens_per_s')} |"
        )

    checks = [
        "\n## Checks\n",
        (
            "| Model | Compilations after warm-up | Fallback ops | Host syncs/generated token "
            "| Host syncs per forward / train step | Programs run per forward / train step "
            "/ generate | Compilations in all | Generate matches CPU | Max abs logit diff "
            "| Other processes' load, cores (max) |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in record["models"]:
        secs = {k: r.get(k) for k in ("forward", "train", "generate")}
        ok = {k: v for k, v in secs.items() if v is not None and "error" not in v}

        def per(k: str, key: str, ok: dict[str, Any] = ok) -> str:
            return fmt(ok[k]["tpu"]["per_call"][key]) if k in ok else "—"

        g = ok.get("generate")
        load = max(
            (s[d]["other_processes_cores"] for s in ok.values() for d in ("cpu", "tpu")),
            default=None,
        )
        checks.append(
            f"| {r['model']} | {r['compilations_after_warmup']} | {r['fallback_ops'] or '{}'} "
            f"| {fmt(g['host_syncs_per_generated_token']) if g else '—'} "
            f"| {per('forward', 'host_syncs')} / {per('train', 'host_syncs')} "
            f"| {per('forward', 'executions')} / {per('train', 'executions')} / "
            f"{per('generate', 'executions')} | {r['compilations_total']} "
            f"| {g['tokens_match_cpu'] if g else '—'} "
            f"| {ok['forward']['max_abs_logit_diff_tpu_vs_cpu']:.2g} "
            f"| {fmt(load)} |"
            if "forward" in ok
            else f"| {r['model']} | {r['compilations_after_warmup']} | {r['fallback_ops']} "
            f"| — | — | — | {r['compilations_total']} | — | — | — |"
        )
    errors = [
        f"- {r['model']} {k}: {r[k]['error']}"
        for r in record["models"]
        for k in ("forward", "train", "generate")
        if isinstance(r.get(k), dict) and "error" in r[k]
    ]
    if errors:
        checks.append("\nErrors:\n\n" + "\n".join(errors))
    state = "OK" if record["checks"]["ok"] else "FAILED"
    checks.append(
        f"\nCheck (no compilation, no fallback after warm-up, no error): {state}. "
        f"Other processes' load before the run: {record['other_processes_cores_before']} cores.\n"
    )
    return header + "\n".join(table) + "\n" + "\n".join(checks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls, the first included")
    parser.add_argument("--batches", type=int, default=9, help="timed batches per device")
    parser.add_argument("--batch-ms", type=float, default=150, help="target time of one batch")
    parser.add_argument("--generate-runs", type=int, default=5, help="timed generates per device")
    parser.add_argument("--models", default=",".join(KINDS), help="comma-separated subset")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=60,
        help="seconds to wait at the start for other processes to go quiet",
    )
    args = parser.parse_args()

    started = time.perf_counter()
    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    tag = machine_tag(machine, plugin["platform_name"])
    date = datetime.date.today().isoformat()
    load_before = wait_for_quiet(args.quiet_wait)
    if load_before >= 0.25:
        print(f"other processes still use {load_before} cores; running anyway", flush=True)

    models: list[dict[str, Any]] = []
    for i, kind in enumerate(args.models.split(",")):
        # A shorter wait between models: the start's wait found the machine quiet or gave up.
        load = load_before if i == 0 else wait_for_quiet(min(args.quiet_wait, 10))
        r = bench_model(kind, args)
        r["other_processes_cores_before"] = load
        models.append(r)
        parts = [
            f"{name} {ratio(r.get(name))}" for name in ("forward", "train", "generate") if name in r
        ]
        syncs = r.get("generate", {}).get("host_syncs_per_generated_token")
        print(
            f"{kind:>6}: tpu/CPU {', '.join(parts)}; after warm-up "
            f"{r['compilations_after_warmup']} compilations, fallbacks {r['fallback_ops']}"
            + (f"; {syncs} host syncs/generated token" if syncs is not None else "")
            + f" ({r['elapsed_s']} s)",
            flush=True,
        )

    errors = {
        r["model"]: [k for k in ("forward", "train", "generate") if "error" in r.get(k, {})]
        for r in models
    }
    checks: dict[str, Any] = {
        "compilations_after_warmup": {r["model"]: r["compilations_after_warmup"] for r in models},
        "fallback_ops": {r["model"]: r["fallback_ops"] for r in models},
        "errors": {k: v for k, v in errors.items() if v},
    }
    checks["ok"] = not (
        any(checks["compilations_after_warmup"].values())
        or any(checks["fallback_ops"].values())
        or checks["errors"]
    )
    record = {
        "schema": SCHEMA,
        "date": date,
        "machine": machine,
        "plugin": plugin,
        "torch": {"version": torch.__version__, "threads": torch.get_num_threads()},
        "transformers": transformers.__version__,
        "eager": torch_pjrt.settings().eager,
        "config": {
            "attention": ATTN,
            "dtype": "float32",
            "optimizer": "AdamW(lr=1e-3)",
            "generate": {"prompt_tokens": 8, **GEN_KWARGS},
            "warmup": args.warmup,
            "batches": args.batches,
            "target_batch_ms": args.batch_ms,
            "generate_runs": args.generate_runs,
            "quiet_wait_s": args.quiet_wait,
        },
        "other_processes_cores_before": load_before,
        "models": models,
        "checks": checks,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }

    table = markdown(record)
    print("\n" + table)
    write_results(record, table, args.out_dir, f"hf_models-{date}-{tag}")
    if not checks["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
