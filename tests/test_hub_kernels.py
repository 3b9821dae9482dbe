"""Hugging Face Kernels choosing torch_pjrt's layers on the tpu device from a
local mapping: kernelize() swaps the RMSNorm forwards Transformers marks
for the hub, and the model still matches CPU, in inference and training."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("jax")
kernels = pytest.importorskip("kernels")
transformers = pytest.importorskip("transformers")

from torch_pjrt.kernels import hub  # noqa: E402
from torch_pjrt.kernels.rms_norm import RMSNorm  # noqa: E402

DEV = "tpu"


def _models():
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    dev = copy.deepcopy(cpu).to(DEV)
    return cpu, dev


def _norms(model):
    return [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]


def test_transformers_sees_kernels_and_marks_rmsnorm():
    assert transformers.utils.is_kernels_available()
    cpu, _ = _models()
    assert all(getattr(type(n), "kernel_layer_name", None) == "RMSNorm" for n in _norms(cpu))


def test_kernelize_picks_torch_pjrt_rmsnorm_for_inference():
    cpu, dev = _models()
    hub.kernelize(dev)
    norms = _norms(dev)
    assert norms and all(n.forward.__func__ is RMSNorm.forward for n in norms)
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(dev(ids.to(DEV)).logits.cpu(), cpu(ids).logits,
                                   rtol=1e-4, atol=1e-5)


def test_kernelize_for_training_keeps_gradients():
    cpu, dev = _models()
    hub.kernelize(dev, mode=kernels.Mode.TRAINING)
    assert all(n.forward.__func__ is RMSNorm.forward for n in _norms(dev))
    ids = torch.randint(0, 128, (2, 8))
    cpu(ids, labels=ids).loss.backward()
    dev(ids.to(DEV), labels=ids.to(DEV)).loss.backward()
    for (name, a), b in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_cpu_model_is_left_alone_by_the_tpu_mapping():
    cpu, _ = _models()
    with hub.use_torch_pjrt_kernels("tpu"):
        kernels.kernelize(cpu, mode=kernels.Mode.INFERENCE, device="cpu")
    assert all(getattr(n.forward, "__func__", None) is not RMSNorm.forward for n in _norms(cpu))
