"""Serving the tiny Llama with Transformers on the tpu device against the CPU.

    python benchmarks/hf_serving.py [--quick]

Two measurements, each on the CPU and on the device in the same run:

- Continuous batching in-process: `model.generate_batch` (paged KV cache,
  greedy) over 32 prompts of 3 to 39 tokens, 32 new tokens each, on CPU
  eager, on the device in strict eager (with torch_pjrt._serving, which
  prepares batches on the host and pads them) and on the device compiled
  (transformers' `varlen_compile_config` with torch.compile(backend="tpu")).
  Each mode runs once to warm up (other prompts), then rounds are
  interleaved; reported: generated tokens/s (all tokens / wall time), time
  to first token per request (from its submission to its first token,
  transformers' own timestamps), programs compiled after the warm-up, and
  whether the tokens equal the CPU's.
- The server: `transformers serve` (the CLI, a subprocess per device and
  mode) answers 32 concurrent streamed chat/completions requests, 16 new
  tokens each, in its default mode (one `generate` at a time) and with
  `--continuous-batching`. After a warm-up round: wall-clock tokens/s (the
  usage the server reports, summed), time to first token per request (from
  sending the request to the first chunk with text) and the programs the
  device's server built after the warm-up (its TORCH_PJRT_DUMP_DIR). In the
  default mode, `generate` with a dynamic cache, every new prompt length is
  new programs; continuous batching pads its batches to a few sizes. The
  device's server finds the device through torch's backend autoload, with
  TORCH_PJRT_AUTOLOAD=1.

Ratios are device over CPU. Results go to
benchmarks/results/hf_serving-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_CACHE_DIR = tempfile.TemporaryDirectory(prefix="torch_pjrt_serving_bench_")
os.environ["TORCH_PJRT_CACHE_DIR"] = _CACHE_DIR.name
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import torch_pjrt
import transformers

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "hf_ecosystem"))
from runtime import DEFAULT_OUT, fmt, machine_facts, machine_tag  # noqa: E402
from _common import plugin_facts, wait_for_quiet, write_results  # noqa: E402
from tiny_models import llama  # noqa: E402
from tiny_tokenizers import chat_tokenizer  # noqa: E402

SCHEMA = "torch-pjrt/hf-serving-bench/1"
DEV = torch_pjrt.settings().device_name
REQUESTS = 32
CB = dict(page_size=32, num_blocks=96, max_batch_tokens=256)
CB_FLAGS = ["--cb-block-size", "32", "--cb-num-blocks", "96", "--cb-max-batch-tokens", "256"]
WORDS = "tell me about the tiny device that serves tokens in batches quickly please".split()


def _quantiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"median": round(statistics.median(values), 4),
            "p90": round(values[min(len(values) - 1, int(0.9 * len(values)))], 4)}


# --- generate_batch ---------------------------------------------------------------------------


def _prompts(seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, 40, (REQUESTS,), generator=g).tolist()
    return [torch.randint(3, 1000, (n,), generator=g).tolist() for n in lengths]


def _batch_run(model, prompts: list[list[int]], new_tokens: int, compiled: bool,
               warmup: bool = False) -> dict[str, Any]:
    cb = dict(CB)
    if compiled:
        cb["varlen_compile_config"] = transformers.CompileConfig(backend="tpu", fullgraph=False,
                                                                 dynamic=False)
    config = transformers.GenerationConfig(max_new_tokens=new_tokens, do_sample=False,
                                           eos_token_id=-1, pad_token_id=0)
    start = time.perf_counter()
    # warmup: transformers' own, a forward pass at the largest batch (for CUDA
    # graphs); measured rounds skip it, the warm-up round has compiled everything.
    cb_config = transformers.ContinuousBatchingConfig(**cb)
    results = model.generate_batch(prompts, generation_config=config, record_timestamps=True,
                                   continuous_batching_config=cb_config, warmup=warmup)
    seconds = time.perf_counter() - start
    outs = list(results.values())
    assert len(outs) == len(prompts) and all(o.error is None for o in outs)
    return {"seconds": seconds, "tokens": [list(o.generated_tokens) for o in outs],
            "ttft": [o.timestamps[0] - o.created_time for o in outs]}


def bench_generate_batch(new_tokens: int, rounds: int) -> list[dict]:
    cpu = llama().eval()
    modes = {"cpu_eager": (cpu, False), f"{DEV}_strict": (llama().eval().to(DEV), False),
             f"{DEV}_compiled": (llama().eval().to(DEV), True)}
    warm_prompts, prompts = _prompts(0), _prompts(1)
    samples: dict[str, list[dict]] = {name: [] for name in modes}
    compilations = dict.fromkeys(modes, 0)
    for name, (model, compiled) in modes.items():
        torch._dynamo.reset()
        _batch_run(model, warm_prompts, new_tokens, compiled, warmup=True)  # compiles what it needs
    for _ in range(rounds):
        for name, (model, compiled) in modes.items():
            before = torch_pjrt.metrics()["compilations"]
            samples[name].append(_batch_run(model, prompts, new_tokens, compiled))
            compilations[name] += torch_pjrt.metrics()["compilations"] - before
    reference = samples["cpu_eager"][0]["tokens"]
    rows = []
    for name, runs in samples.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        row = {"mode": name, "tokens_per_s": round(REQUESTS * new_tokens / seconds, 1),
               "ttft_s": _quantiles([t for r in runs for t in r["ttft"]]),
               "compilations_after_warmup": compilations[name],
               "same_tokens_as_cpu": all(r["tokens"] == reference for r in runs)}
        print(row, flush=True)
        rows.append(row)
    return rows


# --- the server -------------------------------------------------------------------------------


def _messages(seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 12, (REQUESTS,), generator=g).tolist()
    return [" ".join(WORDS[j] for j in torch.randint(0, len(WORDS), (n,), generator=g).tolist())
            for n in counts]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]



def _stream(url: str, model_dir: Path, text: str, new_tokens: int) -> tuple[float, int]:
    """One streamed request: (seconds to the first text, tokens generated)."""
    body = {"model": str(model_dir), "messages": [{"role": "user", "content": text}],
            "max_tokens": new_tokens, "temperature": 0, "stream": True}
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    start, first, usage = time.perf_counter(), None, None
    with urllib.request.urlopen(request, timeout=300) as reply:
        for line in reply:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            texts = [c.get("delta", {}).get("content") for c in chunk.get("choices", [])]
            if first is None and any(texts):
                first = time.perf_counter() - start
            usage = chunk.get("usage") or usage
    tokens = usage["completion_tokens"] if usage else 0
    return (first if first is not None else time.perf_counter() - start), tokens


def _serve_round(url: str, model_dir: Path, messages: list[str], new_tokens: int) -> dict:
    start = time.perf_counter()
    with ThreadPoolExecutor(len(messages)) as pool:
        answers = list(pool.map(lambda m: _stream(url, model_dir, m, new_tokens), messages))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": sum(a[1] for a in answers),
            "ttft": [a[0] for a in answers]}


def bench_server(device: str, mode: str, model_dir: Path, work: Path, new_tokens: int,
                 rounds: int) -> dict:
    cli = shutil.which("transformers", path=str(Path(sys.executable).parent))
    port, log = _free_port(), work / f"server-{device}-{mode}.log"
    dump = work / f"programs-{device}-{mode}"  # every program the server builds
    dump.mkdir()
    env = dict(os.environ, TORCH_PJRT_DUMP_DIR=str(dump))
    if device != "cpu":
        env["TORCH_PJRT_AUTOLOAD"] = "1"  # the server process imports torch_pjrt
    flags = ["--continuous-batching", *CB_FLAGS] if mode == "continuous_batching" else []
    url = f"http://localhost:{port}"
    with open(log, "wb") as out:
        command = [cli, "serve", str(model_dir), "--device", device, "--port", str(port), *flags]
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.25)
        _serve_round(url, model_dir, _messages(0), new_tokens)  # warm-up
        warm_programs = len(list(dump.iterdir()))
        runs = [_serve_round(url, model_dir, _messages(1 + i), new_tokens) for i in range(rounds)]
        new_programs = len(list(dump.iterdir())) - warm_programs
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
    tokens_per_s = statistics.median(r["tokens"] / r["seconds"] for r in runs)
    row = {"device": device, "mode": mode, "tokens_per_s": round(tokens_per_s, 1),
           "ttft_s": _quantiles([t for r in runs for t in r["ttft"]]),
           "tokens_per_round": runs[0]["tokens"],
           "programs_built_after_warmup": new_programs if device != "cpu" else None}
    print(row, flush=True)
    return row


def _ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quick", action="store_true", help="fewer tokens and rounds")
    args = parser.parse_args()
    batch_tokens, serve_tokens, rounds = (16, 8, 1) if args.quick else (32, 16, 3)
    other_load = wait_for_quiet(60)  # cores other processes used in the last second

    batch = bench_generate_batch(batch_tokens, rounds)
    with tempfile.TemporaryDirectory(prefix="torch_pjrt_serving_") as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        llama().save_pretrained(model_dir)
        chat_tokenizer().save_pretrained(model_dir)
        server = [bench_server(device, mode, model_dir, work, serve_tokens, rounds)
                  for mode in ("generate", "continuous_batching") for device in ("cpu", DEV)]

    cpu_batch = batch[0]
    for row in batch:
        row["tokens_per_s_vs_cpu"] = _ratio(row["tokens_per_s"], cpu_batch["tokens_per_s"])
        row["ttft_vs_cpu"] = _ratio(row["ttft_s"]["median"], cpu_batch["ttft_s"]["median"])
    for row in server:
        cpu = next(r for r in server if r["device"] == "cpu" and r["mode"] == row["mode"])
        row["tokens_per_s_vs_cpu"] = _ratio(row["tokens_per_s"], cpu["tokens_per_s"])
        row["ttft_vs_cpu"] = _ratio(row["ttft_s"]["median"], cpu["ttft_s"]["median"])

    plugin = plugin_facts()
    machine = machine_facts({"plugin": plugin})
    date = datetime.date.today().isoformat()
    record = {"schema": SCHEMA, "date": date, "machine": machine, "plugin": plugin,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "config": {"requests": REQUESTS, "generate_batch_new_tokens": batch_tokens,
                         "server_new_tokens": serve_tokens, "rounds": rounds, "cb": CB},
              "other_load_cores_at_start": other_load, "generate_batch": batch, "server": server}
    lines = [
        f"# Serving the tiny Llama, {date}\n",
        f"{machine['cpu_model']}, {machine['cores']} cores; plugin {machine['plugin']}; torch "
        f"{torch.__version__}; transformers {transformers.__version__}. {REQUESTS} requests at "
        f"once, greedy; medians over {rounds} round(s) after a warm-up round; ratios are "
        "device over CPU (tokens/s: higher is better; time to first token (TTFT): lower is "
        f"better). Other processes used {other_load} cores when the run started.\n",
        f"`generate_batch`, paged cache ({CB['num_blocks']} blocks of {CB['page_size']} tokens, "
        f"batches of up to {CB['max_batch_tokens']} tokens), prompts of 3-39 tokens, "
        f"{batch_tokens} new tokens each:\n",
        "| mode | tokens/s | vs CPU | TTFT median s | TTFT p90 s | TTFT vs CPU "
        "| compiled after warm-up | CPU's tokens |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in batch:
        lines.append(f"| {r['mode']} | {fmt(r['tokens_per_s'])} | {fmt(r['tokens_per_s_vs_cpu'])}x "
                     f"| {fmt(r['ttft_s']['median'])} | {fmt(r['ttft_s']['p90'])} "
                     f"| {fmt(r['ttft_vs_cpu'])}x | {r['compilations_after_warmup']} "
                     f"| {'yes' if r['same_tokens_as_cpu'] else 'NO'} |")
    lines += ["", f"`transformers serve`, streamed chat/completions, {serve_tokens} new tokens "
              "each (`continuous_batching`: same cache flags):", "",
              "| mode | device | tokens/s | vs CPU | TTFT median s | TTFT p90 s | TTFT vs CPU "
              "| programs built after warm-up |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in server:
        built = r["programs_built_after_warmup"]
        lines.append(f"| {r['mode']} | {r['device']} | {fmt(r['tokens_per_s'])} "
                     f"| {fmt(r['tokens_per_s_vs_cpu'])}x | {fmt(r['ttft_s']['median'])} "
                     f"| {fmt(r['ttft_s']['p90'])} | {fmt(r['ttft_vs_cpu'])}x "
                     f"| {'-' if built is None else built} |")
    table = "\n".join(lines) + "\n"
    print(table)
    write_results(record, table, args.out_dir,
                  f"hf_serving-{date}-{machine_tag(machine, plugin['platform_name'])}")


if __name__ == "__main__":
    main()
