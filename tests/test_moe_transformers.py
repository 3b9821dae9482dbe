"""Mixture-of-experts models from Transformers on tpu, each experts
implementation (its `eager` loop, `batched_mm`, `grouped_mm`, and
torch_pjrt's one-kernel `torch_pjrt`) against the CPU `eager` model:
logits, greedy generate() tokens, and a training step's loss and gradients,
with no op falling back to the CPU."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import torch_pjrt

transformers = pytest.importorskip("transformers")
pytest.importorskip("jax")  # the torch_pjrt implementation is a JAX kernel

DEV = "tpu"
_COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0,
               bos_token_id=1, eos_token_id=2)


def _config(family: str):
    t = transformers
    if family == "mixtral":
        return t.MixtralConfig(**_COMMON, intermediate_size=32, num_local_experts=4,
                               num_experts_per_tok=2)
    if family == "qwen3_moe":
        return t.Qwen3MoeConfig(**_COMMON, head_dim=16, intermediate_size=64,
                                moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    if family == "qwen2_moe":
        return t.Qwen2MoeConfig(**_COMMON, intermediate_size=64, moe_intermediate_size=32,
                                shared_expert_intermediate_size=64, num_experts=4,
                                num_experts_per_tok=2)
    if family == "deepseek_v3":
        return t.DeepseekV3Config(**_COMMON, intermediate_size=64, moe_intermediate_size=32,
                                  n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                                  n_group=2, topk_group=1, first_k_dense_replace=1,
                                  q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                                  qk_nope_head_dim=8, v_head_dim=16)
    if family == "gpt_oss":
        return t.GptOssConfig(**_COMMON, head_dim=16, intermediate_size=32, num_local_experts=4,
                              num_experts_per_tok=2, sliding_window=8,
                              layer_types=["sliding_attention", "full_attention"])
    raise ValueError(family)


FAMILIES = ["mixtral", "qwen3_moe", "qwen2_moe", "deepseek_v3", "gpt_oss"]
IMPLEMENTATIONS = ["eager", "batched_mm", "grouped_mm", "torch_pjrt"]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_moe_family_on_tpu_matches_cpu(family, impl):
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(
        _config(family), dtype=torch.float32, experts_implementation="eager")
    dev = transformers.AutoModelForCausalLM.from_config(
        _config(family), dtype=torch.float32, experts_implementation=impl)
    dev.load_state_dict(copy.deepcopy(cpu.state_dict()))
    dev.to(DEV)
    cpu.eval()
    dev.eval()
    ids = torch.randint(3, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    fallbacks = dict(torch_pjrt.metrics()["fallback_ops"])

    with torch.no_grad():
        torch.testing.assert_close(dev(ids.to(DEV)).logits.cpu(), cpu(ids).logits,
                                   rtol=1e-4, atol=1e-5)
    expected = cpu.generate(ids, max_new_tokens=4, do_sample=False)
    got = dev.generate(ids.to(DEV), max_new_tokens=4, do_sample=False)
    assert torch.equal(got.cpu(), expected)

    cpu.train()
    dev.train()
    loss_cpu = cpu(ids, labels=ids).loss
    loss_cpu.backward()
    loss_dev = dev(ids.to(DEV), labels=ids.to(DEV)).loss
    loss_dev.backward()
    torch.testing.assert_close(loss_dev.cpu(), loss_cpu.detach(), rtol=1e-5, atol=1e-5)
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters()):
        if p_cpu.grad is None:
            assert p_dev.grad is None, name
            continue
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")
    after = torch_pjrt.metrics()["fallback_ops"]
    assert {k: v for k, v in after.items() if v != fallbacks.get(k, 0)} == {}


@pytest.mark.strict_only
def test_torch_pjrt_experts_is_one_launch_per_layer():
    """In strict eager the torch_pjrt experts path runs each MoE layer's
    experts as a single program, where grouped_mm runs about twenty."""
    cfg = _config("mixtral")
    counts = {}
    for impl in ("grouped_mm", "torch_pjrt"):
        model = transformers.AutoModelForCausalLM.from_config(
            copy.deepcopy(cfg), dtype=torch.float32, experts_implementation=impl).to(DEV).eval()
        experts = model.model.layers[0].mlp.experts
        x = torch.randn(6, 64, device=DEV)
        idx = torch.randint(0, 4, (6, 2), device=DEV)
        w = torch.rand(6, 2, device=DEV)
        with torch.no_grad():
            experts(x, idx, w).cpu()  # compile what it needs
            before = torch_pjrt.metrics()["executions"]
            out = experts(x, idx, w)
            counts[impl] = torch_pjrt.metrics()["executions"] - before
            out.cpu()
    assert counts["torch_pjrt"] == 1
    assert counts["grouped_mm"] >= 10


def test_unsupported_expert_layout_runs_transformers_path_with_a_warning():
    from torch_pjrt.kernels import moe_experts as moe

    cfg = _config("mixtral")
    model = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(cfg), dtype=torch.float32, experts_implementation="torch_pjrt").to(DEV).eval()
    experts = model.model.layers[0].mlp.experts
    experts.act_fn = torch.nn.Tanh()  # an activation the kernel does not cover
    moe._warned.clear()
    x = torch.randn(6, 64)
    idx = torch.randint(0, 4, (6, 2))
    w = torch.rand(6, 2)
    with pytest.warns(UserWarning, match="Tanh"):
        got = experts(x.to(DEV), idx.to(DEV), w.to(DEV))
    from transformers.integrations.moe import grouped_mm_experts_forward
    experts_cpu = copy.deepcopy(experts).to("cpu")
    expected = grouped_mm_experts_forward(experts_cpu, x, idx, w)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["grouped_mm", "torch_pjrt"])
def test_moe_forward_compiled_matches_cpu(impl):
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(
        _config("qwen3_moe"), dtype=torch.float32, experts_implementation="eager").eval()
    dev = transformers.AutoModelForCausalLM.from_config(
        _config("qwen3_moe"), dtype=torch.float32, experts_implementation=impl)
    dev.load_state_dict(copy.deepcopy(cpu.state_dict()))
    dev = dev.to(DEV).eval()
    ids = torch.randint(3, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    forward = torch.compile(dev.forward, backend="tpu")
    torch_pjrt.reset_compile_report()
    with torch.no_grad():
        torch.testing.assert_close(forward(ids.to(DEV)).logits.cpu(), cpu(ids).logits,
                                   rtol=1e-4, atol=1e-5)
    # One program: grouped_mm's torch.sort and histc are lowered in the graph.
    (graph,) = torch_pjrt.compile_report()
    assert graph["regions"] == 1 and graph["eager_ops"] == {}, graph


@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
@pytest.mark.parametrize("method", ["blocks", "ragged"])
def test_experts_kernel_both_paths_match_eager_experts(family, method):
    """Off TPU the kernel runs rows in expert blocks; on TPU it sorts rows by
    expert and uses ragged dots. Both are checked here against the CPU eager
    experts loop, with gradients."""
    from torch_pjrt.kernels import moe_experts as moe

    torch.manual_seed(0)
    cfg = _config(family)
    cpu = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(cfg), dtype=torch.float32, experts_implementation="eager")
    experts_cpu = cpu.model.layers[0].mlp.experts
    experts_dev = copy.deepcopy(experts_cpu).to(DEV)
    x = torch.randn(7, 64)
    idx = torch.randint(0, 4, (7, 2))
    w = torch.rand(7, 2)
    xc = x.clone().requires_grad_()
    expected = experts_cpu(xc, idx, w)
    xd = x.to(DEV).requires_grad_()
    args, why = moe._layout(experts_dev)
    assert args is not None, why
    got = moe.moe_experts(xd, idx.to(DEV), w.to(DEV), **args, method=method)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    g = torch.randn(7, 64)
    expected.backward(g)
    got.backward(g.to(DEV))
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for (name, a), b in zip(experts_cpu.named_parameters(), experts_dev.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")


_FIRST_USE_COMPILED = """
import json, torch, torch_pjrt, transformers
from torch._dynamo.utils import counters
from torch_pjrt.kernels.rms_norm import rms_norm
dev = torch_pjrt.settings().device_name
cfg = transformers.Qwen3MoeConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=64,
    moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, max_position_embeddings=64)
