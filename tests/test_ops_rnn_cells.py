"""Recurrent layers on tpu: nn.LSTM, nn.GRU and their cells call the fused
cell ops (_thnn_fused_lstm_cell, _thnn_fused_gru_cell) on every device but
the CPU, and torch has only CUDA kernels for them, so these layers did not
run at all. Outputs, hidden states and gradients (of the input and every
parameter) are compared with CPU PyTorch; CPU fallbacks are read from
metrics()."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name

_LAYERS = {
    "lstm": (torch.nn.LSTM, {}),
    "lstm_2_layers_bidirectional": (torch.nn.LSTM, dict(num_layers=2, bidirectional=True)),
    "lstm_no_bias_batch_first": (torch.nn.LSTM, dict(bias=False, batch_first=True)),
    "lstm_projection": (torch.nn.LSTM, dict(proj_size=5)),
    "gru": (torch.nn.GRU, {}),
    "gru_2_layers_bidirectional": (torch.nn.GRU, dict(num_layers=2, bidirectional=True,
                                                      batch_first=True)),
    "gru_no_bias": (torch.nn.GRU, dict(bias=False)),
    "lstm_cell": (torch.nn.LSTMCell, {}),
    "gru_cell": (torch.nn.GRUCell, {}),
}


def _tensors(out) -> list[torch.Tensor]:
    items = out if isinstance(out, tuple) else (out,)
    flat: list[torch.Tensor] = []
    for item in items:
        flat.extend(item if isinstance(item, tuple) else (item,))
    return flat


def _pair(cls, kwargs, dtype):
    torch.manual_seed(0)
    cpu = cls(6, 10, **kwargs).to(dtype)
    dev = cls(6, 10, **kwargs).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to(NAME)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", sorted(_LAYERS))
def test_recurrent_layer_matches_cpu_with_gradients(case, dtype):
    cls, kwargs = _LAYERS[case]
    cpu, dev = _pair(cls, kwargs, dtype)
    shape = (4, 6) if cls in (torch.nn.LSTMCell, torch.nn.GRUCell) else (5, 3, 6)
    x = torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
    xc, xd = x.clone().requires_grad_(), x.to(NAME).requires_grad_()
    torch_pjrt.reset_metrics()
    expected, got = _tensors(cpu(xc)), _tensors(dev(xd))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        assert g.device.type == NAME
        torch.testing.assert_close(g.detach().cpu(), e.detach(), **tol)
    # Every output feeds the loss: the cell state's gradient path too.
    sum((t * (k + 1)).square().sum() for k, t in enumerate(expected)).backward()
    sum((t * (k + 1)).square().sum() for k, t in enumerate(got)).backward()
    grad_tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else tol
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **grad_tol)
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, **grad_tol, msg=name)
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_initial_states_and_bfloat16():
    torch.manual_seed(2)
    cpu = torch.nn.LSTM(6, 8, num_layers=2).to(torch.bfloat16)
    dev = torch.nn.LSTM(6, 8, num_layers=2).to(torch.bfloat16)
    dev.load_state_dict(cpu.state_dict())
    dev.to(NAME)
    x = torch.randn(4, 2, 6).to(torch.bfloat16)
    h0, c0 = torch.randn(2, 2, 8).to(torch.bfloat16), torch.randn(2, 2, 8).to(torch.bfloat16)
    expected = _tensors(cpu(x, (h0, c0)))
    got = _tensors(dev(x.to(NAME), (h0.to(NAME), c0.to(NAME))))
    for e, g in zip(expected, got):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.cpu().float(), e.float(), rtol=2e-2, atol=2e-2)


def test_cells_in_a_compiled_loop_are_one_forward_and_one_backward_program():
    def unroll(cell, xs):
        state = None
        outs = []
        for t in range(xs.shape[0]):
            state = cell(xs[t], state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        return torch.stack(outs).square().sum()

    for cls in (torch.nn.LSTMCell, torch.nn.GRUCell):
        torch._dynamo.reset()
        torch_pjrt.reset_compile_report()
        cpu, dev = _pair(cls, {}, torch.float32)
        xs = torch.randn(4, 3, 6, generator=torch.Generator().manual_seed(3))
        expected = unroll(cpu, xs)
        expected.backward()
        got = torch.compile(unroll, backend="tpu")(dev, xs.to(NAME))
        got.backward()
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-5)
        for p, q in zip(cpu.parameters(), dev.parameters()):
            torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)
        report = torch_pjrt.compile_report()
        assert sorted(g["kind"] for g in report) == ["backward", "forward"]
        assert all(g["regions"] == 1 and g["eager_ops"] == {} for g in report), report
    torch._dynamo.reset()


def test_mismatched_gates_raise_a_runtime_error_naming_the_op():
    gates = torch.randn(3, 12, device=NAME)
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell: the gates"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.randn(3, 4, device=NAME))
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell: input_gates and hidden_gates"):
        torch.ops.aten._thnn_fused_gru_cell(gates, gates[:, :6], torch.randn(3, 4, device=NAME))
    # The device is usable afterwards.
    assert torch.ops.aten._thnn_fused_gru_cell(gates, gates, torch.zeros(3, 4, device=NAME))[0].shape == (3, 4)
