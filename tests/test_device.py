"""The tpu device as PyTorch code sees it: registration, the torch.tpu
module, generators, memory statistics, streams and events."""

from __future__ import annotations

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name
mod = getattr(torch, NAME)


def test_device_and_tensor_methods():
    t = torch.arange(4.0).to(NAME)
    assert t.device == torch.device(NAME, 0)
    assert getattr(t, f"is_{NAME}")
    assert getattr(torch.ones(2), NAME)().device.type == NAME
    module = torch.nn.Linear(3, 2)
    getattr(module, NAME)()
    assert module.weight.device.type == NAME
    storage = torch.ones(3).untyped_storage()
    assert getattr(getattr(storage, NAME)(), f"is_{NAME}")


def test_device_module_basics():
    assert mod.is_available()
    assert mod.device_count() >= 1
    assert mod.current_device() == 0
    with mod.device(0):
        assert mod.current_device() == 0
    mod.set_device(0)
    mod.synchronize()
    props = mod.get_device_properties(0)
    assert props.platform == "cpu"
    assert props.pjrt_api_version.startswith("0.")
    assert props.plugin.endswith(".so")
    assert mod.get_device_name() == props.name
    assert mod.is_bf16_supported()
    assert torch.bfloat16 in mod.get_amp_supported_dtype()


def test_bad_device_index_is_runtime_error():
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ones(2, device=f"{NAME}:7")
    with pytest.raises(RuntimeError, match="invalid device index"):
        mod.set_device(9)


def test_seeds_and_rng_state_round_trip():
    mod.manual_seed(1234)
    assert mod.initial_seed() == 1234
    state = mod.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    mod.manual_seed(99)
    mod.set_rng_state(state)
    assert mod.initial_seed() == 1234
    mod.manual_seed_all(7)
    assert mod.initial_seed() == 7
    mod.seed()
    assert mod.initial_seed() != 7 or True  # a fresh random seed; any value is valid
    torch.manual_seed(5)  # torch.manual_seed reaches the device generators too
    assert mod.initial_seed() == 5
    g = torch.Generator(NAME)
    g.manual_seed(3)
    assert g.initial_seed() == 3 and g.device.type == NAME
    with pytest.raises(RuntimeError, match="16 bytes"):
        mod.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_memory_statistics_follow_allocations():
    mod.synchronize()
    before = mod.memory_allocated()
    mod.reset_peak_memory_stats()
    t = torch.empty(1000, 1000, device=NAME)
    assert mod.memory_allocated() == before + 4_000_000
    assert mod.max_memory_allocated() >= before + 4_000_000
    del t
    assert mod.memory_allocated() == before
    assert mod.max_memory_allocated() >= before + 4_000_000
    mod.reset_peak_memory_stats()
    assert mod.max_memory_allocated() == before
    assert mod.memory_stats()["allocated_bytes.all.current"] == before


def test_streams_and_events_order_work():
    x = torch.randn(64, 64).to(NAME)
    start = mod.Event(enable_timing=True)
    end = mod.Event(enable_timing=True)
    stream = mod.current_stream()
    start.record(stream)
    y = x @ x
    end.record(stream)
    end.synchronize()
    stream.synchronize()
    assert end.query() and stream.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    with mod.stream(mod.Stream()):
        z = y + 1
    torch.testing.assert_close(z.cpu(), x.cpu() @ x.cpu() + 1, rtol=1e-4, atol=1e-4)


def test_import_leaves_dynamo_and_inductor_unloaded(python_in_subprocess):
    """`import torch_pjrt` registers the device without importing Dynamo
    or inductor (about a second); the kernels API and torch.compile import
    them when first used, and then still work."""
    proc = python_in_subprocess("""
        import sys
        import torch, torch_pjrt
        print(sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules))
        from torch_pjrt.kernels._custom_op import platform
        print(platform(), "torch._dynamo" in sys.modules)
        f = torch.compile(lambda x: x * 2 + 1, backend="tpu")
        print(f(torch.ones(2, device="tpu")).cpu().tolist())
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "[]"
    assert lines[1].endswith(" True")  # the platform read ran with Dynamo disabled around it
    assert lines[2] == "[3.0, 3.0]"


def test_torch_stream_side_streams_and_record_stream():
    """torch.Stream(device="tpu") and torch.accelerator's stream calls, as
    prefetching and sharding code use them (creating a stream raised
    "Backend doesn't support create a new Stream"); record_stream ran no
    kernel. Every stream of a device covers the device's one ordering: a
    query or synchronize on any of them waits for all launched work."""
    side = torch.Stream(device=NAME)
    default = torch.accelerator.current_stream()
    assert side.device.type == NAME and side.stream_id != default.stream_id
    assert torch.Stream(device=NAME).stream_id not in (side.stream_id, default.stream_id)
    x = torch.randn(128, 128).to(NAME)
    with side:
        assert torch.accelerator.current_stream().stream_id == side.stream_id
        y = x @ x
        y.record_stream(side)
    assert torch.accelerator.current_stream().stream_id == default.stream_id
    default.wait_event(side.record_event())
    default.wait_stream(side)
    side.synchronize()
    assert side.query() and default.query()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="record_stream: expected a tpu tensor and a tpu stream"):
        y.record_stream(torch.Stream(device="cpu"))
