"""The kernels torch_pjrt ships (torch_pjrt.kernels): grouped matmul, RMSNorm
(XLA and Pallas-interpret forwards), flash attention, and
scaled_dot_product_attention choosing the flash kernel; each against CPU
PyTorch, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

pytest.importorskip("jax")
from torch_pjrt.kernels import sdpa  # noqa: E402
from torch_pjrt.kernels.flash_attention import flash_attention  # noqa: E402
from torch_pjrt.kernels.grouped_matmul import grouped_matmul  # noqa: E402
from torch_pjrt.kernels.rms_norm import rms_norm  # noqa: E402

DEV = "tpu"


def rms_ref(x, w, eps=1e-6):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def test_grouped_matmul_matches_grouped_mm_and_has_gradients():
    x, w = torch.randn(16, 8), torch.randn(4, 8, 8)
    sizes = torch.tensor([3, 0, 5, 6])  # two rows past the groups: zeros
    expected = torch._grouped_mm(x, w, sizes.cumsum(0).int())
    expected[14:] = 0
    xt, wt = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    got = grouped_matmul(xt, wt, sizes.to(DEV))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    g = torch.randn(16, 8)
    got.backward(g.to(DEV))
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = torch._grouped_mm(xc, wc, sizes.cumsum(0).int())
    (out[:14] * g[:14]).sum().backward()
    # CPU's backward leaves the rows past the groups unset; ours are zeros.
    torch.testing.assert_close(xt.grad.cpu()[:14], xc.grad[:14], rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(xt.grad.cpu()[14:]) == 0
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="shapes do not agree"):
        grouped_matmul(xt, wt[:3], sizes.to(DEV))


def test_grouped_matmul_many_groups_in_blocks_with_gradients():
    # 32 groups of 0 to 9 rows (empty ones included), 7 rows past the last:
    # the block path off TPU, against a per-group loop on the CPU.
    gen = torch.Generator().manual_seed(2)
    sizes = torch.randint(0, 10, (32,), generator=gen)
    sizes[[3, 17]] = 0
    rows = int(sizes.sum()) + 7
    x, w = torch.randn(rows, 12, generator=gen), torch.randn(32, 12, 5, generator=gen)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    parts, start = [], 0
    for g, n in enumerate(sizes.tolist()):
        parts.append(xc[start:start + n] @ wc[g])
        start += n
    expected = torch.cat(parts + [torch.zeros(7, 5)])
    xt, wt = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    got = grouped_matmul(xt, wt, sizes.to(DEV))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    g = torch.randn(rows, 5, generator=gen)
    got.backward(g.to(DEV))
    expected.backward(g)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-5)
    empty = grouped_matmul(torch.zeros(0, 12, device=DEV), wt.detach(),
                           torch.zeros(32, dtype=torch.long, device=DEV))
    assert empty.shape == (0, 5)


@pytest.mark.parametrize("impl", ["xla", "pallas"])
@pytest.mark.parametrize("dtype,wdtype,tol", [(torch.float32, torch.float32, 1e-5),
                                              (torch.bfloat16, torch.float32, 2e-2)])
def test_rms_norm_forward_backward(impl, dtype, wdtype, tol):
    x, w = torch.randn(3, 8, 32).to(dtype), torch.randn(32).to(wdtype)
    xt, wt = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    got = rms_norm(xt, wt, 1e-5, impl=impl)
    expected = rms_ref(x, w, 1e-5)
    assert got.dtype == expected.dtype  # float32 weight on bf16 input: float32, as Llama's
    torch.testing.assert_close(got.cpu(), expected, rtol=tol, atol=tol)
    g = torch.randn(expected.shape).to(expected.dtype)
    got.backward(g.to(DEV))
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    rms_ref(xc, wc, 1e-5).backward(g)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=tol * 10, atol=tol * 10)
    torch.testing.assert_close(wt.grad.cpu(), wc.grad, rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(40, 40), (7, 600), (600, 600)])
def test_flash_attention_matches_sdpa(causal, sq, sk):
    torch.manual_seed(sq + sk)
    q, k, v = torch.randn(2, 3, sq, 16), torch.randn(2, 3, sk, 16), torch.randn(2, 3, sk, 8)
    ts = [t.to(DEV).requires_grad_() for t in (q, k, v)]
    got = flash_attention(*ts, is_causal=causal, scale=0.3)
    cs = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*cs, is_causal=causal, scale=0.3)
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    g = torch.randn(expected.shape)
    got.backward(g.to(DEV))
    expected.backward(g)
    for t, c in zip(ts, cs):
        torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)


def test_sdpa_uses_flash_only_where_chosen():
    long = [torch.randn(1, 2, sdpa.AUTO_MIN_KEYS, 16, device=DEV) for _ in range(3)]
    short = [t[:, :, :16] for t in long]
    assert sdpa.get_mode() == "auto"
    out = F.scaled_dot_product_attention(*[t.requires_grad_() for t in long], is_causal=True)
    assert "flash_attention" in type(out.grad_fn).__name__
    assert "flash_attention" not in type(F.scaled_dot_product_attention(*short).grad_fn).__name__
    mask = torch.ones(sdpa.AUTO_MIN_KEYS, sdpa.AUTO_MIN_KEYS, dtype=torch.bool, device=DEV)
    masked = F.scaled_dot_product_attention(*long, attn_mask=mask)
    assert "flash_attention" not in type(masked.grad_fn).__name__
    try:
        sdpa.set_mode("always")
        assert "flash_attention" in type(F.scaled_dot_product_attention(*short).grad_fn).__name__
        sdpa.set_mode("never")
        assert "flash_attention" not in type(
            F.scaled_dot_product_attention(*long, is_causal=True).grad_fn).__name__
    finally:
        sdpa.set_mode("auto")
    expected = F.scaled_dot_product_attention(*[t.detach().cpu() for t in long], is_causal=True)
    torch.testing.assert_close(out.detach().cpu(), expected, rtol=1e-5, atol=1e-5)


def test_sdpa_flash_inside_a_compiled_graph():
    q, k, v = [torch.randn(1, 2, sdpa.AUTO_MIN_KEYS, 16) for _ in range(3)]
    f = torch.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True) * 2,
                      backend="tpu")
    f(q.to(DEV), k.to(DEV), v.to(DEV)).cpu()
    before = torch_pjrt.metrics()["executions"]
    got = f(q.to(DEV), k.to(DEV), v.to(DEV)).cpu()
    assert torch_pjrt.metrics()["executions"] - before == 1
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2,
                               rtol=1e-5, atol=1e-5)
