"""nn.SyncBatchNorm on tpu. Its ops (batch_norm_stats, _elemt,
_gather_stats(_with_counts), _backward_reduce, _backward_elemt) have only
CUDA kernels in torch, so SyncBatchNorm failed ("Could not run ... CPU
backend"). Two ranks (threads on two CPU-plugin devices, XLA collectives)
must match nn.BatchNorm2d on the whole batch on CPU; each op is checked
against the statistics and gradients CPU PyTorch computes."""

from __future__ import annotations

import json

import pytest
import torch

import torch_pjrt

NAME = torch_pjrt.settings().device_name


def test_two_ranks_match_batch_norm_on_the_whole_batch(python_in_subprocess):
    proc = python_in_subprocess("""
        import json
        import torch, torch_pjrt
        from torch_pjrt.distributed import run_threads

        torch.manual_seed(0)
        C = 3
        x = torch.randn(8, C, 5, 4)
        w = torch.randn(8, C, 5, 4)
        ref = torch.nn.BatchNorm2d(C, momentum=0.3)
        with torch.no_grad():
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-0.5, 0.5)
        state = {k: v.clone() for k, v in ref.state_dict().items()}
        xr = x.clone().requires_grad_()
        for _ in range(2):
            out = ref(xr)
            (out * w).sum().backward()

        def rank(r):
            m = torch.nn.SyncBatchNorm(C, momentum=0.3)
            m.load_state_dict(state)
            m.to("tpu")
            xs = x[r * 4:(r + 1) * 4].clone().to("tpu").requires_grad_()
            for _ in range(2):
                o = m(xs)
                (o * w[r * 4:(r + 1) * 4].to("tpu")).sum().backward()
            return (o.detach().cpu(), xs.grad.cpu(), m.weight.grad.cpu(), m.bias.grad.cpu(),
                    m.running_mean.cpu(), m.running_var.cpu(),
                    torch_pjrt.metrics()["fallback_ops"])

        res = run_threads(rank, 2)

        def err(a, b):
            return float((a - b).abs().max())

        print(json.dumps({
            "out": err(torch.cat([r[0] for r in res]), out.detach()),
            "input_grad": err(torch.cat([r[1] for r in res]), xr.grad),
            # Each rank's parameter gradient is its share (DDP sums them).
            "weight_grad": err(res[0][2] + res[1][2], ref.weight.grad),
            "bias_grad": err(res[0][3] + res[1][3], ref.bias.grad),
            "running": max(err(r[4], ref.running_mean) + err(r[5], ref.running_var) for r in res),
            "fallbacks": res[0][6],
        }))
    """, env={"TORCH_PJRT_CPU_DEVICES": "2"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["fallbacks"] == {}
    assert r["out"] < 1e-5 and r["input_grad"] < 1e-5 and r["running"] < 1e-5, r
    assert r["weight_grad"] < 1e-4 and r["bias_grad"] < 1e-4, r


def _data(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 4, 3, 5, generator=g), torch.randn(6, 4, 3, 5, generator=g)


def test_stats_and_elemt_match_cpu_batch_norm():
    x, _ = _data()
    mean, invstd = torch.batch_norm_stats(x.to(NAME), 1e-5)
    torch.testing.assert_close(mean.cpu(), x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)
    var = x.var((0, 2, 3), unbiased=False)
    torch.testing.assert_close(invstd.cpu(), (var + 1e-5).rsqrt(), rtol=1e-5, atol=1e-6)
    weight, bias = torch.rand(4) + 0.5, torch.randn(4)
    y = torch.batch_norm_elemt(x.to(NAME), weight.to(NAME), bias.to(NAME), mean, invstd, 1e-5)
    expected = torch.nn.functional.batch_norm(x, None, None, weight, bias, training=True, eps=1e-5)
    torch.testing.assert_close(y.cpu(), expected, rtol=1e-5, atol=1e-5)
    half_mean, _ = torch.batch_norm_stats(x.to(NAME).bfloat16(), 1e-5)
    assert half_mean.dtype == torch.float32  # statistics of half input stay float32, as on CUDA


def test_gather_with_unequal_counts_merges_like_one_batch():
    x, _ = _data(2)
    parts = [x[:1], x[1:4], x[4:]]
    stats = [torch.batch_norm_stats(p.to(NAME), 1e-5) for p in parts]
    means = torch.stack([s[0] for s in stats])
    invstds = torch.stack([s[1] for s in stats])
    counts = torch.tensor([float(p.numel() // 4) for p in parts], device=NAME)
    running_mean, running_var = torch.zeros(4, device=NAME), torch.ones(4, device=NAME)
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        x.to(NAME), means, invstds, running_mean, running_var, 0.1, 1e-5, counts)
    cpu_rm, cpu_rv = torch.zeros(4), torch.ones(4)
    torch.nn.functional.batch_norm(x, cpu_rm, cpu_rv, training=True, momentum=0.1, eps=1e-5)
    torch.testing.assert_close(mean.cpu(), x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(invstd.cpu(), (x.var((0, 2, 3), unbiased=False) + 1e-5).rsqrt(),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(running_mean.cpu(), cpu_rm, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(running_var.cpu(), cpu_rv, rtol=1e-4, atol=1e-5)
    # Equal counts, the int form.
    even = torch.batch_norm_gather_stats(x.to(NAME), means[1:2].repeat(2, 1), invstds[1:2].repeat(2, 1),
                                         None, None, 0.1, 1e-5, 45)
    torch.testing.assert_close(even[0].cpu(), means[1].cpu(), rtol=1e-5, atol=1e-6)


def test_backward_reduce_and_elemt_give_batch_norms_gradients():
    x, dy = _data(3)
    weight = torch.rand(4) + 0.5
    xc = x.clone().requires_grad_()
    wc = weight.clone().requires_grad_()
    bc = torch.zeros(4, requires_grad=True)
    torch.nn.functional.batch_norm(xc, None, None, wc, bc, training=True, eps=1e-5).backward(dy)
    xd, dyd, wd = x.to(NAME), dy.to(NAME), weight.to(NAME)
    mean, invstd = torch.batch_norm_stats(xd, 1e-5)
    sum_dy, sum_dy_xmu, grad_w, grad_b = torch.batch_norm_backward_reduce(
        dyd, xd, mean, invstd, wd, True, True, True)
    torch.testing.assert_close(grad_w.cpu(), wc.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_b.cpu(), bc.grad, rtol=1e-4, atol=1e-5)
    count = torch.tensor([x.numel() // 4], dtype=torch.int32, device=NAME)
    grad_x = torch.batch_norm_backward_elemt(dyd, xd, mean, invstd, wd, sum_dy, sum_dy_xmu, count)
    torch.testing.assert_close(grad_x.cpu(), xc.grad, rtol=1e-4, atol=1e-5)


def test_update_stats_matches_the_cpu_kernel_and_errors_name_the_op():
    x, _ = _data(4)
    rm, rv = torch.zeros(4), torch.ones(4)
    rmd, rvd = rm.to(NAME), rv.to(NAME)
    expected = torch.batch_norm_update_stats(x, rm, rv, 0.2)
    torch_pjrt.reset_metrics()
    got = torch.batch_norm_update_stats(x.to(NAME), rmd, rvd, 0.2)
    for g, e in zip((*got, rmd, rvd), (*expected, rm, rv)):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-5, atol=1e-6)
    assert torch_pjrt.metrics()["fallback_ops"] == {}
    with pytest.raises(RuntimeError, match="batch_norm_elemt: mean must have 4 elements"):
        torch.batch_norm_elemt(x.to(NAME), None, None, torch.zeros(3, device=NAME),
                               torch.ones(4, device=NAME), 1e-5)
