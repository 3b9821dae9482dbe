"""torch.compile(backend="tpu") against strict eager, CPU PyTorch eager and
inductor on CPU, all in one run, through the benchmark harness.

    python benchmarks/compile.py [--quick] [--rounds N]

Workloads: the MLP, CNN and tiny-Llama training steps, tiny-Llama greedy
decode (static cache; transformers compiles the decode step with the mode's
backend), and a matmul alone, which shows how XLA's CPU code compares with
CPU PyTorch's on the operation that dominates the models. The same-compiler
baseline is JAX (`jax_jit` on the plugin torch-pjrt uses, `jax_jit_cpu` on
jaxlib's own CPU client), written in plain jnp with the same weights
(torch_pjrt/bench/jax_forms.py), where the harness has a JAX form. Each cell runs in
its own process with a cold compile cache: its first step includes all
compilation. Results: benchmarks/results/compile-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

from torch_pjrt.bench.runner import main

if __name__ == "__main__":
    raise SystemExit(main(
        default_title='torch.compile(backend="tpu") vs strict eager, CPU eager and inductor',
        default_stem="compile",
        default_models=["mlp_train", "cnn_train", "llama_fwd", "llama_train", "llama_decode",
                        "matmul"],
        default_modes=["cpu_eager", "cpu_inductor", "tpu_strict", "tpu_compiled", "jax_jit",
                       "jax_jit_cpu"]))
