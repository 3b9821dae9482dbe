"""The meta (fake) kernel of aten::_grouped_mm, as wide as the kernels that
run it: torch 2.13's meta accepts bfloat16 only (the CUDA kernel's limit),
while CPU PyTorch and torch-pjrt's lowering take float32, bfloat16 and
float16. With torch's meta, torch.compile of a float32 MoE model failed
while tracing, before any kernel ran. The checks and shapes here are the
lowering's (csrc/ops/grouped_matmul.cc); it replaces the Meta kernel for
every device, since a meta kernel cannot tell devices apart.
"""
from __future__ import annotations

from typing import Optional

import torch

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_library: Optional[torch.library.Library] = None


def _meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    torch._check(mat_a.dim() in (2, 3), lambda: "mat_a has to be 2 or 3d")
    torch._check(mat_b.dim() in (2, 3), lambda: "mat_b has to be 2 or 3d")
    torch._check(mat_a.dtype in _FLOATS,
                 lambda: f"Expected mat_a to be Float32, BFloat16 or Float16 matrix, got {mat_a.dtype}")
    torch._check(mat_b.dtype == mat_a.dtype,
                 lambda: f"Expected mat_a and mat_b to have the same dtype, got {mat_a.dtype} and {mat_b.dtype}")
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    torch._check((offs is not None) == (a2 or b2), lambda: "Have to provide offsets if there is a "
                 "2d matrix, or no offset if both matrices are 3d")
    torch._check(bias is None, lambda: "Bias tensor provided, but it is not supported yet.")
    torch._check(out_dtype is None or out_dtype == mat_a.dtype,
                 lambda: "Grouped gemm output dtype must match `mat_a` dtype")
    torch._check(mat_a.size(-1) == mat_b.size(-2),
                 lambda: "contraction dimension of mat_a and mat_b must match")
    if offs is not None:
        torch._check(offs.dtype == torch.int32, lambda: "Offsets have to be int32")
        torch._check(offs.dim() == 1, lambda: f"Offsets tensor must be 1D, but got offs.dim()={offs.dim()}.")
    if a2 and b2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a2:
        torch._check(offs.size(0) == mat_b.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b2:
        torch._check(offs.size(0) == mat_a.size(0), lambda: "matrix batch sizes have to match")
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        torch._check(mat_a.size(0) == mat_b.size(0), lambda: "batched dimension has to match")
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    return mat_a.new_empty(size)


def install() -> None:
    """Replaces torch's meta in the three places tracing looks: the Meta
    dispatch key, the Python-dispatcher kernel (py_kernels), and meta_table."""
    global _library
    if _library is not None:
        return
    import warnings

    _library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        _library.impl("_grouped_mm", _meta, "Meta")
    op = torch.ops.aten._grouped_mm.default
    op.py_kernels[torch._C.DispatchKey.Meta] = _meta
    op._dispatch_cache.clear()
    from torch._decomp import meta_table
    meta_table[op] = _meta
