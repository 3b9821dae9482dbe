"""torch.compile(backend="tpu"): whole graphs lowered with the eager
lowering table into one program each. Compiled results are compared with
strict eager on the device and with CPU PyTorch; compile counts, reasons and
eager-split ops are read from torch_pjrt.metrics() and compile_report()."""

from __future__ import annotations

import json

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name
STEPS = 20


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch_pjrt.reset_compile_report()
    torch_pjrt.reset_metrics()
    yield
    torch._dynamo.reset()


def compiles() -> int:
    m = torch_pjrt.metrics()
    return m["compilations"] + m["cache_hits_disk"]


def test_backend_is_found_by_name_and_entry_point():
    from importlib.metadata import entry_points

    from torch_pjrt._compile import tpu_backend

    (ep,) = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "tpu"]
    assert ep.load() is tpu_backend
    assert torch._dynamo.backends.registry.lookup_backend("tpu") is tpu_backend


def test_inference_is_one_program_matching_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4), torch.nn.Softmax(-1))
    x = torch.randn(8, 16)
    with torch.no_grad():
        expected = model(x)
        model.to(NAME)
        compiled = torch.compile(model, backend="tpu")
        got = compiled(x.to(NAME))
        executions = torch_pjrt.metrics()["executions"]
        again = compiled(x.to(NAME))
        # The second call runs one executable (plus the input upload).
        assert torch_pjrt.metrics()["executions"] - executions <= 2
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(again.cpu(), expected, rtol=1e-5, atol=1e-6)
    (graph,) = torch_pjrt.compile_report()
    assert graph["kind"] == "inference" and graph["eager_ops"] == {} and graph["regions"] == 1
    m = torch_pjrt.metrics()
    assert m["compile_graphs"] == 1 and m["compile_graph_compiles"] == 1
    assert m["compile_graph_calls"] == 2 and m["compile_graph_eager_nodes"] == 0
    assert len(graph["compiles"]) == 1 and graph["calls"] == 2


def test_group_norm_and_its_getitems_stay_in_one_program():
    """native_group_norm returns (out, mean, rstd); the graph takes [0]. The
    op and its getitem lower into the program around them, so a
    conv/GroupNorm/SiLU stack (a diffusion UNet's resnet block) is one
    program; bf16 keeps mean and rstd in the input's dtype, as on the CPU."""
    for dtype, tol in ((torch.float32, dict(rtol=1e-5, atol=1e-5)), (torch.bfloat16, dict(rtol=2e-2, atol=2e-2))):
        torch._dynamo.reset()
        torch_pjrt.reset_compile_report()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.GroupNorm(4, 16),
                                    torch.nn.SiLU(), torch.nn.Conv2d(16, 8, 3, padding=1),
                                    torch.nn.GroupNorm(2, 8, affine=False)).to(dtype)
        x = torch.randn(2, 8, 6, 6).to(dtype)
        with torch.no_grad():
            expected = model(x)
            got = torch.compile(model.to(NAME), backend="tpu")(x.to(NAME))
        torch.testing.assert_close(got.cpu(), expected, **tol)
        (graph,) = torch_pjrt.compile_report()
        assert graph["eager_ops"] == {} and graph["regions"] == 1, graph
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 1))


def data(kind):
    g = torch.Generator().manual_seed(1)
    shape = (32, 16) if kind == "mlp" else (8, 3, 8, 8)
    return torch.randn(*shape, generator=g), torch.randn(shape[0], 1, generator=g)


