"""The MoE kernel's block path (kernels/expert_blocks.py), which every
platform but TPU runs: rows padded into per-expert blocks and a loop over the
blocks that hold rows. Checked against a CPU PyTorch reference that gathers
each row's expert weights, forward and gradients, across routings that
stress the layout: experts with no rows, one expert taking every row (many
blocks for one expert), a single row, bfloat16, biases and GPT-OSS gating."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt  # noqa: F401

pytest.importorskip("jax")

from torch_pjrt.kernels import moe_experts as moe  # noqa: E402
from torch_pjrt.kernels.expert_blocks import block_layout, block_size  # noqa: E402

DEV = "tpu"


def reference(x, idx, w, w_up, w_down, b_up=None, b_down=None, gate="concatenated",
              limit=7.0, alpha=1.702):
    """[T, H] from w_up [E, 2I or I, H], w_down [E, H, I], as Transformers'
    eager experts compute it, one (token, choice) row at a time."""
    up = w_up[idx]                                   # [T, K, 2I, H]
    h = torch.einsum("tkoh,th->tko", up.float(), x.float())
    if b_up is not None:
        h = h + b_up[idx].float()
    if gate == "interleaved":
        g, u = h[..., ::2].clamp(max=limit), h[..., 1::2].clamp(-limit, limit)
        h = (u + 1) * (g * torch.sigmoid(g * alpha))
    elif gate == "concatenated":
        half = h.shape[-1] // 2
        h = F.silu(h[..., :half]) * h[..., half:]
    else:
        h = F.silu(h)
    out = torch.einsum("tkhi,tki->tkh", w_down[idx].float(), h.to(w_down.dtype).float())
    if b_down is not None:
        out = out + b_down[idx].float()
    return (out * w.float()[..., None]).sum(1).to(x.dtype)


def _routing(kind: str, tokens: int, experts: int, top_k: int, gen: torch.Generator):
    if kind == "one_expert":
        idx = torch.full((tokens, top_k), 3)
    elif kind == "few_experts":  # most experts get no rows
        idx = torch.randint(0, 2, (tokens, top_k), generator=gen) * 5
    else:
        idx = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    w = torch.rand(tokens, top_k, generator=gen)
    return idx, w


def test_block_size_follows_rows_per_expert():
    assert block_size(8, 128) == 4        # under one row per expert: smallest block
    assert block_size(256, 128) == 4
    assert block_size(512, 128) == 8
    assert block_size(128, 8) == 16
    assert block_size(100000, 8) == 64    # capped


@pytest.mark.parametrize("size", [4, 16])
def test_layout_gives_each_row_its_own_slot_in_its_experts_blocks(size):
    import jax.numpy as jnp
    import numpy as np

    ids = np.array([5, 0, 5, 5, 2, 5, 0, 5, 5, 5, 5, 7], dtype=np.int32)
    layout = block_layout(jnp.asarray(ids), 8, size)
    pos = np.asarray(layout.pos)
    blk_expert = np.asarray(layout.blk_expert)
    counts = np.bincount(ids, minlength=8)
    used = int(layout.used)
    assert used == sum(-(-c // size) for c in counts)
    assert used <= layout.blocks
    assert len(set(pos.tolist())) == len(ids)                   # no two rows share a slot
    assert (pos < used * size).all()
    assert (blk_expert[pos // size] == ids).all()               # every row in its expert's block
    # Rows of one expert keep their order (a stable layout).
    for e in range(8):
        assert (np.diff(pos[ids == e]) > 0).all()


CASES = [
    # (routing, tokens, experts, top_k)
    ("random", 1, 16, 4),
    ("random", 37, 16, 4),
    ("one_expert", 20, 8, 1),
    ("few_experts", 13, 8, 2),
]


@pytest.mark.parametrize("routing,tokens,experts,top_k", CASES)
def test_blocks_match_reference_with_gradients(routing, tokens, experts, top_k):
    gen = torch.Generator().manual_seed(tokens + experts)
    hidden, inner = 24, 12
    x = torch.randn(tokens, hidden, generator=gen)
    w_up = torch.randn(experts, 2 * inner, hidden, generator=gen) * 0.2
    w_down = torch.randn(experts, hidden, inner, generator=gen) * 0.2
    idx, w = _routing(routing, tokens, experts, top_k, gen)

    leaves_cpu = [t.clone().requires_grad_() for t in (x, w, w_up, w_down)]
    expected = reference(leaves_cpu[0], idx, *leaves_cpu[1:])
    leaves_dev = [t.to(DEV).requires_grad_() for t in (x, w, w_up, w_down)]
    got = moe.moe_experts(leaves_dev[0], idx.to(DEV), *leaves_dev[1:])
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)

    g = torch.randn(tokens, hidden, generator=gen)
    expected.backward(g)
    got.backward(g.to(DEV))
    for name, a, b in zip(["x", "weights", "w_up", "w_down"], leaves_cpu, leaves_dev):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_blocks_with_biases_and_interleaved_gating():
    gen = torch.Generator().manual_seed(3)
    tokens, experts, top_k, hidden, inner = 9, 16, 2, 16, 8
    x = torch.randn(tokens, hidden, generator=gen)
    w_up = torch.randn(experts, 2 * inner, hidden, generator=gen) * 0.3
    w_down = torch.randn(experts, hidden, inner, generator=gen) * 0.3
    b_up = torch.randn(experts, 2 * inner, generator=gen)
    b_down = torch.randn(experts, hidden, generator=gen)
    idx, w = _routing("random", tokens, experts, top_k, gen)
    cpu = [t.clone().requires_grad_() for t in (x, w, w_up, w_down, b_up, b_down)]
    expected = reference(cpu[0], idx, *cpu[1:], gate="interleaved", limit=1.5, alpha=1.702)
    dev = [t.to(DEV).requires_grad_() for t in (x, w, w_up, w_down, b_up, b_down)]
    got = moe.moe_experts(dev[0], idx.to(DEV), dev[1], dev[2], dev[3], dev[4], dev[5],
                          gate="interleaved", limit=1.5)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    got.sum().backward()
    expected.sum().backward()
    for name, a, b in zip(["x", "weights", "w_up", "w_down", "b_up", "b_down"], cpu, dev):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_blocks_in_bfloat16():
    gen = torch.Generator().manual_seed(5)
    tokens, experts, top_k, hidden, inner = 12, 16, 4, 32, 16
    x = torch.randn(tokens, hidden, generator=gen).bfloat16()
    w_up = (torch.randn(experts, 2 * inner, hidden, generator=gen) * 0.2).bfloat16()
    w_down = (torch.randn(experts, hidden, inner, generator=gen) * 0.2).bfloat16()
    idx, w = _routing("random", tokens, experts, top_k, gen)
    w = w.bfloat16()
    got = moe.moe_experts(x.to(DEV), idx.to(DEV), w.to(DEV), w_up.to(DEV), w_down.to(DEV))
    assert got.dtype == torch.bfloat16
    # The kernel accumulates in float32 and rounds once; the reference too.
    torch.testing.assert_close(got.cpu(), reference(x, idx, w, w_up, w_down),
                               rtol=2e-2, atol=2e-2)


def test_blocks_run_as_one_launch_and_inline_under_compile():
    gen = torch.Generator().manual_seed(7)
    tokens, experts, top_k, hidden, inner = 16, 32, 4, 16, 8
    args = [torch.randn(tokens, hidden, generator=gen),
            *_routing("random", tokens, experts, top_k, gen),
            torch.randn(experts, 2 * inner, hidden, generator=gen) * 0.2,
            torch.randn(experts, hidden, inner, generator=gen) * 0.2]
    x, idx, w, w_up, w_down = args
    expected = reference(x, idx, w, w_up, w_down)
    dev = [a.to(DEV) for a in args]
    moe.moe_experts(*dev).cpu()  # compiles the kernel's program
    torch.tpu.synchronize()
    before = torch_pjrt.metrics()["executions"]
    got = moe.moe_experts(*dev)
    torch.tpu.synchronize()
    assert torch_pjrt.metrics()["executions"] - before == 1
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)

    compiled = torch.compile(lambda *a: moe.moe_experts(*a) * 2, backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(*dev).cpu(), expected * 2, rtol=1e-5, atol=1e-5)


def test_no_tokens_gives_an_empty_result():
    x = torch.randn(0, 8, device=DEV)
    idx = torch.zeros(0, 2, dtype=torch.long, device=DEV)
    w = torch.rand(0, 2, device=DEV)
    w_up, w_down = torch.randn(16, 8, 8, device=DEV), torch.randn(16, 8, 4, device=DEV)
    got = moe.moe_experts(x, idx, w, w_up, w_down)
    assert got.shape == (0, 8) and got.device.type == DEV
    assert moe.moe_experts(x.cpu(), idx.cpu(), w.cpu(), w_up.cpu(), w_down.cpu()).shape == (0, 8)
