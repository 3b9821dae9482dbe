"""A Hugging Face model as a workload: `--hf PATH --task TASK`.

PATH is a local model directory (config.json, and weights if it has them) or
a config.json file; without weights the model is built from the config with
the tool's seed, so every device starts from the same numbers. Inputs are
token ids drawn with a fixed seed from the model's vocabulary, shaped by the
size (batch x sequence length). Nothing is fetched from a hub.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

from .protocol import Size, Target, Workload

TASKS = {
    "text-generation": "greedy generation of 8 new tokens (AutoModelForCausalLM)",
    "causal-lm-train": "language-model training steps, AdamW (AutoModelForCausalLM)",
    "fill-mask": "masked-LM logits (AutoModelForMaskedLM)",
    "text-classification": "sequence-classification logits (AutoModelForSequenceClassification)",
    "feature-extraction": "last hidden states (AutoModel)",
}
NEW_TOKENS = 8
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")


def _auto_class(task: str):
    import transformers

    return {
        "text-generation": transformers.AutoModelForCausalLM,
        "causal-lm-train": transformers.AutoModelForCausalLM,
        "fill-mask": transformers.AutoModelForMaskedLM,
        "text-classification": transformers.AutoModelForSequenceClassification,
        "feature-extraction": transformers.AutoModel,
    }[task]


def _load(path: Path, task: str) -> torch.nn.Module:
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    directory = path.parent if path.is_file() else path
    cls = _auto_class(task)
    if path.is_dir() and any((path / f).exists() for f in _WEIGHT_FILES):
        return cls.from_pretrained(str(path))
    config = transformers.AutoConfig.from_pretrained(str(path if path.is_file() else directory))
    return cls.from_config(config)  # seeded by the tool before build


def hf_workload(path: str, task: str) -> Workload:
    if task not in TASKS:
        raise ValueError(f"--task must be one of {', '.join(TASKS)}; got {task!r}")
    model_path = Path(path)
    if not model_path.exists():
        raise FileNotFoundError(f"--hf {path!r}: no such directory or config file")
    import transformers

    config = transformers.AutoConfig.from_pretrained(
        str(model_path if model_path.is_file() else model_path))
    vocab = int(getattr(config, "vocab_size", 0) or 0)
    if vocab <= 0:
        raise ValueError(f"--hf {path!r}: the config has no vocab_size; only text models are supported")
    kind = "train" if task == "causal-lm-train" else "infer"

    def build(target: Target) -> Callable:
        model = _load(model_path, task).to(target.device)
        if kind == "train":
            model.train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

            def train_step(ids):
                opt.zero_grad(set_to_none=True)
                loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                return loss.detach()
            return target.compile(train_step)
        model.eval()
        if task == "text-generation":
            from .examples import greedy_generation

            return greedy_generation(model, target, NEW_TOKENS, static_cache=False, fullgraph=False)
        forward = target.compile(model)

        def infer(ids):
            with torch.no_grad():
                out = forward(input_ids=ids)
            return out.logits if hasattr(out, "logits") else out.last_hidden_state
        return infer

    def data(size: Size) -> list:
        g = torch.Generator().manual_seed(4)
        low = 3 if vocab > 8 else 0  # keep clear of the usual special ids
        steps = 10 if kind == "train" else 3
        return [(torch.randint(low, vocab, (size.batch, size.length), generator=g),)
                for _ in range(steps)]

    generation = task == "text-generation"
    return Workload(
        name=f"{model_path.name or path} {task}",
        description=f"{config.model_type} from {model_path.name}: {TASKS[task]}",
        kind=kind, build=build, data=data, sizes=[Size(2, 32)],
        rtol=1e-4, atol=1e-4 if kind == "train" else 1e-3,
        metric=None if not generation else (lambda results: float(torch.cat(results).float().mean())),
        metric_name="" if not generation else "mean generated token id",
        metric_tolerance=0.0 if generation else 1e-3,
        sample_ok=(lambda got, exp: [bool(torch.equal(a, b)) for a, b in zip(got, exp)]
                   if got.shape == exp.shape else [False] * exp.shape[0]) if generation else None,
        tokens_per_step=(lambda size: size.batch * NEW_TOKENS) if generation else None,
        source=f"--hf {path} --task {task}")
