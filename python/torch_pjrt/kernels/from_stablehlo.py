"""`stablehlo_op`: a StableHLO module, as MLIR text or bytecode (portable
artifacts included), as a PyTorch operator.

    add_one = torch_pjrt.stablehlo_op("mylib::add_one", '''
      module {
        func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %one = stablehlo.constant dense<1.0> : tensor<4xf32>
          %y = stablehlo.add %x, %one : tensor<4xf32>
          return %y : tensor<4xf32>
        }
      }''')

The module's types are fixed: each call's tensors are checked against the
entry's argument types (dtype and shape) and a mismatch raises as an aten op
would, naming the op, the argument and both types. Bytecode is turned into
text with the MLIR bindings jaxlib ships, so it needs jax installed; text
does not.
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from ._custom_op import KernelOp, check_custom_calls, define_kernel_op, kernel_symbol_prefix
from ._module_text import custom_calls_in, parse_module
from ._types import mlir_type, parse_mlir_type

__all__ = ["stablehlo_op", "bytecode_to_text"]


def bytecode_to_text(data: bytes) -> str:
    """MLIR bytecode (a StableHLO portable artifact, or plain) as text."""
    try:
        from jax._src.interpreters import mlir as jax_mlir
        from jax._src.lib import _jax
        from jax._src.lib.mlir import ir
    except ImportError as e:
        raise ImportError("torch_pjrt.stablehlo_op reads bytecode with the MLIR bindings of "
                          "jaxlib: pip install jax==0.10.2 jaxlib==0.10.2, or pass the module "
                          "as text") from e
    with jax_mlir.make_ir_context():
        try:
            module = _jax.mlir.deserialize_portable_artifact(bytes(data))
        except Exception:
            try:
                module = ir.Module.parse(bytes(data))
            except Exception as e:
                raise ValueError("stablehlo_op: the bytes are neither a StableHLO portable "
                                 f"artifact nor MLIR bytecode ({e})") from e
        return module.operation.get_asm(enable_debug_info=False)


def stablehlo_op(name: str, module: Union[str, bytes], *, schema: Optional[str] = None,
                 entry: str = "main") -> KernelOp:
    """Registers `module` (its function `entry`) as the operator `name`
    ("ns::op"); returns the KernelOp (`.op` is the operator). The default
    schema takes one tensor per argument of the entry and returns its
    results."""
    text = bytecode_to_text(module) if isinstance(module, (bytes, bytearray)) else module
    check_custom_calls(name, custom_calls_in(text))
    kernel = parse_module(text, kernel_symbol_prefix(name, text), entry=entry)
    params = [parse_mlir_type(p) for p in kernel.params]
    results = [parse_mlir_type(r) for r in kernel.results]
    if schema is None:
        args = ", ".join(f"Tensor a{i}" for i in range(len(params)))
        rets = "Tensor" if len(results) == 1 else "(" + ", ".join(["Tensor"] * len(results)) + ")"
        schema = f"({args}) -> {rets}"
    parsed = torch._C.parse_schema(name + schema)
    tensor_args = [a for a in parsed.arguments if isinstance(a.type, torch.TensorType)]
    if len(tensor_args) != len(params) or len(tensor_args) != len(parsed.arguments):
        raise ValueError(f"stablehlo_op {name}: the schema must take exactly the module's "
                         f"{len(params)} tensor arguments")
    if len(parsed.returns) != len(results):
        raise ValueError(f"stablehlo_op {name}: the schema returns {len(parsed.returns)} values, "
                         f"the module {len(results)}")

    def check(types: list[tuple[torch.dtype, list[int]]]) -> None:
        for i, ((dtype, shape), (want_dtype, want_shape)) in enumerate(zip(types, params)):
            if dtype != want_dtype or list(shape) != list(want_shape):
                raise RuntimeError(
                    f"{name}: argument {i} ('{tensor_args[i].name}') is {mlir_type(dtype, shape)} "
                    f"({dtype}, shape {list(shape)}) but the module takes "
                    f"{mlir_type(want_dtype, want_shape)} ({want_dtype}, shape {list(want_shape)})")

    def lower(args: list):
        check([(d, s) for d, s in args])
        return kernel

    def fake(*tensors):
        check([(t.dtype, list(t.shape)) for t in tensors])
        device = tensors[0].device if tensors else torch.device("cpu")
        made = [torch.empty(s, dtype=d, device=device) for d, s in results]
        return made[0] if len(made) == 1 else tuple(made)

    return define_kernel_op(name, schema, lower, fake)
