"""Strided views read and written with slices (csrc/backend/strided_box.h).

A non-contiguous view that is a box of its storage (each dim's stride a
whole multiple of the next, no overlap) is read and written by reshaping a
window of the flat storage and slicing it; overlapping views keep the
gather/scatter. Results are compared with CPU PyTorch exactly (these are
copies), in strict and fused eager; the programs' text shows which path
each view took.
"""

from __future__ import annotations

import json
from typing import Callable

import pytest
import torch

import torch_pjrt

DEV = torch_pjrt.settings().device_name

# name -> (view of a [4, 6, 10] tensor, whether it may be written through)
VIEWS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "last_dim_head": (lambda t: t[..., :5], True),
    "last_dim_tail": (lambda t: t[..., 3:], True),  # its window overhangs the storage
    "column": (lambda t: t[:, -1], True),
    "steps": (lambda t: t[::2, 1::3], True),
    "transpose": (lambda t: t.transpose(0, 1), True),
    "permute_slice": (lambda t: t.permute(2, 0, 1)[1:, :, 2:6], True),
    "transpose_steps": (lambda t: t.transpose(1, 2)[:, ::2, 1:], True),
    "select": (lambda t: t[1, :, 2], True),
    "diagonal": (lambda t: t[0].diagonal(), True),
    "one_element": (lambda t: t[2, 3, 4:5], True),
    "expanded": (lambda t: t[:, :1, 2:4].expand(-1, 4, -1), False),
    "overlapping_windows": (lambda t: t.reshape(-1)[:40].unfold(0, 8, 4), False),
    "as_strided_uneven": (lambda t: t.as_strided((3, 4), (20, 3), 7), True),
}

DTYPES = [torch.float32, torch.int64, torch.bfloat16, torch.bool]


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(VIEWS))
def test_view_reads_and_writes_match_cpu(name, dtype, mode):
    view, writable = VIEWS[name]
    base = (torch.randn(4, 6, 10, generator=torch.Generator().manual_seed(0)) * 10).to(dtype)
    with torch_pjrt.eager_mode(mode):
        got = view(base.to(DEV))
        torch.testing.assert_close(got.cpu(), view(base), rtol=0, atol=0)
        torch.testing.assert_close(got.contiguous().cpu(), view(base).contiguous(), rtol=0, atol=0)
        if not writable or dtype == torch.bool:
            return
        update = (torch.arange(view(base).numel()) % 7).reshape(view(base).shape).to(dtype)
        cpu, dev = base.clone(), base.to(DEV)
        view(cpu).copy_(update)
        view(dev).copy_(update.to(DEV))
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)
        cpu, dev = base.clone(), base.to(DEV)
        view(cpu).mul_(2)
        view(dev).mul_(2)
        torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0)


_SCRIPT = """
import glob, json, os, torch, torch_pjrt
from tests.test_strided_box import VIEWS
dev = torch_pjrt.settings().device_name
dump = os.environ["TORCH_PJRT_DUMP_DIR"]
seen, out = set(), {}

def new_programs(kind):
    texts = []
    for path in sorted(glob.glob(dump + "/*.mlir")):
        if path not in seen:
            seen.add(path)
            if kind in path:
                texts.append(open(path).read())
    return texts

base = torch.randn(4, 6, 10).to(dev)
for name, (view, writable) in VIEWS.items():
    new_programs("")
    view(base).cpu()
    reads = new_programs("view_read")
    out[name] = {"read_gather": any("stablehlo.gather" in t for t in reads),
                 "read_programs": len(reads)}
    if writable:
        view(base.clone()).copy_(torch.ones_like(view(base)))
        writes = new_programs("view_write")
        out[name]["write_scatter"] = any("stablehlo.scatter" in t for t in writes)
print("RESULT " + json.dumps(out))
"""


def test_boxes_use_slices_and_overlaps_keep_the_gather(python_in_subprocess, tmp_path):
    result = python_in_subprocess(_SCRIPT, env={"TORCH_PJRT_DUMP_DIR": str(tmp_path),
                                                "TORCH_PJRT_EAGER": "strict"})
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr
    out = json.loads(lines[0][len("RESULT "):])
    for name in ["last_dim_head", "last_dim_tail", "column", "steps", "permute_slice",
                 "transpose_steps", "diagonal", "expanded"]:
        assert out[name]["read_programs"] >= 1 and not out[name]["read_gather"], (name, out[name])
    for name in ["last_dim_head", "last_dim_tail", "column", "steps", "transpose_steps"]:
        assert out[name]["write_scatter"] is False, (name, out[name])
    # Overlapping or uneven strides: the general gather and scatter.
    assert out["overlapping_windows"]["read_gather"], out["overlapping_windows"]
    assert out["as_strided_uneven"]["read_gather"], out["as_strided_uneven"]
    assert out["as_strided_uneven"]["write_scatter"], out["as_strided_uneven"]
