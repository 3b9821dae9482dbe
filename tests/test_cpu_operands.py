"""CPU tensors beside tpu tensors are accepted where CUDA accepts them (index
tensors of advanced indexing and index_put, 0-dim tensors as numbers) and
refused where CUDA refuses them, with the same error type. Moving a module
between CPU and tpu keeps its Parameter objects, so tied weights stay tied,
without changing torch's semantics for other devices."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import torch_pjrt

NAME = torch_pjrt.settings().device_name


def on_both(fn):
    """fn(device, cpu_or_device) run with the CPU, and with tpu tensors plus
    CPU operands; results compared exactly."""
    torch_pjrt.reset_metrics()
    want = fn("cpu")
    got = fn(NAME)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


X = torch.arange(24.0).reshape(4, 6)


@pytest.mark.parametrize("index", [
    torch.tensor([0, 2, 3]),
    torch.tensor([[1], [3]]),
    torch.tensor([-1, 0]),
    torch.tensor(2),
    torch.tensor([True, False, True, True]),
], ids=["long", "2d", "negative", "0d", "bool"])
def test_advanced_indexing_with_a_cpu_index(index):
    on_both(lambda d: X.to(d)[index])
    on_both(lambda d: X.to(d)[:, index.clamp(max=5) if index.dtype != torch.bool else slice(None)])


def test_index_put_with_cpu_indices():
    rows, cols = torch.tensor([0, 3]), torch.tensor([5, 1])

    def put(d):
        x = X.to(d).clone()
        x[rows, cols] = torch.tensor([7.0, 8.0], device=d)
        x[torch.tensor([False, True, False, False])] = 1.5
        x.index_put_((rows,), torch.tensor(-1.0), accumulate=True)
        return x
    on_both(put)


def test_zero_dim_cpu_tensors_are_numbers():
    s = torch.tensor(2.5)
    on_both(lambda d: X.to(d) * s + torch.tensor(1))
    on_both(lambda d: torch.where(X.to(d) > 10, s, X.to(d)))
    on_both(lambda d: X.to(d).clamp(min=torch.tensor(3.0), max=torch.tensor(20.0)))
    on_both(lambda d: X.to(d).masked_fill(X.to(d) > 5, torch.tensor(0.0)))
    on_both(lambda d: torch.pow(X.to(d), torch.tensor(2)))


def test_a_cpu_operand_with_dimensions_is_refused_as_cuda_refuses_it():
    with pytest.raises(RuntimeError, match="same device"):
        X.to(NAME) + torch.ones(6)
    with pytest.raises(RuntimeError, match="same device"):
        X.to(NAME).index_select(0, torch.tensor([0]))
    with pytest.raises(RuntimeError, match="same device"):
        x = X.to(NAME).clone()
        x[torch.tensor([0])] = torch.ones(1, 6)  # values on the CPU with dimensions


def test_moving_a_module_keeps_parameter_objects_and_ties():
    assert torch.__future__.get_swap_module_params_on_conversion() is False
    cpu = torch.zeros(2)
    assert torch._has_compatible_shallow_copy_type(cpu, cpu.to(NAME))
    assert torch._has_compatible_shallow_copy_type(cpu.to(NAME), cpu)

    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, head)
    weight = emb.weight
    model.to(NAME)
    assert emb.weight is weight and head.weight is weight and weight.device.type == NAME
    assert len(list(model.parameters())) == 1
    model(torch.tensor([1, 2], device=NAME)).sum().backward()
    assert weight.grad.device.type == NAME
    model.cpu()
    assert head.weight is weight and weight.device.type == "cpu" and weight.grad.device.type == "cpu"

    # The same module moved while an autograd graph holds its weights: the
    # swap rule refused this; set_data (as for CUDA) does not.
    lin = nn.Linear(3, 3)
    out = lin(torch.randn(2, 3))
    lin.to(NAME)
    assert lin.weight.device.type == NAME
    del out
