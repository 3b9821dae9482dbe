"""The tpu backend's graphs in AOTAutograd's cache: a second process (or a
second compile after `torch._dynamo.reset()`) loads the graphs AOTAutograd
made instead of tracing them again, and computes what the first did.
Counters come from torch's `counters["aot_autograd"]` and from
torch_pjrt.metrics(); results are compared with CPU PyTorch."""

from __future__ import annotations

import json

import pytest
import torch
from torch._dynamo.utils import counters

import torch_pjrt

NAME = torch_pjrt.settings().device_name


@pytest.fixture(autouse=True)
def fresh_dynamo(tmp_path, monkeypatch):
    # An empty cache per test: earlier tests in this process may have
    # stored the same graphs.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    counters.clear()
    torch_pjrt.reset_compile_report()
    yield
    torch._dynamo.reset()


def aot(key: str) -> int:
    return counters["aot_autograd"][key]


def twice(fn, *args, **compile_kwargs):
    """Compiles and runs fn, forgets Dynamo's state, compiles and runs again."""
    first = torch.compile(fn, backend="tpu", **compile_kwargs)(*args)
    saved = aot("autograd_cache_saved")
    torch._dynamo.reset()
    second = torch.compile(fn, backend="tpu", **compile_kwargs)(*args)
    return first, second, saved


def test_an_inference_graph_is_stored_and_loaded_back():
    # The tensor made on the device inside the function is a constant of
    # the graph: it is stored as host bytes and put back on the device.
    def fn(x, w):
        scale = torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
        return torch.relu(x @ w).softmax(dim=-1) * scale - 1

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    first, second, saved = twice(fn, x.to(NAME), w.to(NAME))
    assert saved == 1 and aot("autograd_cache_hit") == 1, dict(counters["aot_autograd"])
    torch.testing.assert_close(first.cpu(), fn(x, w), rtol=1e-5, atol=1e-5)
    assert torch.equal(second.cpu(), first.cpu())
    # Reports name the loaded graph as this process numbers it.
    names = [g["name"] for g in torch_pjrt.compile_report()]
    assert len(names) == 2 and len(set(names)) == 2, names