def train(kind: str, device: str, compiled: bool, steps: int = STEPS):
    torch.manual_seed(0)
    model = (mlp if kind == "mlp" else cnn)().to(device)
    # A tensor learning rate: the scheduler changes it every step without
    # a recompile (a float would be a constant in the graph).
    lr = torch.tensor(0.01, device=device) if compiled else 0.01
    opt = torch.optim.AdamW(model.parameters(), lr=lr, capturable=compiled, foreach=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    x, y = (t.to(device) for t in data(kind))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="tpu")
    losses, counts = [], []
    for _ in range(steps):
        losses.append(step().item())
        sched.step()
        counts.append(compiles())
    return losses, counts, model


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_compiled_training_step_matches_eager_and_cpu(kind):
    cpu, _, cpu_model = train(kind, "cpu", compiled=False)
    eager, _, _ = train(kind, NAME, compiled=False)
    torch_pjrt.reset_metrics()
    got, counts, model = train(kind, NAME, compiled=True)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(cpu), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    # Nothing compiles after the first step, though the lr changes each step.
    assert counts[1:] == [counts[0]] * (STEPS - 1), counts
    # Parameters and buffers (batch norm's running statistics, updated
    # inside the forward graph) end where CPU's do.
    for (name, a), b in zip(model.state_dict().items(), cpu_model.state_dict().values()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    report = torch_pjrt.compile_report()
    assert {g["kind"] for g in report} == {"forward", "backward", "inference"}
    assert all(g["eager_ops"] == {} for g in report), report
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_optimizer_updates_weights_in_place_without_a_second_copy():
    torch.manual_seed(0)
    model = torch.nn.Linear(512, 512).to(NAME)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01, device=NAME), capturable=True)
    weight = model.weight
    ptr = weight.data_ptr()
    x = torch.randn(4, 512, device=NAME)
    model(x).sum().backward()
    step = torch.compile(opt.step, backend="tpu")
    step()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    for _ in range(3):
        step()
    torch.tpu.synchronize()
    # Same Parameter, same storage, updated in place; the old buffers were
    # donated, so the step allocates nothing that outlives it.
    assert model.weight is weight and weight.data_ptr() == ptr
    assert torch.tpu.memory_allocated() == before
    torch.manual_seed(0)
    cpu = torch.nn.Linear(512, 512)
    cpu_opt = torch.optim.Adam(cpu.parameters(), lr=0.01)
    cpu(x.cpu()).sum().backward()
    for _ in range(4):
        cpu_opt.step()
    torch.testing.assert_close(weight.detach().cpu(), cpu.weight.detach(), rtol=1e-5, atol=1e-6)


def test_mutated_inputs_and_returned_views_behave_as_in_eager():
    def fn(x, buf):
        buf.add_(1)
        x.mul_(2)
        return x[1:], x.t(), x.sum()

    compiled = torch.compile(fn, backend="tpu")
    a, b = torch.randn(4, 4), torch.zeros(3)
    ad, bd = a.to(NAME), b.to(NAME)
    got = compiled(ad, bd)
    expected = fn(a, b)
    torch.testing.assert_close(ad.cpu(), a)
    torch.testing.assert_close(bd.cpu(), b)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)
    # Returned views alias the input, as in eager.
    assert got[0]._base is ad and got[1]._base is ad
    ad.add_(100)
    torch.testing.assert_close(got[0].cpu(), ad.cpu()[1:])


def test_batch_norm_buffers_update_inside_the_graph():
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(6)
    x = torch.randn(10, 6)
    bn_dev = torch.nn.BatchNorm1d(6).to(NAME)
    compiled = torch.compile(bn_dev, backend="tpu")
    with torch.no_grad():
        for _ in range(3):
            expected = bn(x)
            got = compiled(x.to(NAME))
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn_dev.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(bn_dev.running_var.cpu(), bn.running_var)
    assert bn_dev.num_batches_tracked.item() == 3


