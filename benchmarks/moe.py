"""Mixture-of-experts decode and the attention kernel on the tpu device.

    python benchmarks/moe.py [--quick]

Decode: tiny Qwen3-MoE (Qwen3-30B-A3B's routing: 128 experts, top 8) and
Mixtral (8 experts, top 2) models of hidden size 128 (random weights from
configs) decode greedily, one token per step after an 8-token prompt, at
batch 1, 8 and 64, with three experts implementations: Transformers' `eager` loop over
experts, its `grouped_mm` path, and torch_pjrt's one-kernel `torch_pjrt`.
Each runs in strict eager, and compiled (torch.compile(backend="tpu") of
the decode step over a static cache). Reported: decode tokens/s (batch x
steps / seconds), ratios against the eager loop and against grouped_mm in
the same mode. All paths decode the same tokens (checked).

Attention: F.scaled_dot_product_attention (causal, batch 1, 4 heads of 64)
through PyTorch's decomposition against torch_pjrt's flash kernel, at 1k
and 4k keys and some shorter ones, forward, strict eager.

Every figure is a median over rounds in one process: interleaved across the
implementations in strict eager; in compiled mode each implementation is
compiled and timed alone (see bench_decode). Results go
to benchmarks/results/moe-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

_CACHE_DIR = tempfile.TemporaryDirectory(prefix="torch_pjrt_moe_bench_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE_DIR.name
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch.nn.functional as F
import torch_pjrt
import transformers
from transformers import StaticCache

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime import DEFAULT_OUT, fmt, machine_facts, machine_tag
from _common import plugin_facts, write_results

SCHEMA = "torch-pjrt/moe-bench/1"
DEV = torch_pjrt.settings().device_name
PROMPT = 8
IMPLS = ["eager", "grouped_mm", "torch_pjrt"]


def configs() -> dict[str, Any]:
    common = dict(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0,
                  bos_token_id=1, eos_token_id=2)
    return {
        # Qwen3-30B-A3B's routing (128 experts, top 8) at a tiny width.
        "qwen3_moe": transformers.Qwen3MoeConfig(**common, head_dim=32, intermediate_size=256,
                                                 moe_intermediate_size=64, num_experts=128,
                                                 num_experts_per_tok=8),
        "mixtral": transformers.MixtralConfig(**common, intermediate_size=64,
                                              num_local_experts=8, num_experts_per_tok=2),
    }


def build(cfg, impl: str, state: dict) -> torch.nn.Module:
    model = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(cfg), dtype=torch.float32, experts_implementation=impl)
    model.load_state_dict(state)
    return model.to(DEV).eval()


def decoder(model, cfg, batch: int, steps: int, compiled: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """A greedy decode of `steps` tokens over a static cache: returns the
    tokens (on the device; the caller syncs)."""
    # Static shapes: each batch size is its own program, as a server would
    # bucket it (Dynamo's automatic dynamic shapes would otherwise mark the
    # batch symbolic after the second size).
    forward = torch.compile(model.forward, backend="tpu", dynamic=False) if compiled \
        else model.forward

    def run(prompt: torch.Tensor) -> torch.Tensor:
        cache = StaticCache(config=model.config, max_cache_len=PROMPT + steps)
        with torch.no_grad():
            pos = torch.arange(PROMPT, device=DEV)
            logits = model(prompt, past_key_values=cache, cache_position=pos).logits
            tok = logits[:, -1:].argmax(-1)
            out = [tok]
            for i in range(steps - 1):
                pos = torch.tensor([PROMPT + i], device=DEV)
                logits = forward(tok, past_key_values=cache, cache_position=pos).logits
                tok = logits[:, -1:].argmax(-1)
                out.append(tok)
        return torch.cat(out, 1)
    return run


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    if isinstance(out, torch.Tensor):
        out = out.cpu()
    return time.perf_counter() - start, out


def bench_decode(batches: list[int], steps: int, rounds: int, modes: list[str]) -> list[dict]:
    rows = []
    for family, cfg in configs().items():
        torch.manual_seed(0)
        state = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg)).state_dict()
        for batch in batches:
            prompt = torch.randint(3, cfg.vocab_size, (batch, PROMPT),
                                   generator=torch.Generator().manual_seed(batch)).to(DEV)
            for mode in modes:
                compiled = mode == "compiled"
                samples: dict[str, list[float]] = {impl: [] for impl in IMPLS}
                tokens = {}

                def sample(impl, run):
                    seconds, tokens[impl] = timed(lambda: run(prompt))
                    samples[impl].append(seconds)

                runs = {}
                for impl in IMPLS:
                    if compiled:
                        # Compiled: each implementation compiled and timed
                        # alone. The models share their classes' code, and
                        # Dynamo marks code it gives up on (the eager loop's
                        # host reads inside the layer loop) as skipped for
                        # every model: compiled after the eager loop, the
                        # kernel's decode ran 13 programs per token, not 1.
                        torch._dynamo.reset()
                    run = decoder(build(cfg, impl, state), cfg, batch, steps, compiled)
                    timed(lambda: run(prompt))  # warm-up: every program compiled
                    if compiled:
                        for _ in range(rounds):
                            sample(impl, run)
                    else:
                        runs[impl] = run
                for _ in range(rounds if runs else 0):  # strict: interleaved rounds
                    for impl, run in runs.items():
                        sample(impl, run)
                same = all(torch.equal(tokens[i], tokens["eager"]) for i in IMPLS)
                tps = {impl: batch * steps / statistics.median(s) for impl, s in samples.items()}
                row = {"family": family, "batch": batch, "mode": mode, "steps": steps,
                       "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
                       "kernel_vs_eager_loop": round(tps["torch_pjrt"] / tps["eager"], 2),
                       "kernel_vs_grouped_mm": round(tps["torch_pjrt"] / tps["grouped_mm"], 2),
                       "same_tokens": same}
                print(row, flush=True)
                rows.append(row)
    return rows


def bench_attention(lengths: list[int], rounds: int) -> list[dict]:
    from torch_pjrt.kernels import sdpa
    from torch_pjrt.kernels.flash_attention import flash_attention

    rows = []
    for n in lengths:
        q, k, v = [torch.randn(1, 4, n, 64).to(DEV) for _ in range(3)]
        sdpa.set_mode("never")
        ways = {"decomposed": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                "flash": lambda: flash_attention(q, k, v, is_causal=True)}
        samples: dict[str, list[float]] = {w: [] for w in ways}
        outs = {w: timed(fn)[1] for w, fn in ways.items()}  # warm-up
        for _ in range(rounds):
            for w, fn in ways.items():
                samples[w].append(timed(fn)[0])
        sdpa.set_mode("auto")
        ms = {w: statistics.median(s) * 1e3 for w, s in samples.items()}
        row = {"keys": n, "ms": {w: round(v, 3) for w, v in ms.items()},
               "flash_speedup": round(ms["decomposed"] / ms["flash"], 2),
               "max_abs_diff": float((outs["flash"] - outs["decomposed"]).abs().max())}
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    args = parser.parse_args()
    steps, rounds = (8, 2) if args.quick else (16, 3)
    decode = bench_decode([1, 8, 64], steps, rounds, ["strict", "compiled"])
    attention = bench_attention([256, 512, 1024, 4096], rounds)

    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    date = datetime.date.today().isoformat()
    record = {"schema": SCHEMA, "date": date, "machine": machine, "plugin": plugin,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "config": {"prompt": PROMPT, "steps": steps, "rounds": rounds},
              "decode": decode, "attention": attention}
    lines = [f"# Mixture-of-experts decode and attention, {date}\n",
             f"{machine['cpu_model']}, {machine['cores']} cores; plugin {machine['plugin']}; torch "
             f"{torch.__version__}; transformers {transformers.__version__}. Greedy decode of "
             f"{steps} tokens after an {PROMPT}-token prompt over a static cache; medians over "
             f"{rounds} rounds (strict: interleaved; compiled: each implementation compiled "
             "and timed alone, since Dynamo's skip marks on shared model code cross models).\n",
             "| model | batch | mode | eager loop tok/s | grouped_mm tok/s | torch_pjrt tok/s "
             "| kernel / eager loop | kernel / grouped_mm | same tokens |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in decode:
        t = r["tokens_per_s"]
        lines.append(f"| {r['family']} | {r['batch']} | {r['mode']} | {fmt(t['eager'])} | "
                     f"{fmt(t['grouped_mm'])} | {fmt(t['torch_pjrt'])} | "
                     f"{fmt(r['kernel_vs_eager_loop'])}x | {fmt(r['kernel_vs_grouped_mm'])}x | "
                     f"{'yes' if r['same_tokens'] else 'NO'} |")
    lines += ["", "Causal attention, batch 1, 4 heads of 64, forward, strict eager:", "",
              "| keys | decomposed SDPA ms | flash kernel ms | flash speedup |",
              "| ---: | ---: | ---: | ---: |"]
    for r in attention:
        lines.append(f"| {r['keys']} | {fmt(r['ms']['decomposed'])} | {fmt(r['ms']['flash'])} | "
                     f"{fmt(r['flash_speedup'])}x |")
    table = "\n".join(lines) + "\n"
    print(table)
    write_results(record, table, args.out_dir,
                  f"moe-{date}-{machine_tag(machine, plugin['platform_name'])}")


if __name__ == "__main__":
    main()
