"""Ops that went to the CPU fallback (eager) or split a compiled graph:
antialiased bicubic resizing, weight norm's backward, scatter with a value
and a reduction, nn.Bilinear's _trilinear. Results and gradients are
compared with CPU PyTorch; fallbacks are read from metrics() and eager
nodes of compiled graphs from compile_report()."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_pjrt

NAME = torch_pjrt.settings().device_name

pytestmark = pytest.mark.usefixtures("fresh_compile_state")


_RESIZES = {
    "down": dict(size=(4, 5)),
    "up": dict(size=(16, 13)),
    "mixed": dict(size=(13, 4)),
    "align_corners": dict(size=(5, 3), align_corners=True),
    "scale_factor": dict(scale_factor=0.37),
}


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("case", sorted(_RESIZES))
def test_antialiased_resize_matches_cpu_with_gradient(mode, case):
    """torchvision's Resize(antialias=True) on tensors: the bicubic form went
    to the CPU fallback."""
    kwargs = _RESIZES[case]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 11, 9, generator=g)
    xc, xd = x.clone().requires_grad_(), x.to(NAME).requires_grad_()
    expected = F.interpolate(xc, mode=mode, antialias=True, **kwargs)
    got = F.interpolate(xd, mode=mode, antialias=True, **kwargs)
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    weight = torch.randn(expected.shape, generator=g)
    (expected * weight).sum().backward()
    (got * weight.to(NAME)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_antialiased_bicubic_in_a_compiled_graph():
    def fn(x):
        return F.interpolate(x * 2, size=(5, 6), mode="bicubic", antialias=True).relu()

    x = torch.randn(1, 2, 12, 10, generator=torch.Generator().manual_seed(1))
    got = torch.compile(fn, backend="tpu")(x.to(NAME))
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-5, atol=1e-6)
    assert [g["eager_ops"] for g in torch_pjrt.compile_report()] == [{}]


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("layer", ["linear", "conv1d"])
def test_weight_norm_trains_on_the_device(layer, dim):
    """wav2vec2's positional convolution and vocoders use weight_norm; its
    backward op went to the CPU fallback."""
    def make():
        torch.manual_seed(2)
        module = torch.nn.Linear(6, 5) if layer == "linear" else torch.nn.Conv1d(4, 6, 3)
        return torch.nn.utils.parametrizations.weight_norm(module, dim=dim)

    cpu, dev = make(), make().to(NAME)
    x = torch.randn(3, 6) if layer == "linear" else torch.randn(2, 4, 8)
    cpu(x).square().sum().backward()
    dev(x.to(NAME)).square().sum().backward()
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5, msg=name)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_weight_norm_compiled_training_step_has_no_eager_node():
    torch.manual_seed(3)
    cpu = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3, padding=1))
    dev = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3, padding=1))
    dev.load_state_dict(cpu.state_dict())
    dev.to(NAME)
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(4))
    cpu(x).tanh().sum().backward()
    torch.compile(dev, backend="tpu")(x.to(NAME)).tanh().sum().backward()
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)
    assert all(g["eager_ops"] == {} for g in torch_pjrt.compile_report())


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_with_a_value_and_a_reduction(reduce):
    index = torch.tensor([[0, 1, 0, 1, 2, 0], [2, 2, 1, 0, 0, 1]])
    base = torch.arange(18.0).reshape(3, 6)
    expected = base.clone().scatter_(0, index, 1.5, reduce=reduce)
    got = base.to(NAME).scatter_(0, index.to(NAME), 1.5, reduce=reduce)
    assert torch.equal(got.cpu(), expected)
    functional = torch.scatter(base.to(NAME), 1, index.to(NAME) % 6, -2.0, reduce=reduce)
    assert torch.equal(functional.cpu(), torch.scatter(base, 1, index % 6, -2.0, reduce=reduce))
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="reduce argument must be either add or multiply"):
        base.to(NAME).scatter_(0, index.to(NAME), 1.5, reduce="mean")


def test_bilinear_layer_compiles_to_one_program_per_direction():
    torch.manual_seed(5)
    cpu = torch.nn.Bilinear(4, 5, 3)
    dev = torch.nn.Bilinear(4, 5, 3)
    dev.load_state_dict(cpu.state_dict())
    dev.to(NAME)
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(2, 4, generator=g), torch.randn(2, 5, generator=g)
    expected = cpu(a, b)
    expected.square().sum().backward()
    got = torch.compile(dev, backend="tpu")(a.to(NAME), b.to(NAME))
    got.square().sum().backward()
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5)
    report = torch_pjrt.compile_report()
    assert sorted(g["kind"] for g in report) == ["backward", "forward"]
    assert all(g["eager_ops"] == {} and g["regions"] == 1 for g in report), report


@pytest.mark.parametrize("self_dtype", [torch.int8, torch.uint8])
def test_int8_matmul_accumulates_in_int32(self_dtype):
    """torch._int_mm (torchao's dynamic int8 quantization) went to the CPU
    fallback."""
    g = torch.Generator().manual_seed(8)
    low = 0 if self_dtype == torch.uint8 else -128
    a = torch.randint(low, 128, (33, 64), dtype=self_dtype, generator=g)
    b = torch.randint(-128, 128, (64, 17), dtype=torch.int8, generator=g)
    got = torch._int_mm(a.to(NAME), b.to(NAME))
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), torch._int_mm(a, b))
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="_int_mm: Expected mat2 dtype to be of type int8"):
        torch._int_mm(a.to(NAME), b.to(torch.uint8).to(NAME))
    with pytest.raises(RuntimeError, match="_int_mm: self.size\\(1\\) needs to match"):
        torch._int_mm(a.to(NAME), b[:5].to(NAME))


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64,
                                   torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_random_without_bounds_draws_the_dtypes_range(dtype):
    """random_() and random_(from, None) went to the CPU fallback (and the
    second was refused): [0, max] for integers, [0, 2^digits] for floats,
    as torch's CPU kernel draws."""
    top = {torch.bool: 1, torch.uint8: 255, torch.int8: 127, torch.int32: 2 ** 31 - 1,
           torch.int64: 2 ** 63 - 1, torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8,
           torch.float32: 2 ** 24, torch.float64: 2 ** 53}[dtype]
    torch.manual_seed(0)
    drawn = torch.empty(4096, dtype=dtype, device=NAME).random_().cpu()
    values = drawn.double()
    assert values.min() >= 0 and values.max() <= top and torch.equal(values, values.round())
    assert values.unique().numel() > (1 if dtype == torch.bool else 100)
    assert values.max() > top / 2  # the upper half of the range is reached
    if dtype != torch.bool:
        low = -3 if dtype.is_signed or dtype.is_floating_point else 2
        ranged = torch.empty(4096, dtype=dtype, device=NAME).random_(low, None).cpu().double()
        assert ranged.min() >= low and ranged.max() <= top and ranged.max() > top / 2
    assert torch_pjrt.metrics()["fallback_ops"] == {}


_OUT_DTYPE = {
    "mm": lambda a, b, c: torch.mm(a, b, out_dtype=torch.float32),
    "bmm": lambda a, b, c: torch.bmm(a[None], b[None], out_dtype=torch.float32)[0],
    "addmm": lambda a, b, c: torch.addmm(c, a, b, out_dtype=torch.float32, beta=0.5, alpha=2),
    "baddbmm": lambda a, b, c: torch.baddbmm(c[None], a[None], b[None], out_dtype=torch.float32,
                                             beta=0.5, alpha=2)[0],
}


@pytest.mark.parametrize("case", sorted(_OUT_DTYPE))
def test_products_with_out_dtype_accumulate_in_float32(case):
    """torch.mm(..., out_dtype=torch.float32) on bfloat16 inputs: CUDA-only
    in torch (the CPU fails too); float32 results of the exact products."""
    g = torch.Generator().manual_seed(9)
    a = torch.randn(5, 7, generator=g).bfloat16()
    b = torch.randn(7, 3, generator=g).bfloat16()
    c = torch.randn(5, 3, generator=g)
    product = a.float() @ b.float()
    expected = product if case in ("mm", "bmm") else 0.5 * c + 2 * product
    fn = _OUT_DTYPE[case]
    got = fn(a.to(NAME), b.to(NAME), c.to(NAME))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-6, atol=1e-6)
    compiled = torch.compile(fn, backend="tpu")(a.to(NAME), b.to(NAME), c.to(NAME))
    torch.testing.assert_close(compiled.cpu(), expected, rtol=1e-6, atol=1e-6)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="out_dtype must be the same as input dtype or fp32"):
        torch.mm(a.to(NAME), b.to(NAME), out_dtype=torch.float16)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_with_a_python_number(right):
    """torch.searchsorted(boundaries, 0.5): the Scalar overload went to the
    CPU fallback. Values on, between and outside float32 boundaries."""
    boundaries = torch.tensor([0.1, 0.2, 0.3, 0.7])
    for value in (0.1, 0.15, 0.2, 0.7, 1.0, -1.0, 0.30000001):
        expected = torch.searchsorted(boundaries, value, right=right)
        got = torch.searchsorted(boundaries.to(NAME), value, right=right)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert torch.equal(got.cpu(), expected), value
    ints = torch.tensor([1, 3, 5])
    got = torch.searchsorted(ints.to(NAME), 3, right=right, out_int32=True)
    assert got.dtype == torch.int32
    assert torch.equal(got.cpu(), torch.searchsorted(ints, 3, right=right, out_int32=True))
    assert torch_pjrt.metrics()["fallback_ops"] == {}