def test_graph_breaks_run_the_eager_parts_in_strict_eager():
    def fn(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos() + x.sum().item()

    compiled = torch.compile(fn, backend="tpu")
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x.to(NAME)).cpu(), fn(x))
    assert len(torch_pjrt.compile_report()) >= 2
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_a_node_without_lowering_is_split_out_counted_and_listed():
    # linalg.eigvals (a general matrix's eigenvalues) has no lowering.
    def fn(x):
        return torch.linalg.eigvals(x.exp()).abs() * 2 + 1

    compiled = torch.compile(fn, backend="tpu")
    x = torch.randn(4, 4)
    got = compiled(x.to(NAME))
    torch.testing.assert_close(got.cpu(), fn(x))
    (graph,) = torch_pjrt.compile_report()
    assert graph["eager_ops"] == {"aten::linalg_eig": 1}
    assert graph["regions"] == 2  # exp before, abs/mul/add after
    assert torch_pjrt.metrics()["compile_graph_eager_nodes"] == 1
    assert "aten::linalg_eig" in torch_pjrt.metrics()["fallback_ops"]


def test_dropout_in_a_compiled_graph_follows_the_device_seed():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).to(NAME).train()
    compiled = torch.compile(model, backend="tpu")
    x = torch.ones(16, 64, device=NAME)
    torch.tpu.manual_seed(1)
    a = compiled(x)
    torch.tpu.manual_seed(1)
    b = compiled(x)
    c = compiled(x)
    assert torch.equal(a.cpu(), b.cpu()) and not torch.equal(b.cpu(), c.cpu())
    zero = (a == 0).float().mean().item()
    assert 0.4 < zero < 0.6
    a.sum().backward()
    # The gradient flows through exactly the kept units.
    kept = (a.detach() != 0).float().cpu()
    grad_bias = model[0].bias.grad.cpu()
    torch.testing.assert_close(grad_bias, kept.sum(0) * 2, rtol=1e-5, atol=1e-5)


def test_new_shape_recompiles_and_says_which_dim_changed():
    def fn(x, w):
        return torch.tanh(x @ w).sum(1)

    w = torch.randn(16, 4)
    compiled = torch.compile(fn, backend="tpu", dynamic=False)
    for n in (8, 8, 16):
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x.to(NAME), w.to(NAME)).cpu(), fn(x, w),
                                   rtol=1e-5, atol=1e-5)
    reasons = list(torch_pjrt.metrics()["recompile_reasons"])
    assert any("size mismatch at index 0. expected 8, actual 16" in r for r in reasons), reasons
    assert len(torch_pjrt.compile_report()) == 2


def test_dynamic_dims_compile_one_program_per_shape_with_reasons():
    def fn(x):
        return (x * 2).softmax(-1)

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for n in (4, 6, 4, 9):
        x = torch.randn(n, 5)
        torch.testing.assert_close(compiled(x.to(NAME)).cpu(), fn(x))
    (graph,) = torch_pjrt.compile_report()
    assert len(graph["compiles"]) == 3 and graph["calls"] == 4
    reasons = [c["reason"] for c in graph["compiles"]]
    assert "dim 0 changed 4 -> 6" in reasons[1] and "dim 0 changed 6 -> 9" in reasons[2], reasons


def test_a_recompile_storm_is_reported_once_it_starts():
    def fn(x):
        return x.cumsum(0) * 3

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    compiled(torch.randn(2, device=NAME))
    with pytest.warns(RuntimeWarning, match=r"compiled 8 programs, one per input shape .*dim 0"):
        for n in range(3, 10):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x.to(NAME)).cpu(), fn(x))


def test_shape_error_in_a_compiled_region_raises_like_eager():
    def fn(x, w):
        return x @ w

    a, b = torch.randn(4, 5), torch.randn(6, 3)
    with pytest.raises(RuntimeError) as cpu_error:
        fn(a, b)
    compiled = torch.compile(fn, backend="tpu")
    with pytest.raises(RuntimeError) as error:
        compiled(a.to(NAME), b.to(NAME))
    assert type(cpu_error.value) is RuntimeError
    # Dynamo names the user's line.
    assert "test_compile.py" in str(error.value) and "x @ w" in str(error.value)


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(cfg)


