"""Fused eager mode: ops are recorded into a pending graph and run as one
program when a value is needed. Results are compared with CPU PyTorch, the
behaviour with torch_pjrt.metrics()."""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name


@pytest.fixture(autouse=True)
def fused():
    with torch_pjrt.eager_mode("fused"):
        yield
    getattr(torch, NAME).synchronize()


def m(key: str):
    return torch_pjrt.metrics()[key]


def test_ops_wait_until_a_value_is_read_and_only_held_values_are_made():
    x = torch.randn(16, 16)
    d = x.to(NAME)
    torch_pjrt.reset_metrics()
    y = d
    for _ in range(100):
        y = torch.tanh(y * 0.9 + 0.1)
    assert m("executions") == 0 and m("fused_ops_recorded") >= 200
    expected = x
    for _ in range(100):
        expected = torch.tanh(expected * 0.9 + 0.1)
    torch.testing.assert_close(y.cpu(), expected, rtol=1e-5, atol=1e-6)
    assert m("fused_graphs_run") == 1
    assert m("fused_values_materialized") == 1  # 199 intermediates never existed
    assert m("fused_flushes") == {"value read": 1}


def test_views_and_in_place_across_the_pending_graph():
    host = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    x = host.to(NAME)
    torch_pjrt.reset_metrics()
    alias = x[1:4, 2:6]  # a view taken before the writes
    row = x[5]
    alias.add_(100)
    x.mul_(2)
    row.sub_(1)
    t = x.t()
    t[0].fill_(-3)
    snap = x.clone()
    x.add_(1)
    assert m("executions") == 0
    h = host.clone()
    h_alias, h_row = h[1:4, 2:6], h[5]
    h_alias.add_(100)
    h.mul_(2)
    h_row.sub_(1)
    h.t()[0].fill_(-3)
    h_snap = h.clone()
    h.add_(1)
    torch.testing.assert_close(alias.cpu(), h_alias)
    torch.testing.assert_close(row.cpu(), h_row)
    torch.testing.assert_close(snap.cpu(), h_snap)
    torch.testing.assert_close(x.cpu(), h)


@pytest.mark.parametrize("read", ["item", "cpu", "repr", "synchronize", "mask", "tolist"])
def test_sync_points_run_the_pending_graph(read):
    x = torch.randn(5, 7)
    d = x.to(NAME)
    torch_pjrt.reset_metrics()
    y = (d * 2).relu()
    e = (x * 2).relu()
    assert m("fused_graphs_run") == 0
    if read == "item":
        assert y.sum().item() == pytest.approx(e.sum().item(), rel=1e-5)
    elif read == "cpu":
        torch.testing.assert_close(y.cpu(), e)
    elif read == "repr":
        assert "tensor(" in repr(y)
    elif read == "synchronize":
        getattr(torch, NAME).synchronize()
        torch.testing.assert_close(y.cpu(), e)
    elif read == "mask":  # a data-dependent shape needs the values now
        torch.testing.assert_close(y[y > 0.5].cpu(), e[e > 0.5])
    else:
        assert y.flatten().tolist() == pytest.approx(e.flatten().tolist(), rel=1e-5)
    assert m("fused_graphs_run") >= 1


def test_training_loop_compiles_nothing_after_warm_up():
    """A float lr changed by a real scheduler every step, no read-back inside
    the loop: the end of each optimizer step cuts the graph, and every step
    after the first two is the same program."""
    def run(device: str) -> tuple[list[torch.Tensor], list[int]]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(),
                                    torch.nn.LayerNorm(32), torch.nn.Linear(32, 1)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(64, 12, generator=g), torch.randn(64, 1, generator=g)
        x, y = x.to(device), y.to(device)
        losses, compiled = [], []
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.detach())
            compiled.append(m("fused_graphs_compiled"))
        return [l.cpu() for l in losses], compiled

    expected, _ = run("cpu")
    torch_pjrt.reset_metrics()
    got, compiled = run(NAME)
    torch.testing.assert_close(torch.stack(got), torch.stack(expected), rtol=2e-4, atol=2e-5)
    assert compiled[-1] == compiled[1], compiled  # nothing new after step 2
    assert m("fused_flushes").get("optimizer step", 0) == 20