def test_a_training_graph_loads_forward_and_backward():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    x = torch.randn(8, 16)

    def loss_of(m, inp):
        return m(inp).square().mean()

    grads = []
    for attempt in range(2):
        dev = [p.detach().to(NAME).requires_grad_() for p in model.parameters()]
        tpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                        torch.nn.Linear(32, 1)).to(NAME)
        with torch.no_grad():
            for p, d in zip(tpu_model.parameters(), dev):
                p.copy_(d)
        if attempt:
            torch._dynamo.reset()
        compiled = torch.compile(tpu_model, backend="tpu")
        loss_of(compiled, x.to(NAME)).backward()
        grads.append([p.grad.cpu() for p in tpu_model.parameters()])
    assert aot("autograd_cache_saved") == 1 and aot("autograd_cache_hit") == 1
    loss_of(model, x).backward()
    for got, loaded, want in zip(grads[0], grads[1], [p.grad for p in model.parameters()]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert torch.equal(loaded, got)


def test_a_graph_with_an_op_left_to_eager_is_stored_whole():
    # linalg.eigvals has no lowering: the graph is partitioned around it,
    # and what is stored must still be the whole graph.
    def fn(x):
        return torch.linalg.eigvals(x.exp()).abs() * 2 + 1

    x = torch.randn(4, 4)
    first, second, saved = twice(fn, x.to(NAME))
    assert saved == 1 and aot("autograd_cache_hit") == 1
    torch.testing.assert_close(second.cpu(), fn(x), rtol=1e-4, atol=1e-5)
    for graph in torch_pjrt.compile_report():
        assert graph["eager_ops"] == {"aten::linalg_eig": 1} and graph["regions"] == 2, graph


def test_symbolic_shapes_are_stored_and_loaded_back():
    def fn(x):
        return (x * x.shape[0]).cumsum(dim=0) / 2

    xs = [torch.randn(5, 3), torch.randn(9, 3)]
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for x in xs:
        torch.testing.assert_close(compiled(x.to(NAME)).cpu(), fn(x), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for x in [*xs, torch.randn(7, 3)]:
        torch.testing.assert_close(compiled(x.to(NAME)).cpu(), fn(x), rtol=1e-5, atol=1e-5)
    assert aot("autograd_cache_saved") == 1 and aot("autograd_cache_hit") == 1


def test_a_changed_shape_or_package_identity_is_a_miss(monkeypatch):
    def fn(x, w):
        return (x @ w).tanh()

    x = torch.randn(4, 8)
    twice(fn, x.to(NAME), torch.randn(8, 3).to(NAME))
    assert aot("autograd_cache_hit") == 1
    torch._dynamo.reset()
    w = torch.randn(8, 5)  # another weight shape: another graph
    got = torch.compile(fn, backend="tpu")(x.to(NAME), w.to(NAME))
    torch.testing.assert_close(got.cpu(), fn(x, w), rtol=1e-5, atol=1e-5)
    assert aot("autograd_cache_hit") == 1 and aot("autograd_cache_miss") == 2
    # Stored graphs were decomposed for this package's lowering table: a
    # different torch_pjrt (another identity) must not load them.
    from torch_pjrt._compile import output_code

    monkeypatch.setattr(output_code, "_build_identity", "another-build")
    torch._dynamo.reset()
    got = torch.compile(fn, backend="tpu")(x.to(NAME), w.to(NAME))
    torch.testing.assert_close(got.cpu(), fn(x, w), rtol=1e-5, atol=1e-5)
    assert aot("autograd_cache_hit") == 1 and aot("autograd_cache_miss") == 3


def test_the_sdpa_kernel_mode_is_part_of_the_key():
    # The mode decides, while AOTAutograd traces, whether attention becomes
    # the flash kernel or the decomposition: a graph stored under one mode
    # must not be loaded under another.
    from torch_pjrt.kernels import sdpa

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    before = sdpa.get_mode()
    try:
        sdpa.set_mode("never")
        twice(fn, q.to(NAME), k.to(NAME), v.to(NAME))
        assert aot("autograd_cache_hit") == 1
        sdpa.set_mode("auto")
        torch._dynamo.reset()
        got = torch.compile(fn, backend="tpu")(q.to(NAME), k.to(NAME), v.to(NAME))
    finally:
        sdpa.set_mode(before)
    torch.testing.assert_close(got.cpu(), fn(q, k, v), rtol=1e-4, atol=1e-5)
    assert aot("autograd_cache_hit") == 1 and aot("autograd_cache_miss") == 2


def test_views_into_a_storage_are_stored_with_their_offsets(monkeypatch):
    # chunk and slices give values that start partway into their storage.
    def fn(x):
        a, b = x.chunk(2, dim=-1)
        return a[1:] * b[:-1] + x[1:, 3:5].sum(dim=-1, keepdim=True)

    import pickle

    from torch_pjrt._compile import output_code

    offsets = set()
    dump = output_code.dump_graph

    def spy(gm):
        data = dump(gm)
        offsets.update(r[-1][5] for r in pickle.loads(data)[2] if r[-1][0] == "t")
        return data

    monkeypatch.setattr(output_code, "dump_graph", spy)
    x = torch.randn(6, 8)
    first, second, saved = twice(fn, x.to(NAME))
    assert saved == 1 and aot("autograd_cache_hit") == 1, dict(counters["aot_autograd"])
    assert max(offsets) > 0, offsets  # values that start partway into their storage were stored
    torch.testing.assert_close(second.cpu(), fn(x), rtol=1e-5, atol=1e-5)


def test_a_graph_calling_a_kernel_op_is_traced_again_not_stored():
    # The key cannot cover a kernel's JAX function, so such graphs are not
    # stored (torch counts a bypass) and still compute the right values.
    jnp = pytest.importorskip("jax.numpy")
    op = torch_pjrt.jax_op("warmstart_test::cube", lambda x: jnp.power(x, 3))

    def fn(x):
        return op(x.sin()) + 1

    x = torch.randn(5)
    first, second, saved = twice(fn, x.to(NAME))
    assert saved == 0 and aot("autograd_cache_hit") == 0
    assert aot("autograd_cache_bypass") == 2, dict(counters["aot_autograd"])
    for got in (first, second):
        torch.testing.assert_close(got.cpu(), x.sin() ** 3 + 1, rtol=1e-5, atol=1e-5)


def cold_then_warm(script: str, tmp_path, python_in_subprocess) -> list[dict]:
    """Runs the script in two processes sharing inductor's and torch_pjrt's
    cache folders; returns the JSON each printed last."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_PJRT_CACHE_DIR": str(tmp_path / "programs")}
    runs = []
    for _ in range(2):
        proc = python_in_subprocess(script.format(name=NAME), env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


STEP_SCRIPT = """
import json, time, torch, torch_pjrt
from torch._dynamo.utils import counters
def build(dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 1)).to(dev)
    x = torch.randn(32, 64).to(dev); y = torch.randn(32, 1).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()
    return step, sched
def run(step, sched):
    out = []
    for _ in range(4):
        out.append(step().item()); sched.step()
    return out
cpu = run(*build("cpu"))
step, sched = build("{name}")
step = torch.compile(step, backend="tpu")
start = time.perf_counter()
step().item()
first = time.perf_counter() - start
# A second compile in the same process loads what the first stored; in the
# warm process both load. The CPU comparison below checks loaded graphs.
step, sched = build("{name}")
torch._dynamo.reset()
step = torch.compile(step, backend="tpu")
losses = run(step, sched)
m = torch_pjrt.metrics()
print(json.dumps(dict(cpu=cpu, losses=losses, first=first, aot=dict(counters["aot_autograd"]),
                      compiled=m["compilations"])))
"""


def test_a_second_process_loads_the_compiled_training_step(tmp_path, python_in_subprocess):
    """A compiled step with a float lr under a scheduler, clipping and AdamW:
    the second process traces with Dynamo but takes every AOTAutograd graph
    from the cache, compiles no program, and trains as the first did."""
    cold, warm = cold_then_warm(STEP_SCRIPT, tmp_path, python_in_subprocess)
    saved = cold["aot"].get("autograd_cache_saved", 0)
    # forward+backward, clipping, the optimizer's graphs: each stored once.
    assert saved >= 3 and cold["aot"].get("autograd_cache_miss") == saved, cold["aot"]
    assert warm["aot"].get("autograd_cache_hit", 0) == warm["aot"]["total"] > 0, warm["aot"]
    assert warm["aot"].get("autograd_cache_miss", 0) == 0, warm["aot"]
    assert warm["aot"].get("autograd_cache_bypass", 0) == 0, warm["aot"]
    assert warm["compiled"] == 0, warm
    assert warm["losses"] == cold["losses"]
    torch.testing.assert_close(cold["losses"], cold["cpu"], rtol=1e-4, atol=1e-5)
    print(f"first step cold {cold['first']:.2f}s, warm {warm['first']:.2f}s")


def test_device_constants_are_stored_as_host_bytes_and_put_back_on_the_device():
    from torch._subclasses import FakeTensorMode

    from torch_pjrt._compile.graph_store import dump_graph, load_graph

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = torch.arange(4.0).to(NAME)

        def forward(self, x):
            return x * self.scale

    loaded = load_graph(dump_graph(torch.fx.symbolic_trace(Scaled())), FakeTensorMode())
    assert loaded.scale.device.type == NAME
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x.to(NAME)).cpu(), x * torch.arange(4.0))


PRECOMPILE_SCRIPT = """
import json, time, torch, torch_pjrt
from torch._dynamo.utils import counters
torch._dynamo.config.caching_precompile = True
def build(dev):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 1)).to(dev)
    x = torch.randn(32, 64).to(dev); y = torch.randn(32, 1).to(dev)
    return model, x, y, torch.optim.AdamW(model.parameters(), lr=0.01)