def test_tiny_llama_training_compiled_matches_cpu():
    ids = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(1))

    def run(device, compiled, steps=12):
        model = tiny_llama().to(device).train()
        lr = torch.tensor(1e-3, device=device) if compiled else 1e-3
        opt = torch.optim.AdamW(model.parameters(), lr=lr, capturable=compiled, foreach=True)
        sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, total_iters=steps)
        x = ids.to(device)

        def forward_backward():
            loss = model(input_ids=x, labels=x).loss
            loss.backward()
            return loss

        def optimizer_step():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        if compiled:
            forward_backward = torch.compile(forward_backward, backend="tpu")
            optimizer_step = torch.compile(optimizer_step, backend="tpu")
        losses, counts = [], []
        for _ in range(steps):
            losses.append(forward_backward().item())
            optimizer_step()
            sched.step()
            counts.append(compiles())
        return losses, counts

    cpu, _ = run("cpu", False)
    torch_pjrt.reset_metrics()
    got, counts = run(NAME, True)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(cpu), rtol=1e-4, atol=1e-4)
    assert counts[1:] == [counts[0]] * (len(counts) - 1), counts
    assert all(g["eager_ops"] == {} for g in torch_pjrt.compile_report())
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_static_cache_generation_with_the_compiled_model_matches_eager():
    transformers = pytest.importorskip("transformers")
    model = tiny_llama().eval()
    ids = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(3))
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False,
                  cache_implementation="static")
    with torch.no_grad():
        expected = model.generate(ids, disable_compile=True, **kwargs)
        model.to(NAME)
        config = transformers.CompileConfig(backend="tpu", fullgraph=True)
        got = model.generate(ids.to(NAME), compile_config=config, **kwargs)
        first = compiles()
        again = model.generate(ids.to(NAME), compile_config=config, **kwargs)
    assert torch.equal(got.cpu(), expected) and torch.equal(again.cpu(), expected)
    assert compiles() == first  # the second generate() compiles nothing
    graphs = torch_pjrt.compile_report()
    assert graphs and all(g["eager_ops"] == {} for g in graphs)
    assert sum(g["calls"] for g in graphs) >= 62  # 31 decode steps per generate()
    assert torch_pjrt.metrics()["fallback_ops"] == {}


STEP_SCRIPT = """
import json, time, torch, torch_pjrt
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)).to("{name}")
opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(0.01, device="{name}"), capturable=True)
x = torch.randn(32, 64).to("{name}"); y = torch.randn(32, 1).to("{name}")
@torch.compile(backend="tpu")
def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss
start = time.perf_counter()
loss = step().item()
first = time.perf_counter() - start
sources = [c["source"] for g in torch_pjrt.compile_report() for c in g["compiles"]]
m = torch_pjrt.metrics()
print(json.dumps(dict(loss=loss, first=first, sources=sources, compiled=m["compilations"],
                      disk=m["cache_hits_disk"])))
"""


