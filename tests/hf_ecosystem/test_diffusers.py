"""Diffusers on the tpu device, unchanged: tiny pipelines built from configs
(unconditional UNet2D with DDPM and DDIM, text-conditioned Stable Diffusion
with a UNet2DConditionModel, class-conditional DiT) generate the CPU's
images; a noise-prediction training step matches the CPU's; the pipeline
with its UNet compiled compiles during the first denoising step only. No
CPU fallback anywhere.

Noise comes from a CPU torch.Generator, as Diffusers recommends for
reproducible pipelines, so both devices denoise the same latents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_pjrt

diffusers = pytest.importorskip("diffusers")

from tiny_models import clip_text_encoder, clip_tokenizer, dit, unet2d, unet2d_condition, vae  # noqa: E402

DEV = torch_pjrt.settings().device_name
# float32 through a dozen denoising steps: the programs XLA fuses sum in
# another order than the CPU kernels.
IMAGE_TOL = dict(rtol=0, atol=2e-4)


def _generate(pipe, device: str, **kwargs) -> np.ndarray:
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe(generator=torch.Generator().manual_seed(0), output_type="np", **kwargs).images


def _no_fallback():
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("scheduler", ["ddpm", "ddim"])
def test_unet2d_pipeline_matches_cpu(scheduler):
    if scheduler == "ddpm":
        pipe = diffusers.DDPMPipeline(unet=unet2d(), scheduler=diffusers.DDPMScheduler(num_train_timesteps=10))
        kwargs = dict(num_inference_steps=10)
    else:
        pipe = diffusers.DDIMPipeline(unet=unet2d(), scheduler=diffusers.DDIMScheduler(num_train_timesteps=100))
        kwargs = dict(num_inference_steps=8, eta=1.0)  # eta: DDIM draws noise at each step too
    expected = _generate(pipe, "cpu", batch_size=2, **kwargs)
    torch_pjrt.reset_metrics()
    got = _generate(pipe, DEV, batch_size=2, **kwargs)
    assert got.shape == (2, 16, 16, 3)
    np.testing.assert_allclose(got, expected, **IMAGE_TOL)
    _no_fallback()


def test_pipeline_with_a_device_generator_is_reproducible():
    """A torch.Generator on tpu draws the pipeline's noise on the device: its
    stream is the device's own (not the CPU's), so the check is that the
    same seed gives the same images and another seed other images."""
    pipe = diffusers.DDPMPipeline(unet=unet2d(), scheduler=diffusers.DDPMScheduler(num_train_timesteps=10))
    pipe.to(DEV)
    pipe.set_progress_bar_config(disable=True)

    def generate(seed: int) -> np.ndarray:
        generator = torch.Generator(device=DEV).manual_seed(seed)
        return pipe(generator=generator, batch_size=2, num_inference_steps=10, output_type="np").images

    torch_pjrt.reset_metrics()
    first, again, other = generate(0), generate(0), generate(1)
    np.testing.assert_array_equal(first, again)
    assert np.abs(first - other).max() > 0.1
    assert np.isfinite(first).all() and 0.0 <= first.min() and first.max() <= 1.0
    _no_fallback()


def _stable_diffusion(tmp_path):
    tokenizer = clip_tokenizer(tmp_path / "tokenizer")
    return diffusers.StableDiffusionPipeline(
        unet=unet2d_condition(), vae=vae(), text_encoder=clip_text_encoder(len(tokenizer)),
        tokenizer=tokenizer, scheduler=diffusers.DDIMScheduler(num_train_timesteps=100),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def test_text_conditioned_stable_diffusion_matches_cpu(tmp_path):
    pipe = _stable_diffusion(tmp_path)
    kwargs = dict(prompt=["the cat", "a hat on the mat"], negative_prompt=["", "cat"],
                  num_inference_steps=6, guidance_scale=5.0, height=16, width=16)
    expected = _generate(pipe, "cpu", **kwargs)
    torch_pjrt.reset_metrics()
    got = _generate(pipe, DEV, **kwargs)
    assert got.shape == (2, 16, 16, 3)
    np.testing.assert_allclose(got, expected, **IMAGE_TOL)
    _no_fallback()


def test_class_conditioned_dit_matches_cpu():
    pipe = diffusers.DiTPipeline(transformer=dit(), vae=vae(),
                                 scheduler=diffusers.DDIMScheduler(num_train_timesteps=100))
    kwargs = dict(class_labels=[1, 7], num_inference_steps=6, guidance_scale=4.0)
    expected = _generate(pipe, "cpu", **kwargs)
    torch_pjrt.reset_metrics()
    got = _generate(pipe, DEV, **kwargs)
    assert got.shape == (2, 16, 16, 3)
    np.testing.assert_allclose(got, expected, **IMAGE_TOL)
    _no_fallback()


def _train(device: str, steps: int = 3) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Noise-prediction training of the UNet2D: DDPM's add_noise at random
    timesteps, MSE against the noise, AdamW with a float lr."""
    model = unet2d().train().to(device)
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        clean = torch.randn(4, 3, 16, 16, generator=g)
        noise = torch.randn(clean.shape, generator=g)
        t = torch.randint(0, 100, (4,), generator=g)
        noisy = scheduler.add_noise(clean, noise, t)
        pred = model(noisy.to(device), t.to(device)).sample
        loss = torch.nn.functional.mse_loss(pred, noise.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def test_unet2d_training_steps_match_cpu():
    expected_losses, expected_state = _train("cpu")
    torch_pjrt.reset_metrics()
    losses, state = _train(DEV)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected_losses), rtol=1e-4, atol=1e-5)
    # Parameters after 3 AdamW steps of lr 1e-3 (each moves up to 3e-3):
    # Adam divides by the gradient's running RMS, so where a gradient is
    # near zero a rounding difference becomes a step of up to lr.
    for name, value in expected_state.items():
        torch.testing.assert_close(state[name], value, rtol=1e-3, atol=5e-4, msg=lambda m: f"{name}: {m}")
    _no_fallback()


