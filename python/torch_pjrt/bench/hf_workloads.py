"""The harness's workloads from the Hugging Face libraries beyond
Transformers, as their users time them:

  diffusion_denoise  one denoising step of a tiny Diffusers UNet2D with a DDIM
                     scheduler (UNet forward, then scheduler.step): steps/s
  lora_train         one training step of PEFT LoRA adapters (q and v
                     projections) on the tiny Llama, AdamW with a float lr

Both need their library (requirements/hf-ecosystem.txt); a mode where it is
missing is an error cell that says so. The models are built from configs,
seeded, so every mode starts from the same weights."""

from __future__ import annotations

from typing import Optional

import torch

from .core import Case, Mode, Workload
from .workloads import _compile, _lm_loss, _sync, _tiny_llama, _tokens, _train_case

_NO_JAX_FORM = "the harness has no JAX form of this workload"


def _unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    return UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                       block_out_channels=(32, 64), norm_num_groups=8,
                       down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D")).eval()


def _diffusion_denoise(mode: Mode, batch: int, steps: int) -> Case:
    """Each call runs the next step of a `steps`-step DDIM schedule (eta 0,
    deterministic) and returns the new latents; after the last step the
    schedule starts again from the same noise, so every mode walks the
    same sequence."""
    from diffusers import DDIMScheduler

    dev = mode.device
    unet = _unet().to(dev)
    scheduler = DDIMScheduler(num_train_timesteps=1000)
    scheduler.set_timesteps(steps)
    noise = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    forward = _compile(unet, mode)
    state: dict[str, Optional[torch.Tensor] | int] = {"latents": None, "i": 0}

    def step():
        i = state["i"] % steps
        latents = noise if i == 0 else state["latents"]
        t = scheduler.timesteps[i]
        with torch.no_grad():
            eps = forward(latents, t.to(dev)).sample
            latents = scheduler.step(eps, t, latents).prev_sample
        state["latents"], state["i"] = latents, state["i"] + 1
        return latents

    return Case(step=step, sync=_sync(mode))


def _lora_llama() -> torch.nn.Module:
    import peft

    config = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                             task_type="CAUSAL_LM")
    return peft.get_peft_model(_tiny_llama(), config)


def workloads(quick: bool = False) -> dict[str, Workload]:
    batch = 2 if quick else 4
    seq = 64
    no_jax = {"jax_jit": _NO_JAX_FORM, "jax_jit_cpu": _NO_JAX_FORM}
    return {w.name: w for w in [
        Workload("diffusion_denoise", f"Diffusers UNet2D 32x32, batch {batch}, one DDIM denoising step",
                 lambda m: _diffusion_denoise(m, batch, steps=10), check_steps=3, rtol=1e-4, atol=1e-4,
                 unsupported=no_jax),
        Workload("lora_train", f"PEFT LoRA (q, v; r=8) on the tiny Llama, batch 8x{seq}, AdamW step",
                 lambda m: _train_case(_lora_llama, _tokens(8, seq), _lm_loss, m, lr=3e-3),
                 check_steps=3, rtol=1e-4, atol=1e-4, unsupported=no_jax),
    ]}
