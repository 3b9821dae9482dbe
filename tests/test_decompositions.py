"""Ops with no lowering of their own that torch decomposes run on tpu through
the decomposition (python/torch_pjrt/decompositions), not on the CPU: each
result against CPU PyTorch, with no fallback and, in strict eager, one
program per call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt
from torch_pjrt import decompositions

TPU = "tpu"


def _pool_indices():
    x = torch.randn(2, 3, 8, 8)
    out, idx = F.max_pool2d(x, 2, return_indices=True)
    return out, idx


CASES = {
    # name: (function of (device tensors...), CPU inputs, the aten op decomposed)
    "renorm": (lambda x: torch.renorm(x, p=2, dim=0, maxnorm=1.0), [torch.randn(5, 6) * 3],
               "aten::renorm.out"),
    "addmv": (lambda m, v, b: torch.addmv(b, m, v, beta=0.5, alpha=2.0),
              [torch.randn(4, 6), torch.randn(6), torch.randn(4)], "aten::addmv.out"),
    "logspace": (lambda x: torch.logspace(0, 2, 7, base=3.0, device=x.device) + x,
                 [torch.zeros(7)], "aten::logspace.out"),
    "take": (lambda x, i: torch.take(x, i), [torch.randn(3, 4), torch.tensor([0, 5, 11, -1])],
             "aten::take"),
    "glu": (lambda x: F.glu(x, dim=-1), [torch.randn(4, 6)], "aten::glu.out"),
    "vdot": (lambda a, b: torch.vdot(a, b), [torch.randn(9), torch.randn(9)], "aten::vdot"),
    "max_unpool2d": (lambda o, i: F.max_unpool2d(o, i, 2), list(_pool_indices()),
                     "aten::max_unpool2d"),
    "prelu": (lambda x, w: F.prelu(x, w), [torch.randn(2, 3, 4), torch.rand(3)],
              "aten::_prelu_kernel"),
    "huber": (lambda x, y: F.huber_loss(x, y, delta=0.5), [torch.randn(10), torch.randn(10)],
              "aten::huber_loss"),
    "round_decimals": (lambda x: torch.round(x * 100, decimals=-1), [torch.randn(12)],
                       "aten::round.decimals_out"),
    "unfold_im2col": (lambda x: F.unfold(x, kernel_size=2, stride=1),
                      [torch.randn(1, 2, 4, 4)], "aten::im2col"),
    "channel_shuffle": (lambda x: F.channel_shuffle(x, 2), [torch.randn(1, 4, 3, 3)],
                        "aten::channel_shuffle"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_decomposed_op_matches_cpu_without_fallback(case):
    fn, inputs, aten_op = CASES[case]
    expected = fn(*inputs)
    torch_pjrt.reset_metrics()
    decompositions.reset_counts()
    got = fn(*[t.to(TPU) for t in inputs])
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    assert decompositions.decomposed_counts().get(aten_op, 0) >= 1
    assert torch_pjrt.metrics()["decomposed_ops"].get(aten_op, 0) >= 1


@pytest.mark.strict_only
def test_strict_eager_runs_a_decomposition_as_one_program():
    x = (torch.randn(6, 8) * 3).to(TPU)
    torch.renorm(x, p=2, dim=0, maxnorm=1.0)  # compiles
    torch.tpu.synchronize()
    torch_pjrt.reset_metrics()
    for _ in range(3):
        y = torch.renorm(x, p=2, dim=0, maxnorm=1.0)
    torch.tpu.synchronize()
    m = torch_pjrt.metrics()
    assert m["decomposed_ops"] == {"aten::renorm.out": 3}
    assert m["executions"] == 3
    assert m["compilations"] == 0
    torch.testing.assert_close(y.cpu(), torch.renorm(x.cpu(), p=2, dim=0, maxnorm=1.0))


def test_gradients_through_decomposed_ops_match_cpu():
    x = torch.randn(4, 6)
    target = torch.randn(4, 3)

    def loss(t, tgt):
        return F.huber_loss(F.glu(t, dim=-1), tgt, delta=0.3)

    xc = x.clone().requires_grad_()
    loss(xc, target).backward()
    xt = x.to(TPU).requires_grad_()
    torch_pjrt.reset_metrics()
    loss(xt, target.to(TPU)).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_decomposition_inside_fused_eager_joins_the_pending_graph():
    x = torch.randn(6, 5)
    with torch_pjrt.eager_mode("fused"):
        xt = x.to(TPU)
        y = torch.renorm(F.glu(xt * 2, dim=0), p=1, dim=1, maxnorm=0.5) + 1
        got = y.cpu()
    expected = torch.renorm(F.glu(x * 2, dim=0), p=1, dim=1, maxnorm=0.5) + 1
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_out_of_range_index_still_raises_like_cpu():
    x = torch.randn(3, 4)
    with pytest.raises(IndexError):
        torch.take(x, torch.tensor([20]))
    with pytest.raises(IndexError):
        torch.take(x.to(TPU), torch.tensor([20]).to(TPU)).cpu()


def test_decomposition_that_calls_its_own_op_runs_on_the_cpu(python_in_subprocess):
    # A decomposition that comes back to its own op (as torch's references
    # for igamma once did, ending in a primitive whose kernel is the op):
    # the kernel sends the call that comes back to the CPU fallback, counted
    # there and not as decomposed, and does the same for later calls.
    result = python_in_subprocess(
        """
        import torch, torch_pjrt
        from torch_pjrt import decompositions
        op = torch.ops.aten.igamma.out
        lib = torch.library.Library("aten", "IMPL")
        lib.impl(op, decompositions._kernel(op.name(), op, lambda *args, **kwargs: op(*args, **kwargs)),
                 "PrivateUse1")
        a, b = torch.rand(6) + 0.5, torch.rand(6) + 0.5
        torch_pjrt.reset_metrics()
        for _ in range(2):
            got = torch.empty(6, device="tpu")
            torch.special.gammainc(a.to("tpu"), b.to("tpu"), out=got)
            torch.testing.assert_close(got.cpu(), torch.special.gammainc(a, b))
        m = torch_pjrt.metrics()
        print(m["fallback_ops"].get("aten::igamma.out"), m["decomposed_ops"])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2 {}"


def test_selection_skips_ops_with_lowerings_and_names_exclusions():
    names = set(decompositions.decomposed_op_names())
    lowered = set(torch_pjrt._C._lowered_ops())
    assert names and not names & lowered
    assert not names & set(decompositions.EXCLUDED)


def test_take_and_index_of_empty_tensors():
    empty, none = torch.zeros(0), torch.zeros(0, dtype=torch.long)
    assert torch.take(empty.to(TPU), none.to(TPU)).cpu().shape == (0,)
    assert torch.take(torch.tensor(3.0).to(TPU), none.to(TPU)).cpu().shape == (0,)
    assert empty.to(TPU)[none.to(TPU)].cpu().shape == (0,)
    with pytest.raises(IndexError):
        empty.to(TPU)[torch.tensor([0]).to(TPU)].cpu()
    rows = torch.zeros(0, 3).to(TPU)
    rows[none.to(TPU)] = 1.0
    assert rows.cpu().shape == (0, 3)


def test_put_out_of_range_raises_index_error_at_the_next_wait():
    x = torch.zeros(3, 4).to(TPU)
    with pytest.raises(IndexError, match="put_"):
        x.put_(torch.tensor([20]).to(TPU), torch.tensor([1.0]).to(TPU)).cpu()
    with pytest.raises(IndexError, match="same number of elements"):
        x.put_(torch.tensor([1, 2]).to(TPU), torch.tensor([1.0]).to(TPU))
