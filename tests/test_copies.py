"""Copies between host and device, between devices, with dtype changes and
through views; .item(), printing, torch.save/torch.load."""

from __future__ import annotations

import io

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name

DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_every_dtype(dtype):
    host = (torch.arange(-5, 7, dtype=torch.float64).reshape(3, 4) * 1.5).to(dtype)
    dev = host.to(NAME)
    assert dev.dtype == dtype and dev.shape == host.shape
    assert torch.equal(dev.cpu(), host)


@pytest.mark.parametrize("non_blocking", [False, True])
def test_non_blocking_copies_are_correct_after_synchronize(non_blocking):
    host = torch.randn(256, 256)
    dev = host.to(NAME, non_blocking=non_blocking)
    back = dev.to("cpu", non_blocking=non_blocking)
    getattr(torch, NAME).synchronize()
    assert torch.equal(back, host)


def test_blocking_copy_takes_the_data_at_call_time():
    host = torch.ones(1000)
    dev = host.to(NAME)
    host.fill_(5)  # changing the source afterwards must not reach the device
    assert dev.cpu().eq(1).all()


@pytest.mark.parametrize("src, dst", [(torch.float32, torch.int64), (torch.int32, torch.bfloat16),
                                      (torch.float64, torch.float16), (torch.int64, torch.bool)])
def test_dtype_change_during_copy(src, dst):
    host = torch.tensor([[-2.7, 0.0, 3.2], [1.0, 255.5, -0.4]]).to(src)
    on_device = host.to(NAME)
    assert torch.equal(on_device.to(dst).cpu(), host.to(dst))  # on the device
    assert torch.equal(host.to(NAME, dst).cpu(), host.to(dst))  # during upload
    out = torch.empty(2, 3, dtype=dst)
    out.copy_(on_device)  # during download
    assert torch.equal(out, host.to(dst))


def test_copies_into_and_out_of_views():
    base = torch.zeros(4, 6, device=NAME)
    base[:, ::2] = torch.arange(12.0).reshape(4, 3)  # host -> strided device view
    base.t()[1:3] = torch.ones(2, 4, device=NAME)  # device -> transposed view
    expected = torch.zeros(4, 6)
    expected[:, ::2] = torch.arange(12.0).reshape(4, 3)
    expected.t()[1:3] = 1
    assert torch.equal(base.cpu(), expected)
    host_view = torch.zeros(6, 4).t()
    host_view.copy_(base)  # device -> non-contiguous host tensor
    assert torch.equal(host_view, expected)
    row = torch.empty(6)
    row.copy_(base[2])  # an offset device view -> host
    assert torch.equal(row, expected[2])


def test_conjugate_and_negative_views_copy_resolved():
    # x.conj() and x.conj().imag only flag the change; every copy must apply
    # it (it once recursed without end through torch's conjugate fallback).
    host = torch.randn(3, 4, dtype=torch.complex64)
    dev = host.to(NAME)
    cases = [lambda t: t.conj(), lambda t: t.conj().imag, lambda t: t.conj()[1:, ::2]]
    for view in cases:
        want = view(host).resolve_conj().resolve_neg()
        assert torch.equal(view(dev).cpu(), want)
        into = torch.zeros_like(want)
        into.copy_(view(dev))
        assert torch.equal(into, want)
        assert torch.equal(view(dev).to(NAME).clone().cpu(), want)  # device to device
    assert torch.equal(host.conj().to(NAME).cpu(), host.conj().resolve_conj())  # host to device


def test_copy_into_dense_and_strided_host_tensors():
    dev = torch.arange(24.0).reshape(4, 6).to(NAME)
    dense = torch.empty(4, 6)
    assert dense.copy_(dev) is dense and torch.equal(dense, torch.arange(24.0).reshape(4, 6))
    strided = torch.zeros(6, 4).t()  # not contiguous: goes through a host temporary
    strided.copy_(dev)
    assert torch.equal(strided, torch.arange(24.0).reshape(4, 6))
    other_dtype = torch.empty(4, 6, dtype=torch.float64)
    other_dtype.copy_(dev)
    assert torch.equal(other_dtype, torch.arange(24.0, dtype=torch.float64).reshape(4, 6))


def test_broadcasting_copy():
    dst = torch.zeros(3, 4, device=NAME)
    dst.copy_(torch.arange(4.0, device=NAME))
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(3, 4))
    with pytest.raises(RuntimeError):
        dst.copy_(torch.ones(5, device=NAME))


def test_two_devices(python_in_subprocess):
    result = python_in_subprocess(
        f"""
        import torch, torch_pjrt
        a = torch.arange(6.0).reshape(2, 3).to("{NAME}:0")
        b = a.to("{NAME}:1")
        assert b.device == torch.device("{NAME}", 1), b.device
        c = (b * 2).to("{NAME}:0", torch.int32)
        assert c.device.index == 0
        print(c.cpu().tolist(), (b + 1).device)
        try:
            a + b
        except RuntimeError as e:
            print("mixed:", "same device" in str(e))
        """,
        {"TORCH_PJRT_CPU_DEVICES": "2"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"[[0, 2, 4], [6, 8, 10]] {NAME}:1"
    assert lines[1] == "mixed: True"


def test_item_and_print():
    t = torch.tensor([[1.5, -2.0], [3.0, 4.25]], device=NAME)
    assert t[1, 1].item() == 4.25
    assert t.sum().item() == pytest.approx(6.75)
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        t.item()
    text = repr(t)
    assert "4.2500" in text and f"device='{NAME}:0'" in text


def test_save_and_load_with_map_location(tmp_path):
    t = torch.randn(3, 5).to(NAME)
    path = tmp_path / "t.pt"
    torch.save({"t": t, "view": t[1:]}, path)
    loaded = torch.load(path, map_location=NAME)
    assert loaded["t"].device.type == NAME
    assert torch.equal(loaded["t"].cpu(), t.cpu())
    assert torch.equal(loaded["view"].cpu(), t[1:].cpu())
    to_cpu = torch.load(path, map_location="cpu")
    assert to_cpu["t"].device.type == "cpu" and torch.equal(to_cpu["t"], t.cpu())
    buffer = io.BytesIO()
    torch.save(torch.arange(4).cpu(), buffer)
    buffer.seek(0)
    assert torch.load(buffer, map_location=NAME).device.type == NAME


def test_pinned_memory_is_pinned_and_uploads_without_blocking():
    host = torch.randn(256, 64)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned[10:].is_pinned() and not host.is_pinned()
    torch.testing.assert_close(pinned, host)
    # The source is dropped at once: the copy keeps what it reads alive.
    d = host.clone().pin_memory().to(NAME, non_blocking=True)
    e = pinned[3:7].to(NAME, non_blocking=True)  # a view of pinned memory
    getattr(torch, NAME).synchronize()
    torch.testing.assert_close(d.cpu(), host)
    torch.testing.assert_close(e.cpu(), host[3:7])


def test_dataloader_pin_memory_feeds_a_training_loop():
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g),
                                          torch.randn(64, 1, generator=g))

    def train(device: str, pin: bool) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for x, y in torch.utils.data.DataLoader(data, batch_size=16, pin_memory=pin):
            if pin:
                assert x.is_pinned() and y.is_pinned()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    torch.testing.assert_close(train(NAME, True), train("cpu", False), rtol=1e-5, atol=1e-6)
