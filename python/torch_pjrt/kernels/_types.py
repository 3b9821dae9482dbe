"""Tensor types between torch, MLIR text and JAX."""
from __future__ import annotations

import re

import torch

_MLIR_ELEMENT = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "i1": torch.bool,
    "ui8": torch.uint8, "ui16": torch.uint16, "ui32": torch.uint32, "ui64": torch.uint64,
    "complex<f32>": torch.complex64, "complex<f64>": torch.complex128,
    "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2,
}
_TORCH_ELEMENT = {v: k for k, v in _MLIR_ELEMENT.items()}

_TENSOR = re.compile(r"^tensor<(.*)>$")


def mlir_type(dtype: torch.dtype, shape) -> str:
    """`tensor<2x3xf32>` for a float32 [2, 3] tensor."""
    element = _TORCH_ELEMENT.get(dtype)
    if element is None:
        raise TypeError(f"{dtype} has no StableHLO element type torch-pjrt knows")
    return "tensor<" + "".join(f"{d}x" for d in shape) + element + ">"


def parse_mlir_type(text: str) -> tuple[torch.dtype, list[int]]:
    """The torch dtype and static shape of `tensor<...>`; dynamic dims and
    unknown element types are refused."""
    m = _TENSOR.match(text.strip())
    if not m:
        raise TypeError(f"'{text}' is not a ranked tensor type")
    body = m.group(1)
    if "," in body:  # an encoding (sparsity, bounds) after the element type
        raise TypeError(f"'{text}': tensor encodings are not supported")
    parts = body.split("x")
    # The element type is what follows the last dimension; complex<f32>
    # holds no 'x', f8E4M3FN neither.
    dims, element = [], body
    while parts and (parts[0].isdigit() or parts[0] == "?"):
        if parts[0] == "?":
            raise TypeError(f"'{text}' has a dynamic dimension: export the kernel at static "
                            "shapes (refine a shape-polymorphic module first)")
        dims.append(int(parts.pop(0)))
        element = "x".join(parts)
    dtype = _MLIR_ELEMENT.get(element)
    if dtype is None:
        raise TypeError(f"'{text}': element type {element} has no torch dtype")
    return dtype, dims


def jax_dtype(dtype: torch.dtype):
    import jax.numpy as jnp
    names = {torch.bfloat16: jnp.bfloat16, torch.bool: jnp.bool_}
    if dtype in names:
        return names[dtype]
    return jnp.dtype(str(dtype).replace("torch.", ""))


def torch_dtype(jax_dtype) -> torch.dtype:
    name = str(jax_dtype)
    mapping = {"bfloat16": torch.bfloat16, "bool": torch.bool}
    if name in mapping:
        return mapping[name]
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"JAX dtype {name} has no torch dtype")
    return dtype
