"""Storage, views and in-place writes: every alias of a storage sees every
write, as on CPU. Each case runs the same code on CPU and on the device."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name


def both(fn):
    """Runs fn(device) on CPU and on the device; returns the two results."""
    torch.manual_seed(0)
    cpu = fn("cpu")
    torch.manual_seed(0)
    dev = fn(NAME)
    return cpu, dev


def assert_same(cpu, dev):
    if isinstance(cpu, (tuple, list)):
        for c, d in zip(cpu, dev):
            assert_same(c, d)
        return
    assert dev.device.type == NAME
    torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)


@pytest.mark.parametrize(
    "case",
    [
        lambda d: (lambda x: (x[1].fill_(7), x)[1])(torch.arange(12.0, device=d).reshape(3, 4)),
        lambda d: (lambda x: (x.t().add_(1), x)[1])(torch.arange(12.0, device=d).reshape(3, 4)),
        lambda d: (lambda x: (x[::2, 1:].mul_(-2), x)[1])(torch.arange(20.0, device=d).reshape(4, 5)),
        lambda d: (lambda x: (x.view(2, 6)[:, 3].zero_(), x)[1])(torch.arange(12.0, device=d).reshape(3, 4)),
        lambda d: (lambda x: (x.diagonal().copy_(torch.tensor([9.0, 8.0, 7.0])), x)[1])(torch.zeros(3, 3, device=d)),
        lambda d: (lambda x: (x.unsqueeze(0)[0, :, 2].clamp_(max=1.5), x)[1])(torch.arange(12.0, device=d).reshape(3, 4)),
    ],
    ids=["select", "transpose", "strided_slice", "view_of_view", "diagonal_copy", "unsqueeze_clamp"],
)
def test_writes_through_views_reach_the_base(case):
    assert_same(*both(case))


def test_two_views_of_one_storage_see_each_others_writes():
    def run(d):
        base = torch.zeros(4, 4, device=d)
        row = base[2]
        col = base[:, 1]
        row += 1
        col -= 3
        return base, row, col
    assert_same(*both(run))


def test_reading_views_without_copies_of_the_base():
    def run(d):
        x = torch.arange(24.0, device=d).reshape(2, 3, 4)
        return (x.permute(2, 0, 1), x[:, ::2, 1:3], x.expand(2, 2, 3, 4), x.as_strided((3, 3), (1, 2), 1),
                x.transpose(0, 2).reshape(-1), x[1, 2, 3])
    assert_same(*both(run))


def test_view_as_another_dtype_of_the_same_width():
    def run(d):
        x = torch.tensor([1.0, -2.0, 0.5], device=d)
        return x.view(torch.int32), x.view(torch.int32).view(torch.float32) * 2
    assert_same(*both(run))


def test_complex_views_of_real_storage_match_cpu():
    # Rotary embeddings (Llama, torchtitan) view pairs of floats as complex
    # numbers, multiply by torch.polar(...) and view the result as floats.
    def run(d):
        x = torch.arange(24.0, device=d).reshape(4, 3, 2) / 7
        z = torch.view_as_complex(x)
        rot = torch.polar(torch.ones(4, 3, device=d), x[..., 0])
        return (torch.view_as_real(z * rot).flatten(1), z.view(torch.float32), z[:, 1:].abs(),
                torch.view_as_real(torch.complex(x[..., 1], x[..., 0])))
    cpu, dev = both(run)
    for c, d in zip(cpu, dev):
        assert d.device.type == NAME
        torch.testing.assert_close(d.cpu(), c, rtol=1e-6, atol=1e-6)


def test_resize_and_set_match_cpu():
    def run(d):
        x = torch.arange(6.0, device=d)
        x.resize_(2, 2)
        grown = torch.arange(3.0, device=d)
        grown.resize_(5)
        grown[3:] = 1  # new elements are uninitialised in torch; set them
        y = torch.empty(0, device=d)
        y.set_(x.untyped_storage(), 1, (3,), (1,))
        z = torch.empty(0, device=d)
        z.set_(x)
        z[0, 0] = 42
        return x, grown, y, z
    assert_same(*both(run))


def test_in_place_ops_on_whole_tensors_keep_identity():
    x = torch.ones(3, device=NAME)
    ptr = x.data_ptr()
    x.mul_(3).add_(1)
    assert x.data_ptr() == ptr
    assert x.cpu().tolist() == [4.0, 4.0, 4.0]


def test_out_variants_resize_and_write():
    def run(d):
        a = torch.arange(6.0, device=d).reshape(2, 3)
        out = torch.empty(0, device=d)
        torch.add(a, 1, out=out)
        view_out = torch.zeros(2, 6, device=d)
        torch.mul(a, 2, out=view_out[:, ::2])
        return out, view_out
    assert_same(*both(run))


def test_in_place_result_must_fit_self():
    for d in ("cpu", NAME):
        x = torch.ones(3, device=d)
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            x.add_(torch.ones(2, 3, device=d))
        xi = torch.ones(3, dtype=torch.int64, device=d)
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
            xi.add_(torch.ones(3, device=d) * 0.5)


@pytest.mark.parametrize("fn", [
    lambda d: torch.tensor([True, False, True, True], device=d).view(torch.uint8),
    lambda d: torch.tensor([True, False, True, True], device=d).view(torch.int16),
    lambda d: torch.tensor([0, 3, 1, 0], dtype=torch.uint8, device=d).view(torch.bool),
    lambda d: torch.tensor([0, 256, 1, 0], dtype=torch.int16, device=d).view(torch.bool)[1:],
    lambda d: torch.tensor([[True, False], [False, True]], device=d).t().contiguous().view(torch.int8),
], ids=["bool_as_u8", "bool_as_i16", "u8_as_bool", "i16_as_bool", "bool_2d_as_i8"])
def test_bool_reinterpreted_as_bytes_and_back(fn):
    # XLA's bool is a 1-bit type to bitcasts, torch's a byte.
    assert_same(*both(fn))


def test_write_through_a_bool_view_of_bytes():
    def fn(d):
        x = torch.zeros(4, dtype=torch.uint8, device=d)
        x.view(torch.bool)[2] = True
        m = torch.zeros(4, dtype=torch.bool, device=d)
        m.view(torch.uint8)[1] = 1
        return x, m
    assert_same(*both(fn))
