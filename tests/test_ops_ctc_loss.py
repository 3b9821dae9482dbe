"""CTC loss on the device (csrc/ops/ctc_loss.cc): aten::_ctc_loss and
_ctc_loss_backward with int[] and Tensor lengths, against CPU PyTorch, with
no CPU fallback. Losses and gradients for padded and concatenated targets,
every reduction, zero_infinity, an impossible alignment, an empty target and
input lengths shorter than T; log_alpha where CPU defines it; bad input
raises what CPU raises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

TPU = "tpu"
A = torch.ops.aten

T, N, C = 12, 6, 5
IL = [12, 10, 7, 3, 0, 0]
# Sample 1: an empty target; 3: [2, 2, 1] needs 4 frames, has 3 (impossible);
# 4 and 5: no input, for an empty target (loss 0) and a non-empty one (inf).
TL = [4, 0, 3, 3, 0, 2]
PADDED = torch.tensor([[1, 3, 3, 4], [2, -1, -1, -1], [4, 1, 4, -1], [2, 2, 1, -1], [-1] * 4,
                       [3, 1, -1, -1]])  # -1: padding
CONCAT = torch.tensor([1, 3, 3, 4, 4, 1, 4, 2, 2, 1, 3, 1])
# Programs are shared between tests where they can be (compiles dominate the time):
# padded targets go with float64, concatenated ones with float32.
DTYPE = {"padded": torch.float64, "concat": torch.float32}


def _log_probs(dtype):
    g = torch.Generator().manual_seed(0)
    return torch.randn(T, N, C, generator=g, dtype=dtype).log_softmax(2)


def _tol(dtype):
    return dict(rtol=1e-9, atol=1e-9) if dtype == torch.float64 else dict(rtol=1e-5, atol=2e-5)


def _defined(log_alpha, il, tl):
    """The part of log_alpha [N, T, 2 max(tl) + 1] CPU writes: t < il, s < 2 tl + 1
    (CPU leaves the rest uninitialized; the device fills it with -inf)."""
    return [log_alpha[b, :il[b], :2 * tl[b] + 1] for b in range(len(il))]


@pytest.mark.parametrize("lengths", ["list", "tensor"])
@pytest.mark.parametrize("layout", ["padded", "concat"])
def test_loss_and_gradients_match_cpu(layout, lengths):
    dtype = DTYPE[layout]
    lp = _log_probs(dtype)
    targets = PADDED if layout == "padded" else CONCAT
    il, tl = (IL, TL) if lengths == "list" else (torch.tensor(IL), torch.tensor(TL))
    # torch's ctc_loss reads device length tensors on the host and calls the
    # int[] overload; the Tensor overloads are tested directly below.
    dev = (lambda x: x.to(TPU)) if lengths == "tensor" else (lambda x: x)
    torch_pjrt.reset_metrics()
    for reduction in ("none", "mean", "sum"):
        for zero_infinity in (False, True):
            want_x = lp.clone().requires_grad_()
            want = F.ctc_loss(want_x, targets, il, tl, reduction=reduction,
                              zero_infinity=zero_infinity)
            got_x = lp.to(TPU).requires_grad_()
            got = F.ctc_loss(got_x, targets.to(TPU), dev(il), dev(tl), reduction=reduction,
                             zero_infinity=zero_infinity)
            seed = (torch.linspace(0.5, 1.5, N, dtype=dtype) if reduction == "none"
                    else torch.tensor(0.75, dtype=dtype))
            want.backward(seed)
            got.backward(seed.to(TPU))
            torch.testing.assert_close(got.cpu(), want, **_tol(dtype), equal_nan=True)
            # Without zero_infinity the impossible sample's gradient is NaN, as on CPU.
            torch.testing.assert_close(got_x.grad.cpu(), want_x.grad, **_tol(dtype), equal_nan=True)
            if zero_infinity:
                assert torch.isfinite(got_x.grad.cpu()).all()
    assert torch_pjrt.metrics()["fallback_ops"] == {}


@pytest.mark.parametrize("overload,layout,zero_infinity",
                         [("default", "padded", False), ("Tensor", "padded", False),
                          ("Tensor", "concat", True)],
                         ids=["default", "Tensor", "Tensor-concat"])
def test_aten_ops_log_alpha_and_backward_match_cpu(overload, layout, zero_infinity):
    dtype = DTYPE[layout]
    lp = _log_probs(dtype)
    targets = PADDED if layout == "padded" else CONCAT
    if overload == "default":
        il_cpu, tl_cpu, il_dev, tl_dev = IL, TL, IL, TL
    else:
        il_cpu, tl_cpu = torch.tensor(IL), torch.tensor(TL)
        il_dev, tl_dev = il_cpu.to(TPU), tl_cpu.to(TPU)
    op, op_bwd = getattr(A._ctc_loss, overload), getattr(A._ctc_loss_backward, overload)
    torch_pjrt.reset_metrics()
    nll, log_alpha = op(lp, targets, il_cpu, tl_cpu, 0, False)
    got_nll, got_alpha = op(lp.to(TPU), targets.to(TPU), il_dev, tl_dev, 0, False)
    torch.testing.assert_close(got_nll.cpu(), nll, **_tol(dtype))
    got_alpha = got_alpha.cpu()
    if overload == "default":
        assert got_alpha.shape == log_alpha.shape
    else:
        # Tensor lengths are data: the width is 2 * S + 1 for the longest
        # target S the layout can hold (targets.size(1) padded, numel
        # concatenated); CPU reads the lengths on the host.
        assert got_alpha.shape == (N, T, 2 * targets.shape[-1] + 1)
    for g, w in zip(_defined(got_alpha, IL, TL), _defined(log_alpha, IL, TL)):
        torch.testing.assert_close(g, w, **_tol(dtype))
    grad = torch.linspace(-1, 2, N, dtype=dtype)
    want = op_bwd(grad, lp, targets, il_cpu, tl_cpu, nll, log_alpha, 0, zero_infinity)
    # From the device's own forward outputs, and from CPU's (uninitialized entries and all).
    for alpha in (got_alpha, log_alpha):
        got = op_bwd(grad.to(TPU), lp.to(TPU), targets.to(TPU), il_dev, tl_dev, got_nll,
                     alpha.to(TPU), 0, zero_infinity)
        torch.testing.assert_close(got.cpu(), want, **_tol(dtype), equal_nan=True)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_unbatched_input_and_another_blank():
    lp = _log_probs(torch.float32)[:, 0]  # [T, C]
    targets = torch.tensor([0, 2, 2])  # blank=4 here, so class 0 is a label
    x_cpu, x_dev = lp.clone().requires_grad_(), lp.to(TPU).requires_grad_()
    want = F.ctc_loss(x_cpu, targets, torch.tensor(9), torch.tensor(3), blank=4)
    got = F.ctc_loss(x_dev, targets.to(TPU), torch.tensor(9).to(TPU), torch.tensor(3).to(TPU),
                     blank=4)
    want.backward()
    got.backward()
    torch.testing.assert_close(got.cpu(), want, **_tol(torch.float32))
    torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad, **_tol(torch.float32))
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def _bad_cases():
    # The inputs of the tests above, so the data checks reuse their programs.
    lp, lp32 = _log_probs(DTYPE["padded"]), _log_probs(DTYPE["concat"])
    il, tl = torch.tensor(IL), torch.tensor(TL)
    fwd = A._ctc_loss
    return {
        "input_length_over_T": lambda d: fwd(d(lp), d(PADDED), [13] + IL[1:], TL, 0, False),
        "negative_input_length": lambda d: fwd(d(lp), d(PADDED), [-1] + IL[1:], TL, 0, False),
        "negative_target_length": lambda d: fwd(d(lp), d(PADDED), IL, [4, -1] + TL[2:], 0, False),
        "target_length_over_width": lambda d: fwd(d(lp), d(PADDED), IL, [5] + TL[1:], 0, False),
        "concat_total_mismatch": lambda d: fwd(d(lp32), d(CONCAT[:-1]), IL, TL, 0, False),
        "lengths_size": lambda d: fwd(d(lp), d(PADDED), IL[:3], TL, 0, False),
        "blank_out_of_range": lambda d: fwd(d(lp), d(PADDED), IL, TL, C, False),
        "float_targets": lambda d: fwd(d(lp), d(PADDED).float(), IL, TL, 0, False),
        "two_dim_log_probs": lambda d: fwd(d(lp)[:, 0], d(CONCAT[:4]), [12], [4], 0, False),
        "half_log_probs": lambda d: fwd(d(lp).half(), d(PADDED), IL, TL, 0, False),
        # Tensor lengths are data: checked on the device, raised at the next sync.
        "tensor_input_length_over_T": lambda d: A._ctc_loss.Tensor(
            d(lp), d(PADDED), d(il + 1), d(tl), 0, False),
        "tensor_target_length_over_width": lambda d: A._ctc_loss.Tensor(
            d(lp), d(PADDED), d(il), d(tl + 1), 0, False),
        "tensor_concat_total_mismatch": lambda d: A._ctc_loss.Tensor(
            d(lp32), d(CONCAT), d(il), d(tl - (tl > 2).long()), 0, False),
        "tensor_float_lengths": lambda d: A._ctc_loss.Tensor(
            d(lp), d(PADDED), d(il.float()), d(tl), 0, False),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_raises_like_cpu(case):
    fn = _bad_cases()[case]
    with pytest.raises(Exception) as cpu_error:
        fn(lambda x: x)
    with pytest.raises(cpu_error.type):
        out = fn(lambda x: x.to(TPU))
        [o.cpu() for o in out]
    # The device stays usable.
    lp = _log_probs(DTYPE["padded"])
    torch.testing.assert_close(A._ctc_loss(lp.to(TPU), PADDED.to(TPU), IL, TL, 0, False)[0].cpu(),
                               A._ctc_loss(lp, PADDED, IL, TL, 0, False)[0])


def test_targets_out_of_range_raise():
    # CPU does not check (it reads out of bounds); the device raises a RuntimeError.
    # Padding past a target's length is not a target (PADDED holds -1 there).
    bad = PADDED.clone()
    bad[0, 1] = C
    with pytest.raises(RuntimeError, match="targets must be class indices"):
        A._ctc_loss(_log_probs(DTYPE["padded"]).to(TPU), bad.to(TPU), IL, TL, 0, False)[0].cpu()
    with pytest.raises(RuntimeError, match="targets must be class indices"):
        A._ctc_loss.Tensor(_log_probs(DTYPE["concat"]).to(TPU), (CONCAT - 2).to(TPU),
                           torch.tensor(IL).to(TPU), torch.tensor(TL).to(TPU), 0, False)[0].cpu()


@pytest.mark.strict_only
def test_new_lengths_reuse_the_compiled_programs():
    # F.ctc_loss reads length tensors on the host and passes int lists;
    # those travel to the device as data, so a training loop whose lengths
    # change every batch compiles once per shape, not once per batch.
    g = torch.Generator().manual_seed(9)
    logits = torch.randn(12, 3, 6, generator=g)
    targets = torch.randint(1, 6, (3, 5), generator=g)

    def step(input_lengths, target_lengths):
        x = logits.to(TPU).requires_grad_()
        loss = F.ctc_loss(x.log_softmax(-1), targets.to(TPU), input_lengths, target_lengths)
        (grad,) = torch.autograd.grad(loss, x)
        return loss.cpu(), grad.cpu()

    step([12, 10, 9], [5, 3, 2])
    torch_pjrt.reset_metrics()
    for il, tl in (([11, 12, 7], [4, 5, 1]), ([8, 8, 12], [2, 2, 5])):
        loss, grad = step(il, tl)
        x = logits.clone().requires_grad_()
        want = F.ctc_loss(x.log_softmax(-1), targets, il, tl)
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=2e-5)
        torch.testing.assert_close(grad, torch.autograd.grad(want, x)[0], rtol=1e-5, atol=2e-5)
    assert torch_pjrt.metrics()["compilations"] == 0
