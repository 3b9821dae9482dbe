"""Diffusers denoising steps/s and PEFT LoRA training steps/s on tpu, strict
eager and compiled (`torch.compile(backend="tpu")`), against CPU PyTorch
eager (and inductor on CPU) in the same run, through the benchmark harness.

    python benchmarks/hf_ecosystem.py [--quick] [--rounds N]

Workloads (torch_pjrt/bench/hf_workloads.py): one DDIM denoising step of a
tiny UNet2D (UNet forward and scheduler.step), and one LoRA training step on
the tiny Llama. Each cell runs in its own process with a cold compile cache:
its first step includes all compilation. Results:
benchmarks/results/hf-ecosystem-<date>-<machine>.{json,md}.
"""

from __future__ import annotations

from torch_pjrt.bench.runner import main

if __name__ == "__main__":
    raise SystemExit(main(
        default_title="Hugging Face beyond Transformers: Diffusers denoising and PEFT LoRA training",
        default_stem="hf-ecosystem",
        default_models=["diffusion_denoise", "lora_train"],
        default_modes=["cpu_eager", "cpu_inductor", "tpu_strict", "tpu_compiled"]))
