"""Bad calls in training code raise what CPU PyTorch raises. Index errors
that only the data can reveal are checked on the device and raised as
IndexError when the host next reads device data (like CUDA's device-side
asserts, but recoverable): nothing outside a tensor is read or written."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

NAME = torch_pjrt.settings().device_name


def raises_like_cpu(fn, read=lambda out: out.cpu()):
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(Exception) as dev:
        read(fn(NAME))
    assert type(dev.value) is type(cpu.value), (type(cpu.value), type(dev.value), str(dev.value))
    return dev.value


def test_cross_entropy_with_a_wrong_target_dtype():
    raises_like_cpu(lambda d: F.cross_entropy(torch.randn(4, 3, device=d),
                                              torch.tensor([0.0, 1.0, 2.0, 1.0], device=d)))
    raises_like_cpu(lambda d: F.cross_entropy(torch.randn(4, 3, device=d),
                                              torch.zeros(5, dtype=torch.long, device=d)))


@pytest.mark.parametrize(
    "call",
    [
        lambda d: torch.arange(6.0, device=d).reshape(2, 3).gather(1, torch.tensor([[0, 3]], device=d)),
        lambda d: torch.arange(6.0, device=d).index_select(0, torch.tensor([1, 6], device=d)),
        lambda d: F.embedding(torch.tensor([[0, 9]], device=d), torch.randn(5, 2, device=d)),
        lambda d: torch.arange(4.0, device=d)[torch.tensor([4], device=d)],
        lambda d: torch.zeros(3, device=d).index_put_((torch.tensor([-4], device=d),), torch.ones(1, device=d)),
        lambda d: torch.zeros(2, 3, device=d).scatter(1, torch.tensor([[0], [3]], device=d), 1.0),
        lambda d: torch.zeros(2, 3, device=d).scatter_add(1, torch.tensor([[5]], device=d),
                                                          torch.ones(1, 1, device=d)),
        lambda d: F.nll_loss(torch.randn(3, 4, device=d), torch.tensor([0, 7, 1], device=d)),
        lambda d: F.cross_entropy(torch.randn(3, 4, device=d), torch.tensor([0, -2, 1], device=d)),
        lambda d: F.cross_entropy(torch.randn(2, 4, 3, device=d), torch.tensor([[0, 4, 1]] * 2, device=d),
                                  reduction="none"),
    ],
    ids=["gather", "index_select", "embedding", "advanced_index", "index_put", "scatter",
         "scatter_add", "nll_loss", "cross_entropy_negative", "cross_entropy_2d"],
)
def test_out_of_range_indices_raise_index_error(call):
    error = raises_like_cpu(call)
    assert "index" in str(error).lower() or "out of" in str(error).lower()
    # The device keeps working after the error.
    assert (torch.ones(2, device=NAME) + 1).sum().item() == 4.0


def test_out_of_range_index_is_reported_at_the_next_sync():
    x = torch.arange(5.0, device=NAME)
    y = x.index_select(0, torch.tensor([7], device=NAME))  # launched, not yet checked
    with pytest.raises(IndexError, match="reported when the host next waited"):
        getattr(torch, NAME).synchronize()
    del y


def test_convolution_with_mismatched_channels():
    raises_like_cpu(lambda d: F.conv2d(torch.randn(1, 3, 8, 8, device=d), torch.randn(4, 2, 3, 3, device=d)))
    raises_like_cpu(lambda d: F.conv2d(torch.randn(1, 4, 8, 8, device=d), torch.randn(4, 2, 3, 3, device=d),
                                       groups=3))


def test_out_of_range_nll_target_raises_at_the_next_sync_and_never_gives_a_plausible_loss():
    # CPU raises at once. The device checks the targets in the loss's own
    # program and raises at the next host wait, with no sync per loss; the
    # loss it returned until then is NaN, never a loss that drops the sample.
    loss = F.nll_loss(torch.log_softmax(torch.randn(3, 4, device=NAME), 1),
                      torch.tensor([0, 7, 1], device=NAME))
    with pytest.raises(IndexError, match="Target is out of bounds"):
        loss.cpu()
    assert torch.isnan(loss.cpu())
    # ignore_index is not out of range.
    ok = F.nll_loss(torch.log_softmax(torch.randn(3, 4, device=NAME), 1),
                    torch.tensor([0, -100, 1], device=NAME))
    assert torch.isfinite(ok.cpu())


def test_cholesky_of_a_matrix_that_is_not_positive_definite():
    a = torch.eye(3)
    a[2, 2] = -1.0
    # linalg.cholesky reads info on the host: CPU's LinAlgError, at once.
    error = raises_like_cpu(lambda d: torch.linalg.cholesky(a.to(d)))
    assert "positive-definite" in str(error)
    # cholesky_ex reports through info (nonzero exactly when CPU's is).
    _, info = torch.linalg.cholesky_ex(a.to(NAME))
    assert info.item() != 0 and torch.linalg.cholesky_ex(a)[1].item() != 0
    # The deprecated torch.cholesky checks on the device, raised at the next wait.
    with pytest.raises(RuntimeError, match="not positive-definite"):
        torch.cholesky(a.to(NAME)).cpu()
