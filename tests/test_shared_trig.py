"""sin/cos values read by several ops are computed once (csrc/eager/shared_trig.h).

On the XLA CPU plugin, XLA would recompute a fused sin/cos inside every
consumer with scalar libm calls; torch_pjrt puts an optimization barrier on
such a value when two or more ops read it (a rotary embedding's tables), in
compiled graphs and in fused eager programs alike, and leaves single-use
values fusable. Asserted on the programs' text (TORCH_PJRT_DUMP_DIR) and on
results against CPU PyTorch.
"""

from __future__ import annotations

import json

import torch

import torch_pjrt

DEV = torch_pjrt.settings().device_name


def rope(q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A rotary embedding as Transformers writes it: the cos/sin tables are
    scaled, then read by q and k."""
    inv = torch.arange(1, 9, device=pos.device, dtype=torch.float32) / 8
    freqs = pos[:, None].float() * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos() * 0.5, emb.sin() * 0.5

    def rotate(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([-x[..., 8:], x[..., :8]], -1)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


_SCRIPT = """
import glob, json, os, torch, torch_pjrt
from tests.test_shared_trig import rope
dev = torch_pjrt.settings().device_name
dump = os.environ["TORCH_PJRT_DUMP_DIR"]
seen = set()

def barriers():
    # Barriers in the programs compiled since the last call.
    count = 0
    for path in sorted(glob.glob(dump + "/*.mlir")):
        if path not in seen:
            seen.add(path)
            count += open(path).read().count("stablehlo.optimization_barrier")
    return count

torch.manual_seed(0)
q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16)
pos = torch.arange(6)
out = {"platform": torch_pjrt.runtime.info()["platform_name"]}
qd, kd, pd = q.to(dev), k.to(dev), pos.to(dev)
ref = rope(q, k, pos)

got = torch.compile(rope, backend="tpu")(qd, kd, pd)
out["compiled_close"] = all(torch.allclose(g.cpu(), r, rtol=1e-5, atol=1e-6) for g, r in zip(got, ref))
out["compiled"] = barriers()

x = torch.randn(4096)
single = torch.compile(lambda x: ((x.cos() * 2 + 1).sum(), x.sin() * x), backend="tpu")(x.to(dev))
out["single_close"] = (torch.allclose(single[0].cpu(), (x.cos() * 2 + 1).sum(), rtol=1e-5)
                       and torch.allclose(single[1].cpu(), x.sin() * x, rtol=1e-5, atol=1e-6))
out["single"] = barriers()

with torch_pjrt.eager_mode("fused"):
    got = [t.cpu() for t in rope(qd, kd, pd)]
out["fused_close"] = all(torch.allclose(g, r, rtol=1e-5, atol=1e-6) for g, r in zip(got, ref))
out["fused"] = barriers()

# Training: the forward and backward graphs, gradients against CPU.
qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
sum(t.square().sum() for t in rope(qg, kg, pos)).backward()
qt, kt = qd.clone().requires_grad_(), kd.clone().requires_grad_()
step = torch.compile(lambda q, k: sum(t.square().sum() for t in rope(q, k, pd)), backend="tpu")
step(qt, kt).backward()
out["grads_close"] = (torch.allclose(qt.grad.cpu(), qg.grad, rtol=1e-4, atol=1e-5)
                      and torch.allclose(kt.grad.cpu(), kg.grad, rtol=1e-4, atol=1e-5))
out["training"] = barriers()
print("RESULT " + json.dumps(out))
"""


def test_rotary_tables_are_computed_once(python_in_subprocess, tmp_path):
    result = python_in_subprocess(_SCRIPT, env={"TORCH_PJRT_DUMP_DIR": str(tmp_path)}, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr
    out = json.loads(lines[0][len("RESULT "):])
    assert out["compiled_close"] and out["single_close"] and out["fused_close"], out
    assert out["grads_close"], out
    if out["platform"] != "cpu":  # the barrier is the CPU plugin's remedy only
        assert out["compiled"] == out["fused"] == out["single"] == 0, out
        return
    # cos * 0.5 and sin * 0.5 are each read by q and by k: one barrier each.
    assert out["compiled"] == 2, out
    assert out["fused"] == 2, out
    # Read once (a reduction over cos, a product with sin): left to fuse.
    assert out["single"] == 0, out
    # The forward graph shares the two tables; the backward reads them as
    # saved inputs, which need none.
    assert out["training"] == 2, out