def train(forward, model, x, y, opt):
    out, start = [], time.perf_counter()
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        out.append(loss.item())
        if len(out) == 1:
            first = time.perf_counter() - start
    return out, first
cpu_model, *rest = build("cpu")
cpu, _ = train(cpu_model, cpu_model, *rest)
model, *rest = build("{name}")
losses, first = train(torch.compile(model, backend="tpu"), model, *rest)
torch.compiler.save_cache_artifacts()
print(json.dumps(dict(cpu=cpu, losses=losses, first=first, dynamo=dict(counters["dynamo_cache"]),
                      frames=dict(counters["frames"]), aot=dict(counters["aot_autograd"]),
                      compiled=torch_pjrt.metrics()["compilations"],
                      graphs=sorted(g["name"] for g in torch_pjrt.compile_report()))))
"""


def test_dynamo_caching_precompile_loads_a_compiled_model_without_tracing(
        tmp_path, python_in_subprocess):
    """torch's caching precompile stores the whole frame (Dynamo's bytecode
    and guards plus the backend's stored graphs); the second process runs
    the compiled model's training steps with no Dynamo tracing, no
    AOTAutograd and no XLA compile."""
    cold, warm = cold_then_warm(PRECOMPILE_SCRIPT, tmp_path, python_in_subprocess)
    assert cold["dynamo"] == {"dynamo_cache_miss": 1} and cold["frames"]["ok"] >= 1, cold
    assert cold["aot"].get("autograd_cache_saved", 0) >= 1, cold
    assert warm["dynamo"] == {"dynamo_cache_hit": 1}, warm
    assert warm["frames"].get("total", 0) == 0 and warm["aot"] == {}, warm
    # Programs come from the disk cache. The first step's pending graph can
    # be cut at another point than in the cold process, where Dynamo's
    # tracing ran between the ops: that joined program may be new (seen: 1).
    assert cold["compiled"] >= 10 and warm["compiled"] <= 1, (cold, warm)
    assert warm["losses"] == cold["losses"]
    torch.testing.assert_close(cold["losses"], cold["cpu"], rtol=1e-4, atol=1e-5)
    # The loaded forward and backward keep one name between them.
    assert warm["graphs"] == cold["graphs"] == ["graph0_backward", "graph0_forward"], warm
    print(f"first step cold {cold['first']:.2f}s, warm {warm['first']:.2f}s")