def test_second_process_loads_compiled_graphs_from_the_disk_cache(tmp_path, python_in_subprocess):
    env = {"TORCH_PJRT_CACHE_DIR": str(tmp_path)}
    script = STEP_SCRIPT.format(name=NAME)
    runs = []
    for _ in range(2):
        proc = python_in_subprocess(script, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    # The graphs are lowered, then run (and compiled) as the device's
    # pending graph: the warm process loads that program from disk.
    assert cold["sources"] and set(cold["sources"]) == {"pending"}, cold
    assert cold["compiled"] > 0 and cold["disk"] == 0, cold
    assert warm["compiled"] == 0 and warm["disk"] > 0, warm
    assert warm["loss"] == cold["loss"]
    print(f"first step cold {cold['first']:.2f}s, warm {warm['first']:.2f}s")


def _views_and_writes(x):
    y = x.clone()
    y[:, 1::2] += 1          # slice_scatter with a step
    y[1] = x[0] * 2          # select_scatter
    a, b = torch.split(y, [1, 2], dim=0)
    parts = torch.unbind(y.t(), 0)
    z = torch.nn.functional.pad(y, (1, -1, 0, 2), value=3.0)
    return a.squeeze(0).unsqueeze(1).expand(5, 3), b.permute(1, 0), parts[2], z, y.transpose(0, 1)


def _factories(x):
    n = torch.arange(2, 2 + x.shape[1], dtype=torch.float32, device=x.device)
    ones = x.new_ones(2, 5)
    return (x * n + torch.full_like(x, 0.5) + torch.zeros_like(x), ones.sum(0),
            torch.ones(3, device=x.device).cumsum(0))


def _embedding_and_eval_norm(ids, weight, bn):
    e = torch.nn.functional.embedding(ids, weight)
    return bn(e.transpose(1, 2))


def _sorts(x):
    # torch.sort's default overload (top-p sampling, Transformers' grouped_mm
    # experts) and the stable one, ascending and descending.
    values, order = torch.sort(x, dim=-1, descending=True)
    probs = values.softmax(-1).cumsum(-1)
    kept = values.masked_fill(probs > 0.7, float("-inf"))
    up, up_order = x.sort(0)
    st, st_order = torch.sort(x.t(), stable=True)
    return values, order, kept, up, up_order, st, st_order


@pytest.mark.parametrize("case", ["views_and_writes", "factories", "embedding_and_eval_norm",
                                  "sorts"])
def test_graph_only_lowerings_match_cpu(case):
    """Views, scatters into views, factories, embedding and eval batch norm
    are storage operations in eager mode; in graphs they are lowered."""
    torch.manual_seed(0)
    if case == "embedding_and_eval_norm":
        weight = torch.randn(10, 4)
        bn = torch.nn.BatchNorm1d(4).eval()
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        ids = torch.tensor([[1, 2, 9], [0, 0, 3]])
        with torch.no_grad():  # no autograd graph may hold bn's weights when it moves
            expected = _embedding_and_eval_norm(ids, weight, bn)
        got = torch.compile(_embedding_and_eval_norm, backend="tpu")(
            ids.to(NAME), weight.to(NAME), bn.to(NAME))
        results = [(got, expected)]
    else:
        fn = {"views_and_writes": _views_and_writes, "factories": _factories,
              "sorts": _sorts}[case]
        x = torch.randn(3, 5)
        results = list(zip(torch.compile(fn, backend="tpu")(x.to(NAME)), fn(x)))
    for got, expected in results:
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    assert all(g["eager_ops"] == {} for g in torch_pjrt.compile_report())
    assert torch_pjrt.metrics()["fallback_ops"] == {}


def test_explain_lists_breaks_eager_ops_and_cpu_fallbacks():
    def fn(x):
        y = torch.linalg.eigvals(x.exp()).abs()
        torch._dynamo.graph_break()
        return y.sin() * 2

    x = torch.randn(4, 4, device=NAME)
    report = torch_pjrt.explain(fn, x)
    assert report.graph_count == 2 and len(report.graph_breaks) == 1
    assert "test_compile.py" in report.graph_breaks[0][1]
    assert report.eager_ops == {"aten::linalg_eig": 1}
    assert "aten::linalg_eig" in report.fallback_ops
    text = str(report)
    assert "runs eagerly (no graph lowering): aten::linalg_eig x1" in text
    assert "graph break" in text

    clean = torch_pjrt.explain(lambda x: (x * 2).sum(), x)
    assert clean.graph_breaks == [] and clean.eager_ops == {} and clean.fallback_ops == {}
    assert "everything ran as compiled programs on the device" in str(clean)


def test_out_of_range_index_in_a_compiled_graph_raises_index_error_like_cpu():
    emb = torch.nn.Embedding(10, 4)
    ids = torch.tensor([1, 12])
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(ids)
    emb.to(NAME)
    compiled = torch.compile(lambda i: emb(i).sum(), backend="tpu")
    with torch.no_grad(), pytest.raises(IndexError, match="embedding: index out of range in self"):
        compiled(ids.to(NAME)).item()  # reported when the host next waits
    # The device is usable afterwards.
    with torch.no_grad():
        assert compiled(torch.tensor([1, 2], device=NAME)).item() == pytest.approx(
            emb.weight[1:3].sum().item(), rel=1e-5)


def test_a_graph_with_several_checks_names_the_one_that_failed():
    """A graph's data checks come back as one buffer; the error still names
    the op whose check failed, with torch's error type."""
    emb = torch.nn.Embedding(10, 4).to(NAME)
    table = torch.arange(6.0, device=NAME)

    def fn(i, j):
        return emb(i).sum() + table.index_select(0, j).sum()

    compiled = torch.compile(fn, backend="tpu")
    good_i, good_j = torch.tensor([1, 2], device=NAME), torch.tensor([0, 5], device=NAME)
    with torch.no_grad():
        expected = fn(good_i, good_j).item()
        assert compiled(good_i, good_j).item() == pytest.approx(expected, rel=1e-5)
        with pytest.raises(IndexError, match="index_select.*index out of range|index_select.*out of"):
            compiled(good_i, torch.tensor([0, 6], device=NAME)).item()
        with pytest.raises(IndexError, match="embedding: index out of range in self"):
            compiled(torch.tensor([1, 10], device=NAME), good_j).item()
        assert compiled(good_i, good_j).item() == pytest.approx(expected, rel=1e-5)


def test_bucketing_bounds_programs_and_keeps_results():
    from torch_pjrt.bucketing import bucket_size, pad_batch

    assert bucket_size(20, (64, 32)) == 32 and bucket_size(32, (32, 64)) == 32
    with pytest.raises(ValueError, match="longer than the largest bucket"):
        bucket_size(65, (32, 64))
    with pytest.raises(ValueError, match="no masking pad value for field 'pixel_values'"):
        pad_batch({"input_ids": torch.zeros(1, 3), "pixel_values": torch.zeros(1, 3)}, (8,),
                  pad_token_id=0)

    model = tiny_llama().eval()
    compiled = torch.compile(lambda **b: model(**b), backend="tpu", dynamic=False)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        expected = []
        for length in (20, 27, 45):
            ids = torch.randint(3, 256, (2, length), generator=g)
            out = model(input_ids=ids, labels=ids)
            expected.append((ids, out.loss, out.logits))
        model.to(NAME)
        for ids, loss, logits in expected:
            batch = pad_batch({"input_ids": ids.to(NAME), "labels": ids.to(NAME)}, (32, 64),
                              pad_token_id=0)
            out = compiled(**batch)
            length = ids.shape[1]
            torch.testing.assert_close(out.loss.cpu(), loss, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(out.logits[:, :length].cpu(), logits, rtol=1e-4, atol=1e-4)
    # Three lengths, two buckets: two graphs, one program each.
    graphs = torch_pjrt.compile_report()
    assert len(graphs) == 2 and all(len(g["compiles"]) == 1 for g in graphs)


# Core-ATen ops eager mode runs through torch's composite kernels, which
# graphs keep whole: each is decomposed into lowered ops, not split out.
_KEPT_WHOLE = {
    "mean": lambda x: (x * 2).mean(),
    "mean_dtype": lambda x: (x * 2).mean(dtype=torch.float64),
    "mean_0d": lambda x: (x.sum() * 2).mean(),
    "repeat": lambda x: x.repeat(2, 1, 3) * 2,
    "diagonal": lambda x: (x * 2).diagonal() + 1,
    "diagonal_offset": lambda x: (x * 2).diagonal(2),
    "diagonal_below": lambda x: (x * 2).diagonal(-3),
    "diagonal_empty": lambda x: (x * 2).diagonal(7),
    "diagonal_3d": lambda x: (x.reshape(2, 3, 4) * 2).diagonal(1, 2, 0),
    "diagonal_scatter": lambda x: torch.diagonal_scatter(x * 1, torch.arange(4.0, device=x.device)),
    "diagonal_scatter_offset": lambda x: torch.diagonal_scatter(
        x * 1, torch.arange(2.0, device=x.device), -2),
    "diagonal_scatter_3d": lambda x: torch.diagonal_scatter(
        x.reshape(2, 3, 4) * 1, torch.ones(3, 1, device=x.device), 1, 2, 0),
    "dist": lambda x: torch.dist(x * 2, x, 3),
    "ldexp": lambda x: torch.ldexp(x * 2, torch.ones_like(x, dtype=torch.int32)),
    "addmv": lambda x: torch.addmv(x[:, 0], x, x[0], beta=0.5, alpha=2),
    "addmm_activation": lambda x: torch._addmm_activation(x[0, :4], x, x.t(), use_gelu=True),
    "narrow_copy": lambda x: (x * 2).narrow_copy(1, 1, 3),
    "view_dtype_same_width": lambda x: (x * 2).view(torch.int32) + 1,
    "view_dtype_narrower": lambda x: (x * 2).view(torch.uint8).to(torch.int32).sum(-1),
    "view_dtype_wider": lambda x: (x * 2).view(torch.float64) * 1,
    "view_dtype_bool": lambda x: ((x > 0).to(torch.uint8) * 5).view(torch.bool) | (x < -1),
    "empty_permuted": lambda x: torch.empty_permuted((4, 6), (1, 0), device=x.device).fill_(2) + x,
    "tril_indices": lambda x: torch.tril_indices(4, 5, 1, device=x.device) + x.sum().long(),
    "triu_indices": lambda x: torch.triu_indices(4, 3, -1, device=x.device) + x.sum().long(),
}


@pytest.mark.parametrize("case", sorted(_KEPT_WHOLE))
def test_composite_core_ops_stay_in_the_program(case):
    fn = _KEPT_WHOLE[case]
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    got = torch.compile(fn, backend="tpu")(x.to(NAME))
    expected = fn(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert [g["eager_ops"] for g in torch_pjrt.compile_report()] == [{}]


def test_a_mean_loss_trains_in_one_forward_and_one_backward_program():
    """A loss's mean() and a diagonal penalty, with gradients."""
    def loss_fn(w, x):
        h = (x @ w).repeat(1, 2)
        return h.square().mean() + (w.t() @ w).diagonal(1).abs().mean()

    torch.manual_seed(0)
    w, x = torch.randn(6, 5), torch.randn(4, 6)
    wc = w.clone().requires_grad_()
    loss_fn(wc, x).backward()
    wd = w.to(NAME).requires_grad_()
    loss = torch.compile(loss_fn, backend="tpu")(wd, x.to(NAME))
    loss.backward()
    torch.testing.assert_close(loss.detach().cpu(), loss_fn(w, x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wd.grad.cpu(), wc.grad, rtol=1e-5, atol=1e-6)
    report = torch_pjrt.compile_report()
    assert sorted(g["kind"] for g in report) == ["backward", "forward"], report
    assert all(g["regions"] == 1 and g["eager_ops"] == {} for g in report), report


_MASKED_SCATTER_CASES = {
    "full_mask": (torch.zeros(2, 3), torch.tensor([[True, False, True], [False, False, True]]),
                  torch.arange(5.0)),
    "broadcast_mask": (torch.randn(2, 3), torch.tensor([True, False, True]), torch.arange(4.0)),
    "empty_source": (torch.randn(2, 3), torch.zeros(2, 3, dtype=torch.bool), torch.zeros(0)),
    "int": (torch.randint(0, 9, (3, 3)), torch.eye(3, dtype=torch.bool), torch.tensor([7, 8, 9])),
}


def _masked_scatter(x, mask, source):
    return x.masked_scatter(mask, source) * 1


@pytest.mark.parametrize("case", sorted(_MASKED_SCATTER_CASES))
def test_masked_scatter_stays_in_the_program(case):
    """Multimodal models place image features with masked_scatter."""
    x, mask, source = _MASKED_SCATTER_CASES[case]
    got = torch.compile(_masked_scatter, backend="tpu")(x.to(NAME), mask.to(NAME), source.to(NAME))
    assert torch.equal(got.cpu(), _masked_scatter(x, mask, source))
    assert [g["eager_ops"] for g in torch_pjrt.compile_report()] == [{}]


def test_masked_scatter_gradients_and_too_short_a_source():
    torch.manual_seed(0)
    x, source = torch.randn(2, 3, requires_grad=True), torch.randn(6, requires_grad=True)
    mask, weight = torch.rand(2, 3) > 0.4, torch.arange(6.0).reshape(2, 3)
    (_masked_scatter(x, mask, source) * weight).sum().backward()
    xd = x.detach().to(NAME).requires_grad_()
    sd = source.detach().to(NAME).requires_grad_()
    step = torch.compile(_masked_scatter, backend="tpu")
    (step(xd, mask.to(NAME), sd) * weight.to(NAME)).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    torch.testing.assert_close(sd.grad.cpu(), source.grad)
    assert all(g["eager_ops"] == {} for g in torch_pjrt.compile_report())
    # Three Trues, two source elements: an error, never a made-up value.
    short = torch.compile(_masked_scatter, backend="tpu")
    with pytest.raises(IndexError, match="out of bounds"):
        short(torch.zeros(3, device=NAME), torch.ones(3, dtype=torch.bool, device=NAME),
              torch.arange(2.0, device=NAME)).cpu()


_RANDOM_FACTORIES = {
    "rand": lambda x: torch.rand(3, 5, device=x.device) + x,
    "rand_float64": lambda x: torch.rand(3, 5, device=x.device, dtype=torch.float64) * 2,
    "randn": lambda x: torch.randn(3, 5, device=x.device) * x,
    "randn_like": lambda x: torch.randn_like(x) + 1,
    "rand_like": lambda x: torch.rand_like(x) * x,
    "randint": lambda x: torch.randint(10, (3, 5), device=x.device) + x,
    "randint_low": lambda x: torch.randint(-4, 4, (7,), device=x.device) * 2,
    "randint_like": lambda x: torch.randint_like(x, 5) + x,
    "randint_like_low": lambda x: torch.randint_like(x, 2, 9) * x,
    "randperm": lambda x: x[torch.randperm(3, device=x.device)] * 1,
    "randperm_int32": lambda x: torch.randperm(9, device=x.device, dtype=torch.int32) + 1,
}


@pytest.mark.parametrize("case", sorted(_RANDOM_FACTORIES))
def test_random_factories_stay_in_the_program_with_eagers_draws(case):
    """torch.rand/randn/randint(_like) in a graph draw from the device
    generator as eager mode does: with one draw in the graph the same seed
    gives the same numbers (up to an ulp where XLA fuses the Box-Muller
    transform with its consumer), and each call draws new ones."""
    fn = _RANDOM_FACTORIES[case]
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).to(NAME)
    torch.manual_seed(7)
    eager = fn(x).cpu()
    torch.manual_seed(7)
    step = torch.compile(fn, backend="tpu")
    first, second = step(x).cpu(), step(x).cpu()
    assert first.dtype == eager.dtype
    torch.testing.assert_close(first, eager, rtol=1e-6, atol=1e-6)
    assert not torch.equal(first, second)
    assert [g["eager_ops"] for g in torch_pjrt.compile_report()] == [{}]


def test_several_random_factories_in_one_program_replay_with_the_seed():
    """Several draws in one graph share one generator state threaded through
    the program (see "Random numbers"): a seed replays them, as a seed
    replays eager mode, though not eager mode's own numbers (as inductor's
    differ from eager's)."""
    def fn(x):
        return torch.rand_like(x) + torch.randn_like(x) * torch.rand(5, device=x.device)

    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).to(NAME)
    step = torch.compile(fn, backend="tpu")
    torch.manual_seed(3)
    first, second = step(x).cpu(), step(x).cpu()
    torch.manual_seed(3)
    assert torch.equal(step(x).cpu(), first)
    assert not torch.equal(first, second)
    assert [g["eager_ops"] for g in torch_pjrt.compile_report()] == [{}]