def test_compiled_unet_pipeline_compiles_in_the_first_step_only():
    torch._dynamo.reset()
    torch_pjrt.reset_compile_report()  # graphs compiled by earlier tests
    pipe = diffusers.DDPMPipeline(unet=unet2d(), scheduler=diffusers.DDPMScheduler(num_train_timesteps=8))
    expected = _generate(pipe, "cpu", batch_size=2, num_inference_steps=8)
    pipe.to(DEV)
    pipe.unet = torch.compile(pipe.unet, backend="tpu")
    compilations_per_step = []
    step = pipe.scheduler.step

    def counting_step(*args, **kwargs):  # after each denoising step's UNet call
        compilations_per_step.append(torch_pjrt.metrics()["compilations"])
        return step(*args, **kwargs)

    pipe.scheduler.step = counting_step
    torch_pjrt.reset_metrics()
    got = _generate(pipe, DEV, batch_size=2, num_inference_steps=8)
    np.testing.assert_allclose(got, expected, **IMAGE_TOL)
    assert len(compilations_per_step) == 8
    # The UNet's program compiles in step 1 (when the scheduler reads its
    # output: compiled graphs run with the device's pending graph), the
    # scheduler's eager ops in steps 1 and 2 (the first step skips the
    # variance noise); from then on every step only runs cached programs.
    assert compilations_per_step[1] >= 1
    assert compilations_per_step[2:] == [compilations_per_step[2]] * 6, compilations_per_step
    report = [r for r in torch_pjrt.compile_report() if r["kind"] == "inference"]
    assert len(report) == 1 and report[0]["regions"] == 1, report  # one program per UNet call
    _no_fallback()
    # A second generation reuses everything.
    torch_pjrt.reset_metrics()
    compilations_per_step.clear()
    _generate(pipe, DEV, batch_size=2, num_inference_steps=8)
    assert torch_pjrt.metrics()["compilations"] == 0
