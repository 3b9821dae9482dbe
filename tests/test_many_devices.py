"""N devices in one process (TORCH_PJRT_CPU_DEVICES=2): what a CUDA user
expects of cuda:0 and cuda:1 — device-to-device copies with no host round
trip, the device guard and torch.tpu.device(...), per-device memory
statistics, streams and random generators per device. Runs in a fresh
process, since the device count is read once."""

from __future__ import annotations

from conftest import run_python


def run_two(code: str) -> str:
    proc = run_python(code, env={"TORCH_PJRT_CPU_DEVICES": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_copies_between_devices_stay_on_the_devices():
    out = run_two("""
        import torch, torch_pjrt
        x = torch.randn(64, 32)
        a = x.to("tpu:0")
        torch_pjrt.reset_metrics()
        b = a.to("tpu:1")
        c = a.to("tpu:1", dtype=torch.bfloat16)      # cast on the way
        view = a[::2, 1:5].to("tpu:1")               # a view, read first on tpu:0
        m = torch_pjrt.metrics()
        # No data through the host; a view program's 8-byte offset argument is all.
        assert m["host_to_device_bytes"] <= 16 and m["device_to_host_bytes"] == 0, m
        assert m["device_to_device_bytes"] >= x.nbytes, m
        assert b.device == torch.device("tpu", 1) and c.device == torch.device("tpu", 1)
        torch.testing.assert_close(b.cpu(), x, rtol=0, atol=0)
        torch.testing.assert_close(c.cpu(), x.to(torch.bfloat16), rtol=0, atol=0)
        torch.testing.assert_close(view.cpu(), x[::2, 1:5], rtol=0, atol=0)
        y = torch.empty(64, 32, device="tpu:1")
        y.copy_(a)                                    # copy_ across devices
        torch.testing.assert_close(y.cpu(), x, rtol=0, atol=0)
        try:
            a + b
        except RuntimeError as e:
            assert "same device" in str(e)
        else:
            raise AssertionError("an op mixing devices must raise")
        print("ok")
    """)
    assert out.strip() == "ok"


def test_device_guard_set_device_and_context():
    out = run_two("""
        import torch, torch_pjrt
        assert torch.tpu.device_count() == 2 and torch.tpu.current_device() == 0
        with torch.tpu.device(1):
            assert torch.tpu.current_device() == 1
            assert torch.empty(3, device="tpu").device == torch.device("tpu", 1)
            assert torch.ones(2, device="tpu").sum().device.index == 1
        assert torch.tpu.current_device() == 0
        torch.tpu.set_device("tpu:1")
        assert torch.zeros(1, device="tpu").device.index == 1
        assert torch.accelerator.current_device_index() == 1
        t = torch.ones(1, device="tpu:0")
        with torch.tpu.device_of(t):
            assert torch.tpu.current_device() == 0
        try:
            torch.tpu.set_device(2)
        except RuntimeError as e:
            assert "invalid device index 2" in str(e)
        else:
            raise AssertionError("set_device(2) with two devices must raise")
        print("ok")
    """)
    assert out.strip() == "ok"


def test_memory_statistics_are_per_device():
    out = run_two("""
        import torch, torch_pjrt
        base = [torch.tpu.memory_allocated(i) for i in range(2)]
        a = torch.ones(1000, device="tpu:1")
        assert torch.tpu.memory_allocated(0) == base[0]
        assert torch.tpu.memory_allocated(1) == base[1] + 4000
        torch.tpu.reset_peak_memory_stats(1)
        b = torch.ones(2000, device="tpu:1"); del b
        assert torch.tpu.max_memory_allocated(1) >= base[1] + 12000
        assert torch.tpu.max_memory_allocated(0) < 12000
        assert torch.tpu.memory_stats(1)["allocated_bytes.all.current"] == base[1] + 4000
        print("ok")
    """)
    assert out.strip() == "ok"


def test_streams_and_generators_per_device():
    out = run_two("""
        import torch, torch_pjrt
        s = torch.tpu.Stream(device=1)
        assert s.device == torch.device("tpu", 1)
        with torch.tpu.stream(s):
            assert torch.tpu.current_stream(1) is s and torch.tpu.current_device() == 1
            assert torch.ones(1, device="tpu").device.index == 1
        assert torch.tpu.current_device() == 0 and torch.tpu.current_stream(1) is not s
        e = s.record_event(); e.synchronize()
        # Each device has its own generator, seeded alike by manual_seed_all,
        # advanced independently.
        torch.tpu.manual_seed_all(7)
        a0 = torch.rand(4, device="tpu:0").cpu()
        b0 = torch.rand(4, device="tpu:0").cpu()
        a1 = torch.rand(4, device="tpu:1").cpu()
        assert torch.equal(a0, a1) and not torch.equal(a0, b0)
        state1 = torch.tpu.get_rng_state(1)
        x = torch.rand(4, device="tpu:1").cpu()
        torch.tpu.set_rng_state(state1, 1)
        assert torch.equal(torch.rand(4, device="tpu:1").cpu(), x)
        torch.tpu.manual_seed(3)   # only the current device
        assert torch.tpu.initial_seed() == 3
        with torch.tpu.device(1):
            assert torch.tpu.initial_seed() == 7
        print("ok")
    """)
    assert out.strip() == "ok"