def test_decode_loop_without_read_back_is_cut_at_its_period(python_in_subprocess):
    """A greedy decode loop that never reads a token back: the graph reaches
    its size cap, the loop's period is found, and every later cut is the
    same program."""
    result = python_in_subprocess(
        f"""
        import torch, torch_pjrt
        torch.manual_seed(0)
        emb = torch.nn.Embedding(50, 16)
        cell = torch.nn.RNNCell(16, 16)
        head = torch.nn.Linear(16, 50)
        def decode(device, steps=32):
            e, c, h = emb.to(device), cell.to(device), head.to(device)
            tok = torch.tensor([3], device=device)
            state = torch.zeros(1, 16, device=device)
            out = []
            with torch.no_grad():
                for _ in range(steps):
                    state = c(e(tok), state)
                    tok = h(state).argmax(-1)
                    out.append(tok)
            return torch.cat(out).cpu()
        expected = decode("cpu")
        torch_pjrt.set_eager_mode("fused")
        got = decode("{NAME}")
        assert torch.equal(got, expected), (got, expected)
        m = torch_pjrt.metrics()
        assert m["fused_flushes"].get("loop period", 0) >= 2, m["fused_flushes"]
        before, cuts = m["fused_graphs_compiled"], m["fused_flushes"]["loop period"]
        again = decode("{NAME}", steps=160)
        m = torch_pjrt.metrics()
        assert torch.equal(again[:32], expected)
        flushes = m["fused_flushes"]
        # Over 15 cuts by period in the long run reuse one program: only the
        # cuts around its start (set-up, a new phase) and the final read are new.
        assert flushes["loop period"] - cuts >= 15, flushes
        assert m["fused_graphs_compiled"] - before <= 4, (before, m["fused_graphs_compiled"])
        print("ok", flushes, m["fused_graphs_compiled"])
        """,
        env={"TORCH_PJRT_FUSED_MAX_OPS": "60"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ok" in result.stdout


def test_graph_size_cap_bounds_the_pending_graph(python_in_subprocess):
    result = python_in_subprocess(
        f"""
        import torch, torch_pjrt
        torch_pjrt.set_eager_mode("fused")
        x = torch.ones(4, device="{NAME}")
        ys = []
        for i in range(130):
            x = x * 1.01 if i % 3 else x + 1
            ys.append(x.sum())
            assert torch_pjrt._C._fused_pending_ops(0) <= 25
        expected = torch.ones(4)
        for i in range(130):
            expected = expected * 1.01 if i % 3 else expected + 1
        torch.testing.assert_close(x.cpu(), expected)
        flushes = torch_pjrt.metrics()["fused_flushes"]
        assert flushes.get("size cap", 0) + flushes.get("loop period", 0) >= 4, flushes
        print("ok")
        """,
        env={"TORCH_PJRT_FUSED_MAX_OPS": "25"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_random_numbers_follow_the_strict_order():
    def draw():
        torch.manual_seed(7)
        a = torch.randn(3, 4, device=NAME)
        b = torch.rand(5, device=NAME)
        c = torch.nn.functional.dropout(torch.ones(6, 6, device=NAME), 0.5)
        return [t.cpu() for t in (a, b, c)]

    fused = draw()
    with torch_pjrt.eager_mode("strict"):
        strict = draw()
    for f, s in zip(fused, strict):
        torch.testing.assert_close(f, s)


def test_an_error_is_raised_at_the_op_that_caused_it():
    x = torch.ones(2, 3, device=NAME)
    pending = x * 3
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([pending, torch.ones(2, 4, device=NAME)], dim=0)
    with pytest.raises(RuntimeError):
        pending @ torch.ones(2, 3, device=NAME)  # (2x3) @ (2x3), as on CPU
    # The graph recorded so far is intact.
    torch.testing.assert_close(pending.cpu(), torch.full((2, 3), 3.0))


def test_a_data_dependent_index_error_is_raised_when_the_host_waits():
    x = torch.arange(5.0, device=NAME)
    index = torch.tensor([0, 7], device=NAME)
    with pytest.raises(IndexError, match="index_select"):
        y = x.index_select(0, index)
        getattr(torch, NAME).synchronize()
        y.cpu()


def test_cpu_fallback_runs_the_pending_graph_first():
    x = torch.rand(4, 5) + 0.1
    o = torch.rand(4, 5) + 0.1
    d = x.to(NAME) * 2
    torch_pjrt.reset_metrics()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning, once per op and process
        got = torch.ops.aten._add_relu(d, o.to(NAME), alpha=-1) + 1
    assert sum(m("fallback_ops").values()) >= 1  # _add_relu has no lowering
    assert m("fused_flushes").get("value read", 0) >= 1  # its inputs were pending
    torch.testing.assert_close(got.cpu(), torch.relu(x * 2 - o) + 1)


def test_compiled_regions_mix_with_pending_values():
    from torch_pjrt._compile import tpu_backend

    fn = torch.compile(lambda a, b: (a @ b).softmax(-1), backend=tpu_backend)
    x, w = torch.randn(4, 6), torch.randn(6, 3)
    d = x.to(NAME) + 1  # pending when the compiled graph starts
    out = fn(d, w.to(NAME)) * 2  # and its result feeds the pending graph again
    torch.testing.assert_close(out.cpu(), ((x + 1) @ w).softmax(-1) * 2, rtol=1e-5, atol=1e-6)


def test_switching_mode_runs_what_is_pending():
    d = torch.ones(3, device=NAME) * 4
    torch_pjrt.reset_metrics()
    e = d + 1
    with torch_pjrt.eager_mode("strict"):
        assert m("fused_flushes") == {"eager mode change": 1}
        f = e * 2  # runs at once
    assert torch_pjrt.get_eager_mode() == "fused"
    torch.testing.assert_close(f.cpu(), torch.full((3,), 10.0))
    with pytest.raises(ValueError, match="not one of"):
        torch_pjrt.set_eager_mode("lazy")


def test_autograd_matches_cpu():
    x = torch.randn(6, 5)
    w = torch.randn(5, 4, requires_grad=True)
    dw = w.detach().to(NAME).requires_grad_()
    loss = (x.to(NAME) @ dw).sigmoid().pow(2).mean()
    loss.backward()
    (x @ w).sigmoid().pow(2).mean().backward()
    torch.testing.assert_close(dw.grad.cpu(), w.grad, rtol=1e-5, atol=1e-6)


def test_a_32_token_decode_compiles_nothing_after_warm_up():
    """Greedy generate() with a static cache, 32 tokens: the second run over
    the same prompt length records the same per-token graphs and compiles
    no program; the tokens are CPU's."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    kwargs = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False,
                  cache_implementation="static")
    prompts = [torch.tensor([[5, 17, 42, 99, 7]]), torch.tensor([[8, 3, 120, 64, 11]])]
    expected = [model.generate(p, **kwargs) for p in prompts]
    model.to(NAME)
    compiled = []
    for prompt, want in zip(prompts, expected):
        before = m("fused_graphs_compiled")
        got = model.generate(prompt.to(NAME), **kwargs).cpu()
        compiled.append(m("fused_graphs_compiled") - before)
        assert torch.equal(got, want)
    assert compiled[0] > 0 and compiled[1] == 0, compiled