torch.manual_seed(0)
cpu = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="eager").eval()
model = transformers.AutoModelForCausalLM.from_config(cfg, experts_implementation="torch_pjrt")
model.load_state_dict(cpu.state_dict())
model = model.to(dev).eval()
ids = torch.randint(3, 128, (2, 6))
# The kernels' first calls in this process happen while Dynamo traces.
with torch.no_grad():
    logits = torch.compile(model.forward, backend="tpu")(ids.to(dev)).logits.cpu()
    x, w = torch.randn(3, 64), torch.rand(64)
    normed = torch.compile(lambda x, w: rms_norm(x, w) * 2, backend="tpu")(x.to(dev), w.to(dev))
out = {"close": torch.allclose(logits, cpu(ids).logits, rtol=1e-4, atol=1e-5),
       "rms_close": torch.allclose(normed.cpu(), 2 * w * x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6), rtol=1e-5, atol=1e-6),
       "graph_breaks": sum(counters["graph_break"].values()),
       "graphs": [(g["regions"], g["eager_ops"]) for g in torch_pjrt.compile_report()]}
print("RESULT " + json.dumps(out))
"""


def test_kernels_first_used_under_compile_do_not_break_the_graph(python_in_subprocess):
    """The package's kernel ops exist from import: their first call, inside
    a traced model, is one op in one graph (a registration while Dynamo
    traced broke the graph, and Dynamo then skipped the decoder's frames
    for good: nine programs per forward)."""
    result = python_in_subprocess(_FIRST_USE_COMPILED, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr
    out = json.loads(lines[0][len("RESULT "):])
    assert out["close"] and out["rms_close"], out
    assert out["graph_breaks"] == 0, out
    assert out["graphs"] == [[1, {}], [1, {}]], out
