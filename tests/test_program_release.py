"""Programs released near the kernel's mapping limit (csrc/eager/
mapping_budget.cc, program_cache.cc): every executable the CPU plugin
compiles keeps its code in mappings of its own, and a process that keeps
thousands of them reaches vm.max_map_count, after which a compile fails
inside the plugin and the process dies. Near the limit the least recently
used programs' executables are dropped; a dropped program compiles again
(or loads from the disk cache) when it next runs, and gives the same
results."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_pjrt
from torch_pjrt import _C

TPU = "tpu"


@pytest.fixture
def low_limit():
    # A limit the process is always past: every compile releases the least
    # recently used half of the programs holding an executable, this test's
    # own included once the older ones are gone.
    _C._set_mapping_limit(1)
    try:
        yield
    finally:
        _C._set_mapping_limit(0)


def _distinct_programs(count: int, offset: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # One new shape each: new programs for randn's copy, mul, add and tanh.
    pairs = []
    for i in range(count):
        x = torch.randn(offset + i, 3, generator=torch.Generator().manual_seed(i))
        pairs.append((x, (x * 1.5 + 0.25).tanh()))
    return pairs


def test_the_limit_is_the_kernels():
    text = Path("/proc/sys/vm/max_map_count").read_text().strip()
    assert _C._mapping_limit() == int(text)
    assert 0 < _C._process_mappings() < _C._mapping_limit()


def test_released_executables_give_their_mappings_back():
    for x, expected in _distinct_programs(24, 301):
        torch.testing.assert_close(((x.to(TPU) * 1.5 + 0.25).tanh()).cpu(), expected)
    before = _C._process_mappings()
    torch_pjrt.reset_metrics()
    released = _C._release_least_recent_programs()
    assert released > 0
    assert torch_pjrt.metrics()["programs_released"] == released
    assert _C._process_mappings() < before


def test_programs_are_released_near_the_limit_and_run_again_correctly(low_limit):
    torch_pjrt.reset_metrics()
    pairs = _distinct_programs(12, 401)
    for x, expected in pairs:
        torch.testing.assert_close(((x.to(TPU) * 1.5 + 0.25).tanh()).cpu(), expected)
    m = torch_pjrt.metrics()
    assert m["programs_released"] > 0
    compiled = m["compilations"] + m["cache_hits_disk"]
    # The first shapes' programs were released: running them again compiles
    # (or loads) them again, and their results still match the CPU's.
    for x, expected in pairs[:3]:
        torch.testing.assert_close(((x.to(TPU) * 1.5 + 0.25).tanh()).cpu(), expected)
    m = torch_pjrt.metrics()
    assert m["compilations"] + m["cache_hits_disk"] > compiled


def test_release_while_work_is_in_flight(low_limit):
    # Launches queue without a sync; new programs compiled meanwhile release
    # the older ones, whose runs must still finish with the right data.
    torch.manual_seed(0)
    xs = [torch.randn(64, 33 + i) for i in range(8)]
    outs = []
    for x in xs:
        d = x.to(TPU)
        for _ in range(3):
            d = torch.nn.functional.gelu(d @ d.T[:, : d.shape[1]]) / 8
        outs.append(d)
    expected = []
    for x in xs:
        c = x
        for _ in range(3):
            c = torch.nn.functional.gelu(c @ c.T[:, : c.shape[1]]) / 8
        expected.append(c)
    assert torch_pjrt.metrics()["programs_released"] > 0
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


def test_training_under_the_limit_matches_cpu(low_limit):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(), torch.nn.Linear(13, 3))
    dev = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(), torch.nn.Linear(13, 3))
    dev.load_state_dict(cpu.state_dict())
    dev.to(TPU)
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=0.01)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=0.01)
    torch_pjrt.reset_metrics()
    for step in range(4):
        x = torch.randn(5 + step, 7)
        y = torch.randn(5 + step, 3)
        for model, opt, dv in ((cpu, opt_c, "cpu"), (dev, opt_d, TPU)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(dv)), y.to(dv))
            loss.backward()
            opt.step()
    assert torch_pjrt.metrics()["programs_released"] > 0
    for a, b in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_fused_graphs_are_released_near_the_limit_and_run_again_correctly(low_limit):
    # Fused eager compiles one program per graph; each new shape is a new
    # graph. Near the limit the least recently launched graphs are released
    # too, and a released graph seen again compiles (or loads) again. Every
    # compile releases half of the graphs held, the oldest first: 20 compiles
    # leave none of the earlier tests' graphs (compiled torch.compile steps
    # are such graphs too) and only the last few of these.
    pairs = _distinct_programs(20, 501)
    with torch_pjrt.eager_mode("fused"):
        for x, expected in pairs:
            torch.testing.assert_close(((x.to(TPU) * 1.5 + 0.25).tanh()).cpu(), expected)
        torch_pjrt.reset_metrics()
        for x, expected in pairs[4:]:
            torch.testing.assert_close(((x.to(TPU) * 1.5 + 0.25).tanh()).cpu(), expected)
        m = torch_pjrt.metrics()
        assert m["programs_released"] > 0
        assert m["compilations"] + m["cache_hits_disk"] > 0
